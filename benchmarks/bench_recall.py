"""Recall latency at 10k / 100k / 1M stored facts vs a numpy brute-force cosine baseline.

One user scope is filled with generated facts (``entity:attribute`` keys, 6–12 words drawn
from a Zipf-distributed 20,000-word vocabulary, numbers mixed in), written through the store
protocol exactly as :class:`LongTermStore` stores them: a kv row in namespace ``facts``, a
``fact`` search document and its vector. Vectors come from the deterministic **hashing**
embedder (64-d by default) for generation speed — a neural embedder would make the 1M fill
take hours on 2 cores; search cost depends on the width, not on where vectors came from.

Per size, ``--queries`` queries (2–3 words of a random stored fact) are timed through:

* ``Session.recall(query, k)`` — the product path: working memory, FTS5 BM25 + exact cosine
  through the store, fusion, promotion of the fact hits (writes included);
* ``store.keyword_search`` and ``store.vector_search`` alone (k = recall_candidates);
* baseline: numpy brute-force cosine over the same vectors held in a float32 matrix.

Quality column: share of queries whose source fact is in the top-k (hit@k). Beside the wall
times, each ``Session.recall``'s CPU time (of the calling thread) p50 / p95: on a shared machine
the wall time also waits for the other processes, the CPU time is what the recall itself cost.

**Mixed mode** (same run, same store, after the read-only queries): one write before every
query, for each kind of write an agent makes — ``Session.remember`` (a fact, embedded at the
next recall), ``Session.add_message`` (a session message) and a step (``steps.begin`` +
``steps.evaluate``, which saves a ``step`` record) — then ``Session.recall`` timed alone, on
queries of their own (facts no read-only query and no other kind asked about: a repeated query
is served partly from the per-process document memos). The writes move the store's search generation, so every query after one pays for whatever the
indexes and caches rebuild. Targets: p95 ≤ 20 ms at 100k and ≤ 50 ms at 1M, read-only and
mixed.

**Peak RSS** at 100k facts (or the largest size below it): a fresh process opens the
workspace and runs the queries through ``Session.recall``; beside it a process indexing the
same fact texts with ``bm25s`` and running the same queries. bm25s is not a mindpalace
dependency: install it into its own environment and pass its interpreter, else "n/a"::

    python -m venv /tmp/mindpalace-bench-bm25s && /tmp/mindpalace-bench-bm25s/bin/pip install bm25s

    python benchmarks/bench_recall.py               # 10k and 100k (a few minutes)
    python benchmarks/bench_recall.py --million     # 10k, 100k, 1M (10-20 min to fill)
    python benchmarks/bench_recall.py --quick       # 1k facts, a smoke run

At 1M, fill a workspace once and reuse it: ``--sizes 1000000 --db DIR --fill-only``, then
``--sizes 1000000 --db DIR [--open-times]``. The first run that queries builds the HNSW graph
(minutes; the timing waits for it, column "HNSW wait") and the store saves it beside the
database, so later runs rank by it from their first query. ANN recall@10 is the share of the
exact numpy top-10 (ties counted) that the store's vector search returns.
"""

from __future__ import annotations

import os

# One query is one mat-vec: BLAS threads only add spin contention on a 2-core machine (same
# setting for the product path and the numpy baseline). Must be set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.facts.longterm import KIND, NAMESPACE, fact_id, fact_text
from mindpalace.facts.model import Fact
from mindpalace.timeutil import utcnow

TARGET_P95_MS = {100_000: 20.0, 1_000_000: 50.0}
TARGET_P95_MS_AT_100K = TARGET_P95_MS[100_000]
WRITE_KINDS = ("remember", "add_message", "step")
BM25S_PYTHON = Path("/tmp/mindpalace-bench-bm25s/bin/python")
RSS_AT = 100_000
VOCAB_SIZE = 20_000
WRITE_BATCH = 5_000


def make_vocab(rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < VOCAB_SIZE:
        n = int(rng.integers(3, 10))
        words.add("".join(rng.choice(letters, n)))
    return sorted(words)


FACT_BLOCK = 1_000  # facts are generated in blocks of this many, each from its own seed


def make_facts(
    start: int, count: int, vocab: list[str], seed: int | np.random.Generator
) -> list[Fact]:
    """Facts `start` .. `start + count - 1`: fact i depends only on (seed, i // FACT_BLOCK), so
    a database filled by one run (``--db``) holds exactly the facts the next run generates,
    whatever sizes either ran. Words are drawn for a whole block at once (vectorised). A
    generator as `seed` draws the seed from it."""
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(0, 2**62))
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    probs = 1.0 / ranks**1.1
    probs /= probs.sum()
    now = utcnow()
    facts: list[Fact] = []
    for block in range(start // FACT_BLOCK, -(-(start + count) // FACT_BLOCK)):
        rng = np.random.default_rng([seed, block])
        lengths = rng.integers(6, 13, FACT_BLOCK)
        words = rng.choice(len(vocab), int(lengths.sum()), p=probs).tolist()
        numbers = rng.integers(0, 100_000, FACT_BLOCK).tolist()
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        for j in range(FACT_BLOCK):
            i = block * FACT_BLOCK + j
            if not start <= i < start + count:
                continue
            drawn = words[bounds[j] : bounds[j + 1]]
            content = " ".join(vocab[w] for w in drawn) + f" {numbers[j]}"
            facts.append(Fact(f"entity{i}:{vocab[drawn[0]]}", content, importance=0.9, created_at=now))
    return facts


def fill(memory: Memory, scope: Any, facts: list[Fact]) -> np.ndarray:
    """Write facts as LongTermStore does (kv row + fact document + vector); returns the vectors."""
    store, embedder = memory.store, memory.embedder
    assert embedder is not None
    out = []
    for i in range(0, len(facts), WRITE_BATCH):
        chunk = [Fact(f.key, f.content, importance=f.importance, created_at=f.created_at,
                      id=fact_id(f.key, 1)) for f in facts[i : i + WRITE_BATCH]]
        texts = [fact_text(f) for f in chunk]
        vectors = embedder.embed(texts)
        with store.transaction():
            ids = []
            for f, text in zip(chunk, texts, strict=True):
                store.kv_put(scope, NAMESPACE, f.id, f.to_json())
                ids.append(store.index_document(scope, KIND, f.id, text, {"key": f.key, "fact_id": f.id}))
            store.put_embeddings(ids, vectors, embedder.model_id)
        out.append(vectors)
    return np.concatenate(out)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return (time.perf_counter() - t0) * 1000, result


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall ms, CPU ms of this thread, result): on a shared machine the wall time waits for
    the other processes too; the thread's CPU time is what the call itself cost."""
    t0, c0 = time.perf_counter(), time.thread_time()
    result = fn()
    return (time.perf_counter() - t0) * 1000, (time.thread_time() - c0) * 1000, result


def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = np.random.default_rng(args.seed)
    vocab = make_vocab(rng)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mindpalace-bench-recall-") as tmp:
        ws = args.db if args.db is not None else Path(tmp) / "ws"
        settings: dict[str, Any] = {
            "embed": {"provider": "hashing", "dimensions": args.dim},
            "facts": {"keyword_max_df_ratio": args.max_df_ratio},
        }
        memory = Memory.open(ws, **settings)
        session = memory.session("bench", user="bench-user", agent="bench")
        scope = session.facts.fact_scope
        stored = _stored_facts(ws, args)  # facts a previous run (--db) left in the workspace
        all_facts: list[Fact] = []
        matrix = np.zeros((0, args.dim), dtype=np.float32)
        rss_at = max([s for s in args.sizes if s <= RSS_AT], default=None)
        for size in args.sizes:
            t0 = time.perf_counter()
            new = make_facts(len(all_facts), size - len(all_facts), vocab, args.seed)
            reused = min(max(stored - len(all_facts), 0), len(new))
            if reused:  # already in the database: only the vectors of the numpy baseline
                matrix = np.concatenate([matrix, _stored_vectors(ws, args, len(all_facts), reused)])
            if reused < len(new):
                matrix = np.concatenate([matrix, fill(memory, scope, new[reused:])])
            all_facts += new
            if args.db is not None and len(all_facts) > stored:
                stored = _record_fill(ws, args, matrix)
            fill_s = time.perf_counter() - t0
            if args.fill_only:
                rows.append({"facts": size, "fill_s": round(fill_s, 1)})
                print(f"{size:,} facts in {ws} ({fill_s:.0f} s)")
                continue
            picks = rng.choice(len(all_facts), args.queries, replace=False)
            queries = make_queries(all_facts, picks, rng)
            mixed = make_queries(all_facts, mixed_picks(len(all_facts), picks, args, rng), rng)
            row = {"facts": size, "fill_s": round(fill_s, 1), "reused": reused,
                   **measure(memory, session, scope, queries, matrix, all_facts, args)}
            row.update(measure_mixed(session, [q for q, _ in mixed], vocab, rng, args))
            if size == rss_at and not args.no_rss:
                row.update(measure_rss(Path(tmp), ws, settings, all_facts, [q for q, _ in queries], args))
            rows.append(row)
            print_table(args, rows)
        memory.close()
        if args.open_times and rows and not args.fill_only:
            rows[-1].update(measure_open(ws, settings, [q for q, _ in queries][:20], args))
            print_open(rows[-1])
    return rows


def make_queries(
    facts: list[Fact], picks: np.ndarray, rng: np.random.Generator
) -> list[tuple[str, str]]:
    """(query, fact id) per picked fact: 2–3 of its words, in its order (not its number)."""
    queries = []
    for p in picks:
        words = facts[p].content.split()[:-1]
        take = rng.choice(len(words), min(len(words), int(rng.integers(2, 4))), replace=False)
        queries.append((" ".join(words[t] for t in sorted(take)), facts[p].id or fact_id(facts[p].key, 1)))
    return queries


def mixed_picks(
    n_facts: int, read_only: np.ndarray, args: argparse.Namespace, rng: np.random.Generator
) -> np.ndarray:
    """The facts the mixed queries ask about: ``--mixed-queries`` per write kind, none asked by
    the read-only queries nor by another kind (as far as the facts go). A repeated query finds
    its candidates in the per-process document memos, so mixed queries that repeated the
    read-only ones ran partly from memory: with 20,000-document memos they looked as cheap as
    read-only ones, with 5,000 (rss16b) they did not — a difference in the benchmark, not in
    what a write costs."""
    want = len(WRITE_KINDS) * args.mixed_queries
    unused = np.setdiff1d(np.arange(n_facts), read_only)
    if unused.shape[0] >= want:
        return rng.choice(unused, want, replace=False)
    return rng.choice(n_facts, want, replace=n_facts < want)  # a tiny run: repeats allowed


_FILL_MARK = "bench_recall.json"


def _stored_facts(ws: Path, args: argparse.Namespace) -> int:
    """How many generated facts (this seed and width) a previous ``--db`` run stored; 0
    without ``--db`` or when the workspace was filled with other parameters (then refused)."""
    if args.db is None or not (ws / _FILL_MARK).exists():
        return 0
    mark = json.loads((ws / _FILL_MARK).read_text())
    if (mark["seed"], mark["dim"]) != (args.seed, args.dim):
        raise SystemExit(f"{ws} holds facts of seed {mark['seed']} / dim {mark['dim']}: "
                         f"pass those or another --db")
    return int(mark["facts"])


def _record_fill(ws: Path, args: argparse.Namespace, matrix: np.ndarray) -> int:
    """Mark the workspace as holding the first len(matrix) facts; their vectors beside it."""
    np.save(ws / "bench_recall_vectors.npy", matrix)
    (ws / _FILL_MARK).write_text(json.dumps({"seed": args.seed, "dim": args.dim, "facts": len(matrix)}))
    return len(matrix)


def _stored_vectors(ws: Path, args: argparse.Namespace, start: int, count: int) -> np.ndarray:
    held = np.load(ws / "bench_recall_vectors.npy", mmap_mode="r")
    return np.array(held[start : start + count], dtype=np.float32)


def measure_mixed(
    session: Any, queries: list[str], vocab: list[str], rng: np.random.Generator,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One write of each kind before every query; p50/p95 of the recall after it (ms) and of
    the write itself. `queries`: an equal share per kind (see :func:`mixed_picks`)."""
    out: dict[str, Any] = {}
    per_kind = len(queries) // len(WRITE_KINDS)
    for j, kind in enumerate(WRITE_KINDS):
        recall_ms, recall_cpu, write_ms = [], [], []
        for i, q in enumerate(queries[j * per_kind : (j + 1) * per_kind]):
            words = " ".join(vocab[int(w)] for w in rng.integers(0, len(vocab), 8))
            write_ms.append(timed(lambda i=i, w=words, kind=kind: write_one(session, kind, i, w))[0])
            ms, cpu, _ = timed_cpu(lambda q=q: session.recall(q, k=args.k))
            recall_ms.append(ms)
            recall_cpu.append(cpu)
        out[f"{kind}_recall_p50_ms"], out[f"{kind}_recall_p95_ms"] = percentiles(recall_ms)
        out[f"{kind}_recall_cpu_p50_ms"], out[f"{kind}_recall_cpu_p95_ms"] = percentiles(recall_cpu)
        out[f"{kind}_recall_n"] = len(recall_ms)
        out[f"{kind}_write_p50_ms"] = percentiles(write_ms)[0]
    return out


def write_one(session: Any, kind: str, i: int, words: str) -> None:
    """One agent write of `kind` (see WRITE_KINDS) carrying `words`."""
    if kind == "remember":
        session.remember(f"mixed{i}:note", words, importance=0.9)
    elif kind == "add_message":
        session.add_message({"role": "user", "content": words})
    else:
        step = session.steps.begin(goal=words)
        session.steps.evaluate(step, "success", analysis=words)


# VmHWM, not ru_maxrss: Linux carries a parent's ru_maxrss into a forked-and-exec'd child, so
# both children would report this (large) benchmark process's peak.
_PEAK = """
def peak_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
"""

_RSS_MINDPALACE = _PEAK + """
import json, sys
from pathlib import Path
from mindpalace import Memory
ws, settings, queries, k = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
with Memory.open(ws, **settings) as memory:
    session = memory.session("bench", user="bench-user", agent="bench")
    for q in queries.read_text().splitlines():
        session.recall(q, k=k)
print(peak_kib())
"""

_RSS_BM25S = _PEAK + """
import sys
from pathlib import Path
import bm25s
texts = Path(sys.argv[1]).read_text().splitlines()
queries = Path(sys.argv[2]).read_text().splitlines()
k = int(sys.argv[3])
retriever = bm25s.BM25()
retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
for q in queries:
    retriever.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False), k=k, show_progress=False)
print(peak_kib())
"""


def measure_rss(
    tmp: Path, ws: Path, settings: dict[str, Any], facts: list[Fact], queries: list[str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Peak RSS (MB) of a fresh process recalling over the workspace, and of a bm25s process
    over the same fact texts and queries (None when bm25s is not installed)."""
    texts, qfile = tmp / "texts.txt", tmp / "queries.txt"
    texts.write_text("\n".join(fact_text(f).replace("\n", " ") for f in facts))
    qfile.write_text("\n".join(queries))
    ours = _peak_rss([sys.executable, "-c", _RSS_MINDPALACE, str(ws),
                      json.dumps(settings), str(qfile), str(args.k)])
    theirs = None
    if args.bm25s_python.exists():
        theirs = _peak_rss([str(args.bm25s_python), "-c", _RSS_BM25S, str(texts), str(qfile), str(args.k)])
    return {"rss_facts": len(facts), "rss_mindpalace_mb": ours, "rss_bm25s_mb": theirs}


def _peak_rss(cmd: list[str]) -> float | None:
    """Peak resident set (MB) the child printed last; None when it failed (its stderr is shown)."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return int(done.stdout.split()[-1]) / 1024  # Linux reports KiB


def measure(
    memory: Memory, session: Any, scope: Any, queries: list[tuple[str, str]], matrix: np.ndarray,
    facts: list[Fact], args: argparse.Namespace,
) -> dict[str, Any]:
    """Time the product path, the two store searches and the numpy baseline on `queries`."""
    cold_ms, _ = timed(lambda: session.recall(queries[0][0], k=args.k))  # loads the vector index
    ann_wait_s, approximate = wait_ann(memory.store, args.ann_wait)
    emb = memory.embedder
    n_cand = memory.settings.facts.recall_candidates
    norms = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    ids = [fact_id(f.key, 1) for f in facts]

    def brute(qv: np.ndarray) -> np.ndarray:
        sims = norms @ qv
        top = np.argpartition(-sims, args.k)[: args.k]
        return top[np.argsort(-sims[top])]

    product, product_cpu, kw, vec, base = [], [], [], [], []
    hits_product = hits_base = 0
    ann_recall: list[float] = []
    for q, want in queries:
        qv = emb.embed_query(q)
        if approximate:
            ann_recall.append(recall_at(memory, scope, qv, norms, ids, RECALL_K))
        ms, cpu, hits = timed_cpu(lambda q=q: session.recall(q, k=args.k))
        product.append(ms)
        product_cpu.append(cpu)
        hits_product += want in {h.ref for h in hits} | {h.fact.id for h in hits if h.fact}
        # The store searches alone read their documents cold, as before the SQLite store kept
        # a document cache: the recall just above cached exactly these documents.
        with _cold_documents(memory.store):
            kw.append(timed(lambda q=q: memory.store.keyword_search(scope, q, k=n_cand, kinds=[KIND]))[0])
            vec.append(timed(lambda qv=qv: memory.store.vector_search(scope, qv, emb.model_id, k=n_cand, kinds=[KIND]))[0])
        ms, top = timed(lambda qv=qv: brute(qv))
        base.append(ms)
        hits_base += want in {ids[t] for t in top}
    return {
        "cold_ms": round(cold_ms, 1),
        "recall_p50_ms": percentiles(product)[0], "recall_p95_ms": percentiles(product)[1],
        "recall_n": len(product),
        "recall_cpu_p50_ms": percentiles(product_cpu)[0], "recall_cpu_p95_ms": percentiles(product_cpu)[1],
        "keyword_p50_ms": percentiles(kw)[0], "keyword_p95_ms": percentiles(kw)[1],
        "vector_p50_ms": percentiles(vec)[0], "vector_p95_ms": percentiles(vec)[1],
        "numpy_p50_ms": percentiles(base)[0], "numpy_p95_ms": percentiles(base)[1],
        "recall_hit_at_k": 100 * hits_product / len(queries),
        "numpy_hit_at_k": 100 * hits_base / len(queries),
        "ann": approximate, "ann_wait_s": round(ann_wait_s, 1),
        "ann_recall_at_10": float(np.mean(ann_recall)) if ann_recall else None,
    }


RECALL_K = 10


def wait_ann(store: Any, timeout: float) -> tuple[float, bool]:
    """Wait (up to `timeout` s) for the background HNSW builds of the store's cached vector
    indexes, so the timed queries measure the steady state; returns (seconds waited, whether
    any index ranks by a graph). Nothing to wait for below ``store.ann_min_vectors``."""
    from mindpalace.store.vectors import AdaptiveIndex

    t0 = time.perf_counter()
    approximate = False
    for cached in list(getattr(store, "_vec_cache", {}).values()):
        index = cached.index
        if isinstance(index, AdaptiveIndex):
            with cached.lock:  # no query runs meanwhile: the wait takes the graph into use
                approximate |= index.wait_built(timeout) if index.building else index.approximate
    return time.perf_counter() - t0, approximate


def recall_at(
    memory: Memory, scope: Any, qv: np.ndarray, norms: np.ndarray, ids: list[str], k: int
) -> float:
    """Share of the exact top-k (numpy cosine over the facts) that the store's vector search
    returns, ties counted: a hit is any returned fact whose similarity reaches the exact k-th."""
    q = qv / max(float(np.linalg.norm(qv)), 1e-12)
    sims = norms @ q
    kth = float(np.partition(sims, len(sims) - k)[len(sims) - k])
    hits = memory.store.vector_search(scope, qv, memory.embedder.model_id, k=k, kinds=[KIND])
    return sum(h.score >= kth - 1e-5 for h in hits[:k]) / k


def measure_open(
    ws: Path, settings: dict[str, Any], queries: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """A new process's view of the filled workspace, with the persisted HNSW graph and with it
    moved away: seconds from ``Memory.open`` to the first recall's answer, whether that recall
    was ranked by the graph, p50 of the next recalls (ms), and (with the file) the seconds
    until the graph ranks. The files are put back."""
    from mindpalace.store.annfile import ann_dir

    folder = ann_dir(Path(ws) / "memory.db")
    size = sum(f.stat().st_size for f in folder.glob("*")) if folder.exists() else 0
    out: dict[str, Any] = {"ann_file_mb": size / 2**20}
    aside = folder.with_name(folder.name + ".aside")
    for label in ("with_file", "without_file"):
        if label == "without_file" and folder.exists():
            folder.rename(aside)
        try:
            t0 = time.perf_counter()
            memory = Memory.open(ws, **settings)
            session = memory.session("bench", user="bench-user", agent="bench")
            session.recall(queries[0], k=args.k)
            first_s = time.perf_counter() - t0
            ranked = any(getattr(c.index, "approximate", False)
                         for c in getattr(memory.store, "_vec_cache", {}).values())
            ms = [timed(lambda q=q, s=session: s.recall(q, k=args.k))[0] for q in queries[1:]]
            # without the file the graph rebuilds for minutes at 1M: not waited for here (the
            # build time is the size row's "HNSW wait" when it was not loaded)
            waited, approximate = wait_ann(memory.store, args.ann_wait if label == "with_file" else 0)
            memory.close()
        finally:
            if aside.exists():
                if folder.exists():
                    shutil.rmtree(folder)
                aside.rename(folder)
        out[f"open_{label}_first_recall_s"] = first_s
        out[f"open_{label}_graph_at_first"] = ranked
        out[f"open_{label}_recall_p50_ms"] = percentiles(ms)[0]
        out[f"open_{label}_graph_after_s"] = (first_s + waited) if approximate else None
    return out


def print_open(r: dict[str, Any]) -> None:
    console = Console(width=180)
    table = Table(title=f"a new process on {r['facts']:,} facts: persisted HNSW graph "
                  f"({r['ann_file_mb']:.0f} MB on disk) vs none")
    for col in ("graph file", "open → first recall s", "graph at first recall",
                "next recalls p50 ms", "open → graph ranks s"):
        table.add_column(col, justify="right")
    for label in ("with_file", "without_file"):
        after = r[f"open_{label}_graph_after_s"]
        table.add_row(label.replace("_", " "), f"{r[f'open_{label}_first_recall_s']:.1f}",
                      str(r[f"open_{label}_graph_at_first"]), f"{r[f'open_{label}_recall_p50_ms']:.1f}",
                      "n/a" if after is None else f"{after:.1f}")
    console.print(table)


@contextmanager
def _cold_documents(store: Any) -> Iterator[None]:
    """An empty document cache for the block (the store's own one back afterwards); nothing
    for a store without one."""
    held = getattr(store, "_doc_cache", None)
    if held is None:
        yield
        return
    store._doc_cache = type(held)()
    try:
        yield
    finally:
        store._doc_cache = held


def print_table(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    console = Console(width=180)
    table = Table(title=f"recall latency (ms), read-only — {args.queries} queries/size, k={args.k}, "
                  f"hashing-{args.dim} vectors, keyword_max_df_ratio {args.max_df_ratio}, seed {args.seed}")
    for col in ("facts", "fill s", "first query", "recall p50", "recall p95", "FTS p50/p95",
                "vector p50/p95", "numpy cosine p50/p95", "hit@k recall", "hit@k numpy",
                "HNSW wait s", "ANN recall@10"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['facts']:,}", f"{r['fill_s']:.0f}", f"{r['cold_ms']:.0f}",
            f"{r['recall_p50_ms']:.1f}", f"{r['recall_p95_ms']:.1f}",
            f"{r['keyword_p50_ms']:.1f} / {r['keyword_p95_ms']:.1f}",
            f"{r['vector_p50_ms']:.1f} / {r['vector_p95_ms']:.1f}",
            f"{r['numpy_p50_ms']:.1f} / {r['numpy_p95_ms']:.1f}",
            f"{r['recall_hit_at_k']:.0f}%", f"{r['numpy_hit_at_k']:.0f}%",
            f"{r['ann_wait_s']:.0f}" if r["ann"] else "exact",
            "n/a" if r["ann_recall_at_10"] is None else f"{r['ann_recall_at_10']:.3f}",
        )
    console.print(table)
    mixed = Table(title="Session.recall p50 / p95 (ms) [queries timed]: read-only vs one write before "
                  "every query (× = p95 over the read-only p95)")
    for col in ("facts", "read-only", *(f"{k} → recall" for k in WRITE_KINDS), "write p50"):
        mixed.add_column(col, justify="right")
    for r in rows:
        base = max(r["recall_p95_ms"], 1e-9)
        mixed.add_row(
            f"{r['facts']:,}", f"{r['recall_p50_ms']:.1f} / {r['recall_p95_ms']:.1f} [{r['recall_n']}]",
            *(f"{r[f'{k}_recall_p50_ms']:.1f} / {r[f'{k}_recall_p95_ms']:.1f} [{r[f'{k}_recall_n']}] "
              f"({r[f'{k}_recall_p95_ms'] / base:.1f}×)" for k in WRITE_KINDS),
            " / ".join(f"{r[f'{k}_write_p50_ms']:.1f}" for k in WRITE_KINDS),
        )
    console.print(mixed)
    cpu = Table(title="the same recalls' CPU time (ms of the calling thread) p50 / p95: what a "
                "recall costs, without the waits for other processes on a shared machine")
    for col in ("facts", "read-only", *(f"{k} → recall" for k in WRITE_KINDS)):
        cpu.add_column(col, justify="right")
    for r in rows:
        base = max(r["recall_cpu_p95_ms"], 1e-9)
        cpu.add_row(
            f"{r['facts']:,}", f"{r['recall_cpu_p50_ms']:.1f} / {r['recall_cpu_p95_ms']:.1f}",
            *(f"{r[f'{k}_recall_cpu_p50_ms']:.1f} / {r[f'{k}_recall_cpu_p95_ms']:.1f} "
              f"({r[f'{k}_recall_cpu_p95_ms'] / base:.2f}×)" for k in WRITE_KINDS),
        )
    console.print(cpu)
    for r in rows:
        if "rss_mindpalace_mb" in r:
            ours, theirs = r["rss_mindpalace_mb"], r["rss_bm25s_mb"]
            ratio = f" ({ours / theirs:.2f}× bm25s)" if ours and theirs else ""
            console.print(
                f"peak RSS with {r['rss_facts']:,} facts, {args.queries} recalls: mindpalace "
                f"{_mb(ours)}, bm25s on the same texts {_mb(theirs)}{ratio}")


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} MB"


def targets(rows: list[dict[str, Any]]) -> list[str]:
    """One line per target size present: p95 read-only and after each kind of write."""
    lines = []
    for r in rows:
        target = TARGET_P95_MS.get(r["facts"])
        if target is None:
            continue
        worst = max(r["recall_p95_ms"], *(r[f"{k}_recall_p95_ms"] for k in WRITE_KINDS))
        lines.append(f"target p95 <= {target:g} ms at {r['facts']:,} (read-only and mixed): "
                     f"{'met' if worst <= target else 'NOT met'} (worst p95 {worst:.1f} ms)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--million", action="store_true", help="Add 1M facts (fill takes long).")
    parser.add_argument("--fast", action="store_true", help="Stop at 100k facts (the default).")
    parser.add_argument("--quick", action="store_true", help="Smoke run: 1k facts, 20 queries.")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--mixed-queries", type=int, default=100, help="Queries per write kind.")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--dim", type=int, default=64, help="Hashing embedder width.")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, default=None, help="Write the rows here.")
    parser.add_argument("--max-df-ratio", type=float, default=None,
                        help="facts.keyword_max_df_ratio for the product path (default: off).")
    parser.add_argument("--bm25s-python", type=Path, default=BM25S_PYTHON,
                        help="Interpreter of an environment with bm25s installed (peak RSS peer).")
    parser.add_argument("--no-rss", action="store_true", help="Skip the peak RSS processes.")
    parser.add_argument("--db", type=Path, default=None,
                        help="Workspace folder kept between runs: facts a previous run stored there "
                        "(same --seed and --dim) are reused, not written again.")
    parser.add_argument("--fill-only", action="store_true", help="Fill (--db) and stop.")
    parser.add_argument("--ann-wait", type=float, default=3600.0,
                        help="Seconds to wait for a background HNSW build before timing.")
    parser.add_argument("--open-times", action="store_true",
                        help="After the last size: a new Memory opened with and without the "
                        "persisted HNSW graph (first recall, time until the graph ranks).")
    args = parser.parse_args(argv)
    if args.million:
        args.sizes = [*args.sizes, 1_000_000]
    if args.quick:
        args.sizes, args.queries, args.mixed_queries = [1_000], 20, 10
    if args.fast:
        args.sizes = [s for s in args.sizes if s <= 100_000]
    args.sizes = sorted(set(args.sizes))
    args.mixed_queries = min(args.mixed_queries, args.queries)
    rows = run(args)
    for line in targets([r for r in rows if "recall_p95_ms" in r]):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
