"""Exact token counting speed and the error of the fallback estimate, on ~1 MB of English/Chinese.

Texts (built in memory, never copied into the repo):

* english — LoCoMo turns (``../shared/data/locomo/locomo10.json``), ``speaker: text`` lines.
* chinese — the seed articles (``../shared/seeds/*.txt``) reduced to their Han characters and
  CJK punctuation, line by line.
* mixed — English and Chinese lines interleaved, repeated to ``--mb`` megabytes (UTF-8).

Missing data falls back to seeded generated text (marked ``generated`` in the title).

For each text and encoding (o200k_base, cl100k_base): exact tokens/s of tiktoken over the whole
text (the baseline), exact tokens/s counted line by line (how prompts are counted: many short
messages), the EstimateCounter's total and relative error, and how many lines it counts
*below* exact — which must be 0 (I9: the estimate errs high).

    python benchmarks/bench_tokens.py --fast
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace.tokens import EstimateCounter, TiktokenCounter

REPO = Path(__file__).resolve().parents[1]
ENCODINGS = ("o200k_base", "cl100k_base")
_CHINESE = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+")


def english_lines(data: Path) -> list[str] | None:
    path = data / "locomo" / "locomo10.json"
    if not path.exists():
        return None
    samples = json.loads(path.read_text(encoding="utf-8"))
    return [
        f"{turn['speaker']}: {turn['text']}"
        for sample in samples
        for key, turns in sample["conversation"].items()
        if key.startswith("session_") and isinstance(turns, list)
        for turn in turns
    ]


def chinese_lines(seeds: Path) -> list[str] | None:
    files = sorted(seeds.glob("*.txt")) if seeds.exists() else []
    if not files:
        return None
    lines = ("".join(_CHINESE.findall(line)) for f in files for line in f.read_text(encoding="utf-8").splitlines())
    return [ln for ln in lines if ln]


ZH_CLAUSES = [
    "用户说每晚酒店预算不超过两千元", "五天的东京行程", "请先查一下浅草寺的开放时间", "门票已经订好了",
    "不要订经济舱以外的机票", "预算必须控制在八千元以内", "当任务步骤超过几十步时",
    "上下文窗口很快就会被挤爆", "摘要压缩之前先保存原始快照", "按需召回完整的步骤记录",
    "系统崩溃以后从检查点恢复", "长期记忆按重要性排序", "工具调用的结果不能覆盖用户约束",
]
EN_WORDS = ["the", "hotel", "budget", "per", "night", "is", "at", "most", "2000", "CNY", "and", "we",
            "must", "book", "Senso-ji", "tickets", "Caroline", "said", "yesterday", "museum"]


def generated(rng: random.Random, chinese: bool, n: int) -> list[str]:
    """Fallback text when the shared data is absent: seeded sentences of natural clauses (CJK)
    or common words (English) — never character soup, which no script-aware estimate bounds."""
    if chinese:
        return ["，".join(rng.choice(ZH_CLAUSES) for _ in range(rng.randint(1, 5))) + "。" for _ in range(n)]
    return [" ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(5, 30))).capitalize() + "."
            for _ in range(n)]


def mixed_lines(en: list[str], zh: list[str], target_bytes: int) -> list[str]:
    out: list[str] = []
    size, i = 0, 0
    while size < target_bytes:
        line = en[i % len(en)] if i % 2 == 0 else zh[(i // 2) % len(zh)]
        out.append(line)
        size += len(line.encode("utf-8")) + 1
        i += 1
    return out


def best_seconds(fn: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(name: str, lines: list[str], counters: dict[str, TiktokenCounter], repeats: int) -> list[dict[str, Any]]:
    text = "\n".join(lines)
    est = EstimateCounter()
    estimate = est.count(text)
    est_s = best_seconds(lambda: est.count(text), repeats)
    mb = len(text.encode("utf-8")) / 1e6
    rows = []
    for enc, counter in counters.items():
        exact = len(counter.encode(text))
        whole_s = best_seconds(lambda c=counter: c.encode(text), repeats)
        # line by line without the counter's memo cache, as fresh prompts would be counted
        per_line_s = best_seconds(lambda c=counter: [c._count_uncached(ln) for ln in lines], repeats)
        below = sum(1 for ln in lines if est.count(ln) < counter.count(ln))
        rows.append({
            "text": name, "encoding": enc, "mb": round(mb, 2),
            "lines": len(lines), "exact_tokens": exact,
            "exact_tokens_per_s": round(exact / whole_s),
            "exact_tokens_per_s_by_line": round(exact / per_line_s),
            "estimate_tokens": estimate, "estimate_error": round(estimate / exact - 1, 4),
            "exact_mb_per_s": round(mb / whole_s, 2),
            "estimate_mb_per_s": round(mb / est_s, 2),
            "lines_below_exact": below,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--seeds", type=Path, default=REPO.parent / "shared" / "seeds")
    ap.add_argument("--mb", type=float, default=1.0, help="size of the mixed text (MB of UTF-8)")
    ap.add_argument("--repeats", type=int, default=3, help="timing repeats; the best is kept")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fallback generated text")
    ap.add_argument("--fast", action="store_true", help="0.25 MB mixed text, 1 repeat")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.fast:
        args.mb, args.repeats = 0.25, 1

    rng = random.Random(args.seed)
    en, zh = english_lines(args.data), chinese_lines(args.seeds)
    source = "LoCoMo turns + seed articles"
    if en is None or zh is None:
        source = "generated text (shared data not found)"
        en = en or generated(rng, False, 5_000)
        zh = zh or generated(rng, True, 2_000)
    texts = {"mixed": mixed_lines(en, zh, int(args.mb * 1e6)), "english": en, "chinese": zh}
    counters = {enc: TiktokenCounter(enc) for enc in ENCODINGS}

    rows = [row for name, lines in texts.items() for row in measure(name, lines, counters, args.repeats)]
    table = Table(title=f"bench_tokens: {source}; exact = tiktoken (offline), estimate = "
                        f"EstimateCounter; best of {args.repeats}")
    for col in ("text", "encoding", "MB", "lines", "exact tokens", "exact tok/s (whole)",
                "exact tok/s (by line)", "exact MB/s", "estimate tokens", "estimate error",
                "estimate MB/s", "lines below exact"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["text"], r["encoding"], f"{r['mb']:.2f}", f"{r['lines']:,}", f"{r['exact_tokens']:,}",
            f"{r['exact_tokens_per_s']:,}", f"{r['exact_tokens_per_s_by_line']:,}",
            f"{r['exact_mb_per_s']:.2f}", f"{r['estimate_tokens']:,}",
            f"{100 * r['estimate_error']:+.1f}%", f"{r['estimate_mb_per_s']:.2f}",
            str(r["lines_below_exact"]),
        )
    Console(width=200).print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    ok = all(r["estimate_error"] >= 0 and r["lines_below_exact"] == 0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
