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

Quality column: share of queries whose source fact is in the top-k (hit@k).

    python benchmarks/bench_recall.py --fast        # 10k and 100k
    python benchmarks/bench_recall.py               # 10k, 100k, 1M
"""

from __future__ import annotations

import os

# One query is one mat-vec: BLAS threads only add spin contention on a 2-core machine (same
# setting for the product path and the numpy baseline). Must be set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.facts.longterm import KIND, NAMESPACE, fact_id, fact_text
from mindpalace.facts.model import Fact
from mindpalace.timeutil import utcnow

TARGET_P95_MS_AT_100K = 20.0
VOCAB_SIZE = 20_000
WRITE_BATCH = 5_000


def make_vocab(rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < VOCAB_SIZE:
        n = int(rng.integers(3, 10))
        words.add("".join(rng.choice(letters, n)))
    return sorted(words)


def make_facts(start: int, count: int, vocab: list[str], rng: np.random.Generator) -> list[Fact]:
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    probs = 1.0 / ranks**1.1
    probs /= probs.sum()
    now = utcnow()
    facts = []
    for i in range(start, start + count):
        words = rng.choice(len(vocab), int(rng.integers(6, 13)), p=probs)
        content = " ".join(vocab[w] for w in words) + f" {int(rng.integers(0, 100_000))}"
        facts.append(Fact(f"entity{i}:{vocab[int(words[0])]}", content, importance=0.9, created_at=now))
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


def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rng = np.random.default_rng(args.seed)
    vocab = make_vocab(rng)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mindpalace-bench-recall-") as tmp:
        memory = Memory.open(
            Path(tmp) / "ws", embed={"provider": "hashing", "dimensions": args.dim},
            facts={"keyword_max_df_ratio": args.max_df_ratio},
        )
        session = memory.session("bench", user="bench-user", agent="bench")
        scope = session.facts.fact_scope
        all_facts: list[Fact] = []
        matrix = np.zeros((0, args.dim), dtype=np.float32)
        for size in args.sizes:
            t0 = time.perf_counter()
            new = make_facts(len(all_facts), size - len(all_facts), vocab, rng)
            matrix = np.concatenate([matrix, fill(memory, scope, new)])
            all_facts += new
            fill_s = time.perf_counter() - t0
            picks = rng.choice(len(all_facts), args.queries, replace=False)
            queries = []
            for p in picks:
                words = all_facts[p].content.split()[:-1]
                take = rng.choice(len(words), min(len(words), int(rng.integers(2, 4))), replace=False)
                queries.append((" ".join(words[t] for t in sorted(take)), all_facts[p].id or fact_id(all_facts[p].key, 1)))
            rows.append({"facts": size, "fill_s": round(fill_s, 1),
                         **measure(memory, session, scope, queries, matrix, all_facts, args)})
            print_table(args, rows)
        memory.close()
    return rows


def measure(
    memory: Memory, session: Any, scope: Any, queries: list[tuple[str, str]], matrix: np.ndarray,
    facts: list[Fact], args: argparse.Namespace,
) -> dict[str, Any]:
    """Time the product path, the two store searches and the numpy baseline on `queries`."""
    cold_ms, _ = timed(lambda: session.recall(queries[0][0], k=args.k))  # loads the vector index
    emb = memory.embedder
    n_cand = memory.settings.facts.recall_candidates
    norms = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    ids = [fact_id(f.key, 1) for f in facts]

    def brute(qv: np.ndarray) -> np.ndarray:
        sims = norms @ qv
        top = np.argpartition(-sims, args.k)[: args.k]
        return top[np.argsort(-sims[top])]

    product, kw, vec, base = [], [], [], []
    hits_product = hits_base = 0
    for q, want in queries:
        qv = emb.embed_query(q)
        ms, hits = timed(lambda q=q: session.recall(q, k=args.k))
        product.append(ms)
        hits_product += want in {h.ref for h in hits} | {h.fact.id for h in hits if h.fact}
        kw.append(timed(lambda q=q: memory.store.keyword_search(scope, q, k=n_cand, kinds=[KIND]))[0])
        vec.append(timed(lambda qv=qv: memory.store.vector_search(scope, qv, emb.model_id, k=n_cand, kinds=[KIND]))[0])
        ms, top = timed(lambda qv=qv: brute(qv))
        base.append(ms)
        hits_base += want in {ids[t] for t in top}
    return {
        "cold_ms": round(cold_ms, 1),
        "recall_p50_ms": percentiles(product)[0], "recall_p95_ms": percentiles(product)[1],
        "keyword_p50_ms": percentiles(kw)[0], "keyword_p95_ms": percentiles(kw)[1],
        "vector_p50_ms": percentiles(vec)[0], "vector_p95_ms": percentiles(vec)[1],
        "numpy_p50_ms": percentiles(base)[0], "numpy_p95_ms": percentiles(base)[1],
        "recall_hit_at_k": 100 * hits_product / len(queries),
        "numpy_hit_at_k": 100 * hits_base / len(queries),
    }


def print_table(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    console = Console()
    table = Table(title=f"recall latency (ms) — {args.queries} queries/size, k={args.k}, hashing-{args.dim} vectors, "
                  f"keyword_max_df_ratio {args.max_df_ratio}, seed {args.seed}")
    for col in ("facts", "fill s", "first query", "recall p50", "recall p95", "FTS p50/p95",
                "vector p50/p95", "numpy cosine p50/p95", "hit@k recall", "hit@k numpy"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['facts']:,}", f"{r['fill_s']:.0f}", f"{r['cold_ms']:.0f}",
            f"{r['recall_p50_ms']:.1f}", f"{r['recall_p95_ms']:.1f}",
            f"{r['keyword_p50_ms']:.1f} / {r['keyword_p95_ms']:.1f}",
            f"{r['vector_p50_ms']:.1f} / {r['vector_p95_ms']:.1f}",
            f"{r['numpy_p50_ms']:.1f} / {r['numpy_p95_ms']:.1f}",
            f"{r['recall_hit_at_k']:.0f}%", f"{r['numpy_hit_at_k']:.0f}%",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--fast", action="store_true", help="Stop at 100k facts.")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--dim", type=int, default=64, help="Hashing embedder width.")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, default=None, help="Write the rows here.")
    parser.add_argument("--max-df-ratio", type=float, default=None,
                        help="facts.keyword_max_df_ratio for the product path (default: off).")
    args = parser.parse_args(argv)
    if args.fast:
        args.sizes = [s for s in args.sizes if s <= 100_000]
    args.sizes = sorted(args.sizes)
    rows = run(args)
    at_100k = [r for r in rows if r["facts"] == 100_000]
    if at_100k:
        ok = at_100k[0]["recall_p95_ms"] <= TARGET_P95_MS_AT_100K
        print(f"target p95 <= {TARGET_P95_MS_AT_100K} ms at 100k: {'met' if ok else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
