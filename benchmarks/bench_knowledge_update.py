"""Knowledge updates and long-message embedding: a check of recall that is not LoCoMo-tuned.

1. The synthetic knowledge-update set (``mindpalace.eval.knowledge_update``): conversations of
   short user messages and long assistant replies where a fact is stated and corrected turns
   or sessions later, with distractors. Reported for the product path (``Session.recall``),
   the dense-only and the BM25-only list of the same store: the share of cases where the
   correction ranks above the original (target ≥ 95% for the product) and recall@k of the
   correction (the fused list should be ≥ the best single list).
2. Embedding cost of long messages, whole vs chunked (``embed.chunk_tokens`` windows): CPU
   seconds per 100k characters of SWE-agent trajectory messages over 1,000 characters
   (``../shared/data/swe-agent``; the set's assistant replies when that folder is missing).

    python benchmarks/bench_knowledge_update.py --fast     # 10 conversations (40 cases)
    python benchmarks/bench_knowledge_update.py            # 40 conversations (160 cases)
    python benchmarks/bench_knowledge_update.py --fast --generator varied --seeds 7,11,23

``--generator classic`` (default) keeps the original templates (every seed reproduces earlier
reports); ``varied`` is the LongMemEval-style set of ``mindpalace.eval.knowledge_update_varied``
(counts, places, jobs, chains of updates, updates inside long messages, paraphrased questions,
subject-drift distractors). Each seed is one table row per method.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace.eval.knowledge_update import generate, run_knowledge_update
from mindpalace.providers.embed import make_embedder
from mindpalace.retrieval.chunking import chunk_text
from mindpalace.settings import EmbedSettings

TARGET_CORRECTION_FIRST = 95.0
SWE = Path(__file__).resolve().parents[2] / "shared" / "data" / "swe-agent"


def long_texts(limit_chars: int) -> tuple[str, list[str]]:
    files = sorted(glob.glob(str(SWE / "*.traj"))) or sorted(glob.glob("/work/shared/data/swe-agent/*.traj"))
    texts: list[str] = []
    source = "SWE-agent trajectory messages > 1,000 chars"
    for f in files:
        data = json.loads(Path(f).read_text(encoding="utf-8"))
        texts += [m["content"] for m in data.get("history", [])
                  if isinstance(m.get("content"), str) and len(m["content"]) > 1000]
    if not texts:
        source = "knowledge-update assistant replies"
        texts = [m.text for c in generate(7, 40) for m in c.messages if m.role == "assistant"]
    out, total = [], 0
    for t in texts:
        if total >= limit_chars:
            break
        out.append(t)
        total += len(t)
    return source, out


def embed_cost(provider: str, texts: list[str], sizes: list[int], overlap: int) -> list[dict[str, Any]]:
    emb = make_embedder(EmbedSettings(provider=provider))  # type: ignore[arg-type]
    assert emb is not None
    emb.embed(["warm up"])
    chars = sum(len(t) for t in texts)
    rows = []
    t0 = time.process_time()
    emb.embed(texts)
    whole = time.process_time() - t0
    rows.append({"embedder": emb.model_id, "mode": "whole", "vectors": len(texts),
                 "cpu_s_per_100k_chars": whole * 1e5 / chars, "ratio": 1.0})
    for size in sizes:
        t0 = time.process_time()
        chunks = [c for t in texts for c in chunk_text(t, size, min(overlap, size // 2 - 1))]
        emb.embed(chunks)
        spent = time.process_time() - t0
        rows.append({"embedder": emb.model_id, "mode": f"chunked {size}/{overlap} tokens",
                     "vectors": len(chunks), "cpu_s_per_100k_chars": spent * 1e5 / chars,
                     "ratio": spent / whole})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="10 conversations, 40k characters.")
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--embedder", default=None, help="use | e5 | wordllama | hashing (default: workspace default)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", default=None, help="Comma-separated seeds (overrides --seed).")
    parser.add_argument("--generator", choices=("classic", "varied"), default="classic")
    parser.add_argument("--chars", type=int, default=100_000, help="Characters for the embedding-cost table.")
    parser.add_argument("--json", type=Path, default=None, help="Write the rows here.")
    args = parser.parse_args(argv)
    if args.fast:
        args.conversations, args.chars = 10, 40_000
    console = Console()
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    reports = {
        seed: run_knowledge_update(seed=seed, conversations=args.conversations, embedder=args.embedder,
                                   generator=args.generator)
        for seed in seeds
    }
    report = reports[seeds[0]]
    table = Table(title=f"knowledge updates ({args.generator} generator) — {report.conversations} conversations "
                  f"per seed, embedder {report.embedder}")
    for col in ("seed", "cases", "method", "correction above older values",
                *[f"R@{k} correction" for k in report.ks]):
        table.add_column(col, justify="right")
    for seed, rep in reports.items():
        for m in rep.methods:
            table.add_row(str(seed), str(rep.cases), m.name, f"{m.rate:.1f}%",
                          *[f"{m.recall_rate(k):.1f}" for k in rep.ks])
    console.print(table)
    for seed, rep in reports.items():
        product = rep.methods[0]
        console.print(f"seed {seed}: ingest + embed {rep.ingest_seconds:.1f} s; superseded hits marked: "
                      f"{rep.marked}; target correction above original >= {TARGET_CORRECTION_FIRST}%: "
                      f"{'met' if product.rate >= TARGET_CORRECTION_FIRST else 'NOT met'}")
    source, texts = long_texts(args.chars)
    provider = args.embedder or EmbedSettings().provider
    cost = embed_cost(provider, texts, [256, 512, 1024], 32) if provider != "none" else []
    if cost:
        ct = Table(title=f"embedding cost of long messages — {sum(map(len, texts)):,} chars of {source} "
                   "(CPU seconds, shared cores: compare ratios)")
        for col in ("embedder", "mode", "vectors", "CPU s / 100k chars", "× whole"):
            ct.add_column(col, justify="right")
        for r in cost:
            ct.add_row(r["embedder"], r["mode"], str(r["vectors"]), f"{r['cpu_s_per_100k_chars']:.2f}",
                       f"{r['ratio']:.2f}")
        console.print(ct)
    if args.json:
        args.json.write_text(json.dumps({
            "generator": args.generator,
            "knowledge_update": report.to_json(),
            "seeds": {str(seed): rep.to_json() for seed, rep in reports.items()},
            "embedding_cost": cost,
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
