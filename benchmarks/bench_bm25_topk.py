"""BM25 top k over the in-process posting index alone: dense pass vs reading by impact.

The postings of N synthetic facts are built straight into :class:`PostingIndex` (no SQLite),
shaped like ``bench_recall``'s facts: 6–12 words drawn from a Zipf(1.1) vocabulary of 20,000
words, plus the key's words (a unique entity, the first word again as the attribute) and a
number. Queries are 2–3 words of a random fact, so most are made only of common words — the
queries that fell back to the dense pass before :mod:`mindpalace.store.topk`.

Per query, in the same run and on the same index: the dense pass (every posting of every
query term scored) and the impact read (``PostingIndex.top`` as the store calls it); the two
answers must be identical (ids, scores, order) or the run fails. Reported: p50 / p95 / max
(ms, wall and CPU time), and the documents the impact read scored.

    python benchmarks/bench_bm25_topk.py            # 1M facts (builds in ~1 min)
    python benchmarks/bench_bm25_topk.py --fast     # 100k
    python benchmarks/bench_bm25_topk.py --tiny     # 20k, a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
from rich.console import Console
from rich.table import Table

from mindpalace.store import bm25, topk
from mindpalace.store.bm25 import PostingIndex

VOCAB_SIZE = 20_000
ZIPF = 1.1
K = 100  # the product path asks the keyword list for facts.recall_candidates hits


def build(n: int, seed: int) -> tuple[PostingIndex, np.ndarray, np.ndarray]:
    """The index of `n` facts, and (the words of every fact, where each fact's words start)."""
    rng = np.random.default_rng(seed)
    probs = 1.0 / np.arange(1, VOCAB_SIZE + 1, dtype=np.float64) ** ZIPF
    lengths = rng.integers(6, 13, n)
    words = rng.choice(VOCAB_SIZE, int(lengths.sum()), p=probs / probs.sum())
    first = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    doc = np.repeat(np.arange(n), lengths)
    entity = VOCAB_SIZE + np.arange(n)  # one token per fact
    number = VOCAB_SIZE + n + rng.integers(0, 100_000, n)
    tok = np.concatenate([words, words[first], entity, number])
    docs = np.concatenate([doc, np.arange(n), np.arange(n), np.arange(n)])
    order = np.lexsort((docs, tok))  # the word index lists occurrences by (token, document)
    tok, docs = tok[order], docs[order]
    held, counts = np.unique(tok, return_counts=True)
    vocab = [(f"t{int(t):08d}", int(c)) for t, c in zip(held, counts, strict=True)]
    ids = np.arange(1, n + 1, dtype=np.int64)
    return PostingIndex.build(None, ids, vocab, docs.astype(np.int64) + 1), words, np.stack([first, lengths])


def queries(words: np.ndarray, spans: np.ndarray, count: int, seed: int) -> list[list[str]]:
    rng = np.random.default_rng(seed + 1)
    out = []
    for d in rng.choice(spans.shape[1], count, replace=False):
        drawn = words[spans[0, d] : spans[0, d] + spans[1, d]]
        take = rng.choice(drawn.shape[0], int(rng.integers(2, 4)), replace=False)
        out.append([f"t{int(drawn[t]):08d}" for t in sorted(take)])
    return out


def timed(index: PostingIndex, view: Any, qs: list[list[str]]) -> tuple[list[Any], np.ndarray, np.ndarray]:
    answers, wall, cpu = [], [], []
    for q in qs:
        w, c = time.perf_counter(), time.process_time()
        answers.append(index.top(q, view, K))
        wall.append((time.perf_counter() - w) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return answers, np.array(wall), np.array(cpu)


def run(n: int, count: int, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    index, words, spans = build(n, seed)
    build_s = time.perf_counter() - t0
    qs = queries(words, spans, count, seed)
    view = index.view("all", index.doc_ids.copy())
    with patch.object(bm25, "PRUNE_MIN_DOCS", 0):
        timed(index, view, qs)  # first use: impact orders, document frequencies
        scored: list[int] = []
        inner = topk._scored

        def counted(*args: Any) -> Any:
            got = inner(*args)
            scored[-1] += int(got[0].shape[0])
            return got

        with patch.object(topk, "_scored", counted):
            for q in qs:
                scored.append(0)
                index.top(q, view, K)
        impact, i_wall, i_cpu = timed(index, view, qs)
    with patch.object(bm25, "PRUNE_MIN_DOCS", 1 << 62):
        dense, d_wall, d_cpu = timed(index, view, qs)
    wrong = sum(a != b for a, b in zip(impact, dense, strict=True))
    row: dict[str, Any] = {"facts": n, "queries": count, "build_s": round(build_s, 1), "mismatches": wrong}
    for label, wall, cpu in (("dense", d_wall, d_cpu), ("impact", i_wall, i_cpu)):
        row[f"{label}_p50_ms"], row[f"{label}_p95_ms"] = np.percentile(wall, [50, 95]).tolist()
        row[f"{label}_max_ms"] = float(wall.max())
        row[f"{label}_cpu_p50_ms"], row[f"{label}_cpu_p95_ms"] = np.percentile(cpu, [50, 95]).tolist()
    row["scored_p50"], row["scored_p95"] = np.percentile(scored, [50, 95]).tolist()
    row["fell_back"] = sum(s == 0 for s in scored)
    return row


def show(row: dict[str, Any]) -> None:
    table = Table(title=f"BM25 top {K} at {row['facts']:,} facts, {row['queries']} queries (ms)")
    for col in ("path", "p50", "p95", "max", "CPU p50", "CPU p95"):
        table.add_column(col, justify="right")
    for label in ("dense", "impact"):
        table.add_row(label, *(f"{row[f'{label}_{c}_ms']:.1f}" for c in ("p50", "p95", "max", "cpu_p50", "cpu_p95")))
    Console(width=120).print(table)
    print(f"impact read scored p50 {row['scored_p50']:.0f} / p95 {row['scored_p95']:.0f} documents; "
          f"{row['fell_back']} queries fell back to the dense pass; mismatches {row['mismatches']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--fast", action="store_true", help="100k facts.")
    parser.add_argument("--tiny", action="store_true", help="20k facts, 30 queries (smoke run).")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, default=None, help="Write the row here.")
    args = parser.parse_args(argv)
    n = 20_000 if args.tiny else 100_000 if args.fast else args.facts
    row = run(n, 30 if args.tiny else args.queries, args.seed)
    show(row)
    if args.json is not None:
        args.json.write_text(json.dumps([row], indent=1))
    return 0 if row["mismatches"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
