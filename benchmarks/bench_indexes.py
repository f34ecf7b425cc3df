"""Store-layer index speed: queries right after a write, incremental indexes vs a full rebuild.

For each size N (10k and 100k documents; 1M with ``--full``) one SQLite store is filled with
synthetic facts (Zipf-distributed words, clustered float32 vectors), then, in the same run:

* **build** — the first keyword / vector query of a fresh store object (postings read from the
  word index, the vector matrix from the embeddings table): the cost a full rebuild pays;
* **mixed, incremental** — one write before every query (a new fact with its vector; every
  fourth write supersedes a fact: delete + add), then ``keyword_search`` + ``vector_search``:
  the indexes follow in place (this module's subject);
* **mixed, full rebuild (baseline)** — the same, with the in-process caches dropped before each
  query, so every query rebuilds them (what a store without incremental indexes pays);
* **read-only** — the same queries with no writes;
* **ANN** — an HNSW index (hnswlib) over the same vectors: build time, query p50/p95 beside exact
  cosine, and recall@10 of the HNSW list against the exact list;
* **RSS** — peak resident memory of this process after the size (``ru_maxrss``), and at 100k
  (2k with ``--tiny``) of a fresh process opening the facts and answering 20 queries: the
  store's keyword path, keyword + vector, and bm25s indexing the same texts (bm25s is a peer
  installed into the benchmark's environment: ``pip install bm25s``).

    python benchmarks/bench_indexes.py            # 10k, 100k (a few minutes)
    python benchmarks/bench_indexes.py --full     # + 1M
    python benchmarks/bench_indexes.py --tiny     # smoke run (seconds)

Latencies are per query pair (keyword + vector), in ms; ratios are within the same run.
Seeded (``--seed``): the same texts, vectors and queries every run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from mindpalace.scope import Scope
from mindpalace.settings import StoreSettings
from mindpalace.store import SQLiteStore
from mindpalace.store.vectors import ExactCosineIndex, HnswIndex

SCOPE = Scope("bench", "user-1", "agent-1", "")
MODEL = "bench-128"
DIM = 128
VOCAB = 20_000  # distinct words
WORDS_PER_DOC = (6, 20)


class Corpus:
    """Seeded synthetic facts: Zipf words, vectors around 1,000 cluster centres."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.words = [f"w{i}" for i in range(VOCAB)]
        self.centres = self.rng.standard_normal((1000, DIM)).astype(np.float32)

    def texts(self, n: int) -> list[str]:
        lengths = self.rng.integers(*WORDS_PER_DOC, size=n)
        ranks = np.minimum(self.rng.zipf(1.2, size=int(lengths.sum())) - 1, VOCAB - 1)
        out, at = [], 0
        for length in lengths.tolist():
            out.append(" ".join(self.words[r] for r in ranks[at : at + length]))
            at += length
        return out

    def vectors(self, n: int) -> np.ndarray:
        centre = self.centres[self.rng.integers(0, len(self.centres), size=n)]
        return centre + 0.6 * self.rng.standard_normal((n, DIM)).astype(np.float32)

    def query(self) -> tuple[str, np.ndarray]:
        words = [self.words[int(min(self.rng.zipf(1.3), VOCAB) - 1)] for _ in range(3)]
        return " ".join(words), self.vectors(1)[0]


def fill(store: SQLiteStore, corpus: Corpus, n: int, start: int = 0, chunk: int = 5_000) -> None:
    for at in range(start, start + n, chunk):
        size = min(chunk, start + n - at)
        texts = corpus.texts(size)
        with store.transaction():
            ids = [store.index_document(SCOPE, "fact", f"f{at + i}", t) for i, t in enumerate(texts)]
            store.put_embeddings(ids, corpus.vectors(size), MODEL)


def pct(samples: list[float]) -> tuple[float, float]:
    a = np.asarray(samples) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def query_pair(store: SQLiteStore, corpus: Corpus) -> float:
    text, vector = corpus.query()
    t = time.perf_counter()
    store.keyword_search(SCOPE, text, k=50)
    store.vector_search(SCOPE, vector, MODEL, k=50)
    return time.perf_counter() - t


def mixed(store: SQLiteStore, corpus: Corpus, queries: int, *, rebuild: bool) -> list[float]:
    """One write before every query; `rebuild`: drop the in-process caches first (baseline)."""
    out = []
    for i in range(queries):
        ref = f"m{rebuild}{i}"
        if i % 4 == 3:  # supersede: the previous fact replaced (delete + add)
            store.delete_documents(SCOPE, "fact", [f"m{rebuild}{i - 1}"])
        doc = store.index_document(SCOPE, "fact", ref, corpus.texts(1)[0])
        store.put_embeddings([doc], corpus.vectors(1), MODEL)
        if rebuild:
            store._bm25 = None
            store._vec_cache.clear()
        out.append(query_pair(store, corpus))
    return out


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def ann_rows(corpus: Corpus, n: int, queries: int, ef: int) -> dict[str, float]:
    """HNSW vs exact over n vectors: build seconds, query p50/p95 ms, recall@10."""
    ids = np.arange(n, dtype=np.int64)
    matrix = corpus.vectors(n)
    exact = ExactCosineIndex(ids, matrix)
    build = time.perf_counter()
    ann = HnswIndex(ids, matrix, ef_search=ef)
    build = time.perf_counter() - build
    qs = corpus.vectors(queries)
    hits, t_exact, t_ann = 0, [], []
    for q in qs:
        t_exact.append(timed(lambda q=q: exact.search(q, 10)))
        t_ann.append(timed(lambda q=q: ann.search(q, 10)))
        hits += len(set(exact.search(q, 10)[0].tolist()) & set(ann.search(q, 10)[0].tolist()))
    return {
        "build_s": build, "exact": pct(t_exact)[1], "exact50": pct(t_exact)[0],
        "ann": pct(t_ann)[1], "ann50": pct(t_ann)[0], "recall": hits / (10 * queries),
    }


def rss_child(which: str, path: Path, seed: int) -> None:
    """In a fresh process: open the `path` store's facts, answer 20 queries, print peak RSS (MB).

    ``mindpalace`` / ``mindpalace+vec``: SQLiteStore keyword search (and vector search);
    ``bm25s``: bm25s indexes the same texts (read from the file) and answers the same queries."""
    corpus = Corpus(seed + 1)
    queries = [corpus.query() for _ in range(20)]
    if which == "bm25s":
        import sqlite3

        import bm25s  # a peer, installed into the benchmark's environment only

        conn = sqlite3.connect(path)
        texts = [r[0] for r in conn.execute("SELECT search_text FROM docs ORDER BY id")]
        conn.close()
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(texts, stopwords=None, show_progress=False), show_progress=False)
        del texts
        for text, _ in queries:
            tokens = bm25s.tokenize([text], stopwords=None, show_progress=False)
            retriever.retrieve(tokens, k=10, show_progress=False)
    else:
        store = SQLiteStore(path, settings=StoreSettings(ann_min_vectors=0))
        for text, vector in queries:
            store.keyword_search(SCOPE, text, k=10)
            if which == "mindpalace+vec":
                store.vector_search(SCOPE, vector, MODEL, k=10)
        store.close()
    print(_peak_mb())


def _peak_mb() -> float:
    """This process's peak RSS in MB: VmHWM (reset by exec, unlike ru_maxrss, which a child
    inherits from the process that forked it on Linux), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss(path: Path, seed: int) -> dict[str, float]:
    """Peak RSS (MB) of each side, every one in its own process."""
    out = {}
    sides = ["mindpalace", "mindpalace+vec"]
    if importlib.util.find_spec("bm25s") is not None:  # a peer: absent unless installed
        sides.append("bm25s")
    for which in sides:
        done = subprocess.run(
            [sys.executable, __file__, "--rss-child", which, "--db", str(path), "--seed", str(seed)],
            check=True, capture_output=True, text=True, timeout=1800,
        )
        out[which] = float(done.stdout.strip().splitlines()[-1])
    return out


def run_size(n: int, queries: int, seed: int, folder: Path, console: Console) -> dict[str, object]:
    corpus = Corpus(seed)
    path = folder / f"n{n}.db"
    t = time.perf_counter()
    # Exact vectors in the store (ANN is measured separately below, same vectors' distribution).
    store = SQLiteStore(path, settings=StoreSettings(ann_min_vectors=0))
    fill(store, corpus, n)
    fill_s = time.perf_counter() - t
    store.close()
    store = SQLiteStore(path, settings=StoreSettings(ann_min_vectors=0))
    text, vector = corpus.query()
    build_kw = timed(lambda: store.keyword_search(SCOPE, text, k=50))
    build_vec = timed(lambda: store.vector_search(SCOPE, vector, MODEL, k=50))
    read_only = [query_pair(store, corpus) for _ in range(queries)]
    incremental = mixed(store, corpus, queries, rebuild=False)
    baseline = mixed(store, corpus, max(3, queries // 10), rebuild=True)
    store.close()
    ann = ann_rows(corpus, n, min(queries, 100), StoreSettings().hnsw_ef_search)
    rss = _peak_mb()
    peers = peak_rss(path, seed) if n in (2_000, 100_000) else {}
    console.print(f"  n={n:,}: filled in {fill_s:.1f}s")
    return {
        "n": n, "fill_s": fill_s, "build_kw": build_kw * 1000, "build_vec": build_vec * 1000,
        "read": pct(read_only), "incr": pct(incremental), "full": pct(baseline), "ann": ann,
        "rss": rss, "peers_rss": peers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also 1M documents (long)")
    parser.add_argument("--tiny", action="store_true", help="smoke run: 2,000 documents")
    parser.add_argument("--queries", type=int, default=200, help="queries per workload")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None, help="folder for the databases")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--rss-child", choices=["mindpalace", "mindpalace+vec", "bm25s"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        rss_child(args.rss_child, args.db, args.seed)
        return 0
    sizes = [2_000] if args.tiny else [10_000, 100_000] + ([1_000_000] if args.full else [])
    queries = 20 if args.tiny else args.queries
    console = Console(width=220)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = [run_size(n, queries, args.seed, Path(tmp), console) for n in sizes]
    table = Table(title="store indexes: query pair (keyword + vector, k=50) after one write, ms")
    for col in ("docs", "build kw/vec ms", "read-only p50/p95", "mixed incremental p50/p95",
                "mixed full rebuild p50/p95", "speed-up p95", "exact p50/p95", "HNSW p50/p95",
                "HNSW build s", "recall@10", "peak RSS MB"):
        table.add_column(col, justify="right")
    for r in rows:
        read, incr, full = r["read"], r["incr"], r["full"]
        ann = r["ann"]
        assert isinstance(read, tuple) and isinstance(incr, tuple) and isinstance(full, tuple)
        assert isinstance(ann, dict)
        table.add_row(
            f"{r['n']:,}", f"{r['build_kw']:.0f} / {r['build_vec']:.0f}",
            f"{read[0]:.1f} / {read[1]:.1f}", f"{incr[0]:.1f} / {incr[1]:.1f}",
            f"{full[0]:.0f} / {full[1]:.0f}", f"{full[1] / max(incr[1], 1e-9):.0f}×",
            f"{ann['exact50']:.2f} / {ann['exact']:.2f}", f"{ann['ann50']:.2f} / {ann['ann']:.2f}",
            f"{ann['build_s']:.1f}", f"{ann['recall']:.3f}", f"{r['rss']:.0f}",
        )
    console.print(table)
    for r in rows:
        peers = r["peers_rss"]
        assert isinstance(peers, dict)
        if peers:
            console.print(
                f"peak RSS, {r['n']:,} facts open + 20 queries (own process each): mindpalace "
                f"keyword {peers['mindpalace']:.0f} MB, keyword+vector {peers['mindpalace+vec']:.0f} MB; "
                + (f"bm25s {peers['bm25s']:.0f} MB (ratio {peers['mindpalace'] / peers['bm25s']:.2f})"
                   if "bm25s" in peers else "bm25s n/a (pip install bm25s into this environment)")
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
