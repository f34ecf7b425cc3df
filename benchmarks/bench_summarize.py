"""Offline extractive summarizer vs truncation baselines: what survives a token limit?

Gold facts come from the datasets, not from the summarizer's own extractor:
- τ-bench airline: the identifier arguments (reservation ids, flight numbers, dates, payment
  ids: string values with a digit) of each task's ground-truth tool calls that occur in the
  run's user + tool messages — what an agent must still know to act after consolidation.
- LoCoMo: the answers of the questions whose answer string occurs verbatim in the conversation.

Each document is summarized to `ratio` × its tokens by three methods measured in the same run:
``extractive`` (ExtractiveProvider.summarize), ``head`` (the first tokens) and ``head+tail``
(half the limit from each end). Recall = gold strings found (case-insensitive) in the output.

    python benchmarks/bench_summarize.py --fast
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace.providers.llm import ExtractiveProvider
from mindpalace.settings import LLMSettings
from mindpalace.tokens import get_counter

REPO = Path(__file__).resolve().parents[1]
MIN_GOLD_CHARS = 3  # shorter answers ("no", "5") match by accident


@dataclass
class Doc:
    dataset: str
    text: str
    gold: list[str]


def leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in leaves(v)]
    return [value] if isinstance(value, str) else []


def tau_docs(data: Path, n: int, rng: random.Random) -> list[Doc]:
    runs = json.loads((data / "tau-bench" / "gpt-4o-airline.json").read_text(encoding="utf-8"))
    docs = []
    for run in rng.sample(runs, min(n, len(runs))):
        text = "\n".join(
            str(m["content"]) for m in run["traj"] if m["role"] in ("user", "tool") and m.get("content")
        )
        ids = {v for a in run["info"]["task"]["actions"] for v in leaves(a.get("kwargs", {}))}
        gold = sorted(v for v in ids if any(c.isdigit() for c in v) and v in text)
        if gold:
            docs.append(Doc("τ-bench", text, gold))
    return docs


def locomo_docs(data: Path, n: int, rng: random.Random) -> list[Doc]:
    samples = json.loads((data / "locomo" / "locomo10.json").read_text(encoding="utf-8"))
    docs = []
    for sample in rng.sample(samples, min(n, len(samples))):
        conv = sample["conversation"]
        turns = [
            f"{t['speaker']}: {t['text']}"
            for key, value in conv.items()
            if key.startswith("session_") and isinstance(value, list)
            for t in value
        ]
        text = "\n".join(turns)
        low = text.lower()
        answers = {str(q.get("answer", "")).strip() for q in sample["qa"]}
        gold = sorted(a for a in answers if len(a) >= MIN_GOLD_CHARS and a.lower() in low)
        if gold:
            docs.append(Doc("LoCoMo", text, gold))
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tau-runs", type=int, default=200, help="τ-bench runs sampled")
    ap.add_argument("--locomo-convs", type=int, default=10, help="LoCoMo conversations sampled")
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.25, 0.1])
    ap.add_argument("--tokenizer", default="o200k_base")
    ap.add_argument("--fast", action="store_true", help="40 τ-bench runs, 3 LoCoMo conversations")
    args = ap.parse_args()
    if args.fast:
        args.tau_runs, args.locomo_convs = 40, 3

    rng = random.Random(args.seed)
    counter = get_counter(args.tokenizer)
    llm = ExtractiveProvider(LLMSettings(), counter)
    docs = tau_docs(args.data, args.tau_runs, rng) + locomo_docs(args.data, args.locomo_convs, rng)

    def head(text: str, limit: int) -> str:
        return counter.truncate(text, limit)

    def tail(text: str, limit: int) -> str:
        lo, hi = 0, len(text)  # smallest start index whose suffix fits, by binary search
        while lo < hi:
            mid = (lo + hi) // 2
            if counter.count(text[mid:]) <= limit:
                hi = mid
            else:
                lo = mid + 1
        return text[lo:]

    def head_tail(text: str, limit: int) -> str:
        half = limit // 2
        return counter.truncate(text, half) + "\n" + tail(text, limit - half - 1)

    methods: dict[str, Callable[[str, int], str]] = {
        "extractive": lambda text, limit: llm.summarize(text, max_tokens=limit).text,
        "head": head,
        "head+tail": head_tail,
    }
    table = Table(title=f"Summaries within a token limit ({args.tokenizer}, seed {args.seed})")
    for col in ("dataset", "docs", "gold", "limit", "method", "gold recall", "tokens/limit", "over limit", "ms/doc"):
        table.add_column(col, justify="left" if col in ("dataset", "method") else "right")
    for dataset in ("τ-bench", "LoCoMo"):
        subset = [d for d in docs if d.dataset == dataset]
        if not subset:
            continue
        source_tokens = statistics.mean(counter.count(d.text) for d in subset)
        for ratio in args.ratios:
            for name, fn in methods.items():
                found = total = over = 0
                fill: list[float] = []
                started = time.perf_counter()
                for doc in subset:
                    limit = max(32, int(counter.count(doc.text) * ratio))
                    out = fn(doc.text, limit)
                    used = counter.count(out)
                    over += used > limit
                    fill.append(used / limit)
                    low = out.lower()
                    found += sum(g.lower() in low for g in doc.gold)
                    total += len(doc.gold)
                ms = (time.perf_counter() - started) * 1000 / len(subset)
                table.add_row(
                    dataset, str(len(subset)), str(total),
                    f"{ratio:.0%} of {source_tokens:,.0f}", name, f"{found / total:.1%}",
                    f"{statistics.mean(fill):.2f}", str(over), f"{ms:.1f}",
                )
    Console(width=132).print(table)


if __name__ == "__main__":
    main()
