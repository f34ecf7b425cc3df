"""Step memory on real agent runs: replay τ-bench airline runs through mindpalace sessions.

For each step budget B (default 500, 2,000, 8,000 tokens) the 200 GPT-4o τ-bench runs are
replayed twice: as 200 separate sessions, and concatenated into one long session. Before every
model call (= every assistant message) the prompt is built with ``session.context`` under the
prompt budget ``B + system prompt`` (the 1,248-token airline policy is sent on every call by
both systems), and, in the same run, a baseline prompt = the system prompt + a plain sliding
window of the last messages (whole tool groups) under the same budget.

Printed per row: steps, compactions, peak prompt tokens vs the budget, prompts over budget
(must be 0), fact survival and step overhead. Facts = identifiers that appeared in tool results
(reservation ids, user ids, payment ids, flight numbers; regex below). "recall" = still
findable at the end through the memory index + tiers and read_records (following record names
mentioned in what was read, as a model would with ``read_files``); "prompt" = present in the
final prompt itself; the baseline has only its final window.

    python benchmarks/bench_steps.py --fast        # 20 runs, seconds
    python benchmarks/bench_steps.py               # all 200 runs
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.memory import Session
from mindpalace.replay import Transcript, load_transcripts, replay
from mindpalace.session.pairing import tool_groups
from mindpalace.steps.checkpoint import render_checkpoint
from mindpalace.steps.records import render_record

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"

IDENTIFIER = re.compile(
    r"\b(?:credit_card|gift_card|certificate)_\d+\b"  # payment ids
    r"|\b[a-z]+_[a-z]+_\d{4}\b"  # user ids
    r"|\bHAT\d{3}\b"  # flight numbers
    r'|(?<=")[A-Z0-9]{6}(?=")'  # reservation ids (quoted 6-character codes)
)
RECORD_NAME = re.compile(r"\b(step_\d+|memory_snapshot_(?:recent|summary)_step_\d+(?:_\d+)?)\b")
STEP_REF = re.compile(r"\bStep (\d+)\b")


def identifiers(texts: Iterable[str]) -> set[str]:
    return {m.group() for t in texts for m in IDENTIFIER.finditer(t)}


# -- baseline ---------------------------------------------------------------------------------
class SlidingWindow:
    """Baseline: the system prompt + the last messages (whole tool groups) that fit the budget."""

    def __init__(self, session: Session, system_prompt: str, budget: int) -> None:
        self.session, self.system, self.budget = session, system_prompt, budget
        self.counter = session.memory.tokens
        self.log: list[dict[str, Any]] = []
        self.peak = 0
        self.window: list[dict[str, Any]] = []

    def __call__(self, session: Session) -> None:
        new = session.messages.list(from_index=len(self.log) + 1)
        self.log.extend(m.message for m in new if m.message.get("role") != "system")
        self.window = self.build()
        self.peak = max(self.peak, self.counter.count_messages(self.window))

    def build(self) -> list[dict[str, Any]]:
        system = {"role": "system", "content": self.system}
        room = self.budget - self.counter.count_messages([system])
        if room < 0:
            return [{"role": "system", "content": self.counter.truncate(self.system, self.budget - 10)}]
        kept: list[dict[str, Any]] = []
        for a, b in reversed(tool_groups(self.log)):
            cost = sum(self.counter.count_message(m) for m in self.log[a:b])
            if cost > room:
                break
            kept[:0] = self.log[a:b]
            room -= cost
        return [system, *kept]


# -- recall ------------------------------------------------------------------------------------
def recallable_text(session: Session) -> str:
    """What a model can reach at the end: the index, tiers, checkpoint and <summary> lines, plus
    every record reachable by name from them (breadth-first over names mentioned in records)."""
    steps = session.steps
    seed = "\n".join(filter(None, [
        *steps.index(), steps.state.summary_text(), steps.state.recent_text(),
        steps.state.pending_text(), render_checkpoint(steps.state.checkpoint) or "",
        *steps.summary_lines,
    ]))
    texts, seen = [seed], set()

    def names_in(text: str) -> set[str]:
        return set(RECORD_NAME.findall(text)) | {f"step_{n}" for n in STEP_REF.findall(text)}

    frontier = names_in(seed)
    while frontier:
        seen |= frontier
        found = session.read_records(sorted(frontier)).found
        frontier = set()
        for record in found.values():
            text = render_record(record)
            texts.append(text)
            frontier |= names_in(text) - seen
    return "\n".join(texts)


def prompt_text(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages:
        c = m.get("content")
        out.append(c if isinstance(c, str) else str(c or ""))
        out.extend(str((tc.get("function") or {}).get("arguments", "")) for tc in m.get("tool_calls") or [])
    return "\n".join(out)


# -- one configuration -----------------------------------------------------------------------------
@dataclass
class Row:
    mode: str
    budget: int
    prompt_budget: int
    steps: int = 0
    compactions: int = 0
    summary_compactions: int = 0
    peak: int = 0
    over: int = 0
    facts: int = 0
    recall_hits: int = 0
    prompt_hits: int = 0
    base_hits: int = 0
    base_peak: int = 0
    step_ms: list[float] | None = None
    context_ms: list[float] | None = None


def run_sessions(mem: Memory, groups: list[list[Transcript]], row: Row, system_prompt: str) -> None:
    step_ms: list[float] = []
    context_ms: list[float] = []
    for i, group in enumerate(groups):
        s = mem.session(f"{row.mode.replace(' ', '_')}-{row.budget}-{i}")
        base = SlidingWindow(s, system_prompt, row.prompt_budget)
        stats = replay(s, group, budget_tokens=row.prompt_budget, system_prompt=system_prompt,
                       on_model_call=base)
        base(s)  # the window after the last message
        final = s.prepare(row.prompt_budget, system_prompt=system_prompt)
        facts = identifiers(stats.tool_results)
        row.facts += len(facts)
        row.recall_hits += len(facts & identifiers([recallable_text(s)]))
        row.prompt_hits += len(facts & identifiers([prompt_text(final.messages)]))
        row.base_hits += len(facts & identifiers([prompt_text(base.window)]))
        row.steps += stats.steps
        row.compactions += s.steps.counters["compactions"]
        row.summary_compactions += s.steps.counters["summary_compactions"]
        row.peak = max(row.peak, stats.peak_prompt_tokens, final.report.total_tokens)
        row.over += stats.over_budget + (final.report.total_tokens > row.prompt_budget)
        row.base_peak = max(row.base_peak, base.peak)
        step_ms += stats.step_ms
        context_ms += stats.context_ms
    row.step_ms, row.context_ms = step_ms, context_ms


def pct(hits: int, total: int) -> str:
    return f"{100 * hits / total:.1f}%" if total else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    ap.add_argument("--budgets", type=int, nargs="+", default=[500, 2_000, 8_000], help="step budgets B (tokens)")
    ap.add_argument("--fast", action="store_true", help="20 runs instead of 200")
    ap.add_argument("--runs", type=int, default=None, help="number of runs (default: all, or 20 with --fast)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the run subset (with --runs / --fast)")
    ap.add_argument("--tokenizer", default="o200k_base", help="tokens.tokenizer setting")
    args = ap.parse_args(argv)

    runs = load_transcripts(args.data / "tau-bench" / "gpt-4o-airline.json")
    n = args.runs or (20 if args.fast else len(runs))
    if n < len(runs):
        picked = sorted(random.Random(args.seed).sample(range(len(runs)), n))
        runs = [runs[i] for i in picked]
    system_prompt = str(runs[0].messages[0]["content"])
    console = Console(width=200)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for budget in args.budgets:
            with Memory.open(Path(tmp) / f"ws{budget}", embed={"provider": "none"},
                             tokens={"tokenizer": args.tokenizer},
                             steps={"budget_tokens": budget}) as mem:
                sys_tokens = mem.tokens.count_messages([{"role": "system", "content": system_prompt}])
                for mode, groups in (("per run", [[r] for r in runs]), ("concatenated", [runs])):
                    row = Row(mode, budget, budget + sys_tokens)
                    t0 = time.perf_counter()
                    run_sessions(mem, groups, row, system_prompt)
                    console.log(f"B={budget} {mode}: {time.perf_counter() - t0:.1f} s")
                    rows.append(row)

    table = Table(title=f"bench_steps: {n} τ-bench airline runs (GPT-4o), extractive summarizer, "
                        f"prompt budget = B + system prompt")
    for col in ("sessions", "B", "prompt budget", "steps", "compactions rec/sum",
                "peak prompt mp / window", "over budget", "facts",
                "facts: mp recall", "mp in prompt", "window (baseline)",
                "step ms p50 / p95", "context ms p50"):
        table.add_column(col, justify="right")
    for r in rows:
        steps_ms = r.step_ms or [0.0]
        table.add_row(
            r.mode, f"{r.budget:,}", f"{r.prompt_budget:,}", str(r.steps),
            f"{r.compactions} / {r.summary_compactions}", f"{r.peak:,} / {r.base_peak:,}", str(r.over),
            str(r.facts), pct(r.recall_hits, r.facts), pct(r.prompt_hits, r.facts), pct(r.base_hits, r.facts),
            f"{statistics.median(steps_ms):.2f} / {statistics.quantiles(steps_ms, n=20)[-1]:.2f}"
            if len(steps_ms) > 1 else f"{steps_ms[0]:.2f}",
            f"{statistics.median(r.context_ms or [0.0]):.2f}",
        )
    console.print(table)
    return 0 if all(r.over == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
