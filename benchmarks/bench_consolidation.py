"""Session consolidation (seed 002) vs the sliding window (seed 004) on real conversations.

Replays each LoCoMo conversation (``locomo/locomo10.json``, speaker A → user, speaker B →
assistant, image captions appended) and each τ-bench airline run (``tau-bench/gpt-4o-airline.json``,
OpenAI messages with parallel tool calls; its policy system message is message #1 of the
session, so it can be archived like any other message) as one chat session, message by
message, at input budgets of 1,000 / 4,000 / 16,000 tokens. Single τ-bench runs are short
(6–62 messages), so "τ-bench tasks" also replays the four trials of each task as one session. A prompt is built before every
model call (whenever the next recorded message is the assistant's, and at the end).

Methods, measured in the same run on the same prompts:

- ``consolidator``: the product path ``Session.prepare()`` (the agent's turn call, at the
  session's configured input budget): ``Consolidator.maybe_consolidate`` runs, then the context
  builder assembles system prompt + "Archived context summary" + the messages after
  ``last_consolidated`` under the budget; summaries by the offline extractive provider
  (``llm.provider = "extractive"``).
- ``sliding window``: seed 004's ``trimMessages`` — keep the newest messages whose tokens fit
  the budget, nothing archived.

Columns: prompts built; consolidations (runs that archived something; history entries in
brackets); peak prompt tokens / budget; prompts over budget on the final prompt (in brackets:
prompts that still needed the context builder's last-resort trimming after consolidation,
because the newest call/result group alone is larger than the budget); prompts refused
(``ContextBudgetError``: the system prompt, which is never cut, does not fit the budget) and
prompts where consolidation backed off (target unreachable for the same fixed part); pairing violations on
the final prompt sent (the window baseline applies no repair); messages that left the prompt with no
archive (for the consolidator: dropped by the builder's last resort and still not archived at
the end — they stay in the message log, readable as ``message:<N>``); archived coverage
(messages that left the prompt and are in history.jsonl, by message range); summarizer tokens (prompt + reply) per 1,000 message tokens; ms per replayed message
(store append + consolidation + prompt estimate).

    python benchmarks/bench_consolidation.py --fast
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.errors import ContextBudgetError
from mindpalace.session.pairing import check_pairing
from mindpalace.tokens import TokenCounter

REPO = Path(__file__).resolve().parents[1]
COMPLETION_TOKENS = 1_024  # reserved for the reply: window = budget + completion + safety
SAFETY_TOKENS = 256


@dataclass
class Conversation:
    dataset: str
    name: str
    system: str  # fixed system prompt (not archivable)
    messages: list[dict[str, Any]]


@dataclass
class Stats:
    prompts: int = 0
    consolidations: int = 0
    entries: int = 0
    peak_ratio: float = 0.0
    over_budget: int = 0
    over_unavoidable: int = 0
    violations: int = 0
    violations_before_repair: int = 0
    lost: int = 0
    left_prompt: int = 0
    covered: int = 0
    summary_tokens: int = 0
    message_tokens: int = 0
    messages: int = 0
    seconds: float = 0.0
    raw_fallbacks: int = 0
    refused: int = 0
    backed_off: int = 0
    notes: list[str] = field(default_factory=list)


def locomo(data: Path, limit: int | None) -> Iterator[Conversation]:
    samples = json.loads((data / "locomo" / "locomo10.json").read_text(encoding="utf-8"))
    for sample in samples[:limit]:
        conv = sample["conversation"]
        a, b = conv["speaker_a"], conv["speaker_b"]
        keys = sorted((k for k in conv if k.startswith("session_") and k.split("_")[-1].isdigit()),
                      key=lambda k: int(k.split("_")[1]))
        msgs = []
        for key in keys:
            for t in conv[key]:
                text = t["text"] + (f" [image: {t['blip_caption']}]" if t.get("blip_caption") else "")
                role = "user" if t["speaker"] == a else "assistant"
                msgs.append({"role": role, "name": t["speaker"], "content": text})
        system = f"You are {b}, chatting with your friend {a}. Stay consistent with earlier sessions."
        yield Conversation("LoCoMo", sample["sample_id"], system, msgs)


def _tau_messages(run: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = []
    for m in run["traj"]:
        msg = {k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
        if msg.get("tool_calls") == []:
            msg.pop("tool_calls")
        if msg["role"] == "tool":
            msg.pop("name", None)
        msgs.append(msg)
    return msgs


def tau(data: Path, limit: int | None, seed: int) -> Iterator[Conversation]:
    runs = json.loads((data / "tau-bench" / "gpt-4o-airline.json").read_text(encoding="utf-8"))
    if limit is not None:
        runs = random.Random(seed).sample(runs, min(limit, len(runs)))
    for run in runs:
        yield Conversation("τ-bench", f"task{run['task_id']}-t{run['trial']}", "", _tau_messages(run))


def tau_tasks(data: Path, limit: int | None, seed: int) -> Iterator[Conversation]:
    """All trials of one task concatenated into one session (the data README's way to stress
    a budget: single runs are 6–62 messages)."""
    runs = json.loads((data / "tau-bench" / "gpt-4o-airline.json").read_text(encoding="utf-8"))
    by_task: dict[int, list[dict[str, Any]]] = {}
    for run in runs:
        by_task.setdefault(run["task_id"], []).append(run)
    tasks = sorted(by_task)
    if limit is not None:
        tasks = sorted(random.Random(seed).sample(tasks, min(limit, len(tasks))))
    for t in tasks:
        trials = sorted(by_task[t], key=lambda r: r["trial"])
        msgs = [m for run in trials for m in _tau_messages(run)]
        yield Conversation("τ-bench tasks", f"task{t}-all", "", msgs)


def call_points(messages: list[dict[str, Any]]) -> set[int]:
    """Positions (number of messages replayed) after which the model is called."""
    n = len(messages)
    return {i for i in range(1, n) if messages[i]["role"] == "assistant"} | {n}


def sliding_window(tokens: list[int], end: int, room: int) -> int:
    """Seed 004's trimMessages: first kept position of the newest messages within `room`."""
    total, start = 0, end
    while start > 0 and total + tokens[start - 1] <= room:
        start -= 1
        total += tokens[start]
    return start


def run_consolidator(conv: Conversation, mem: Memory, budget: int, st: Stats) -> None:
    counter: TokenCounter = mem.tokens
    s = mem.session(conv.name)
    c = s.consolidator
    points = call_points(conv.messages)
    unarchived_gone: set[int] = set()  # left the prompt (builder's last resort) before any archive
    for pos, msg in enumerate(conv.messages, 1):
        t0 = time.perf_counter()
        s.add_message(msg)
        if pos in points:
            # The product path: the turn call consolidates first, then the builder assembles the
            # prompt under the budget (last-resort trimming only for an oversized newest group).
            live_before = [m.message for m in c.live_messages()]
            st.prompts += 1
            try:
                built = s.prepare(system_prompt=conv.system or None)
            except ContextBudgetError:  # the system prompt alone does not fit: never cut
                st.seconds += time.perf_counter() - t0
                st.refused += 1
                continue
            st.seconds += time.perf_counter() - t0
            r = built.report.consolidation
            st.backed_off += bool(r is not None and r.backed_off)
            if r is not None and r.consolidated:
                st.consolidations += 1
                st.entries += r.entries
                st.raw_fallbacks += r.raw_fallbacks
            st.summary_tokens += r.summary_tokens_spent if r is not None else 0
            tokens = built.report.total_tokens
            assert tokens == counter.count_messages(built.messages), "report drifted"
            st.peak_ratio = max(st.peak_ratio, tokens / budget)
            if tokens > budget:
                st.over_budget += 1
            if built.report.degradations:
                st.over_unavoidable += 1  # needed last-resort trimming after consolidation
            dropped = sum(int(n) for d in built.report.degradations
                          for n in re.findall(r"^dropped (\d+) (?:oldest|more) messages", d))
            lc = c.last_consolidated
            unarchived_gone.update(range(lc + 1, lc + 1 + dropped))
            st.violations += len(check_pairing(built.messages))
            st.violations_before_repair += len(check_pairing(live_before))
        else:
            st.seconds += time.perf_counter() - t0
    lc = c.last_consolidated
    st.lost += len({i for i in unarchived_gone if i > lc})  # still only in the message log
    st.left_prompt += lc
    ranges = [e.messages for e in c.history.read(session=s.scope) if e.messages]
    covered = sorted(i for a, b in ranges for i in range(a, b + 1))
    st.covered += len(set(covered) & set(range(1, lc + 1)))
    if covered != list(range(1, lc + 1)):
        st.notes.append(f"{conv.name}: archive ranges {ranges} vs cursor {lc}")
    st.messages += len(conv.messages)
    st.message_tokens += sum(counter.count_message(m) for m in conv.messages)


def run_window(conv: Conversation, counter: TokenCounter, budget: int, st: Stats) -> None:
    system_msgs = [{"role": "system", "content": conv.system}] if conv.system else []
    fixed = counter.count_messages(system_msgs)  # system + reply priming
    tokens = [counter.count_message(m) for m in conv.messages]
    first_kept = 0
    for pos in sorted(call_points(conv.messages)):
        t0 = time.perf_counter()
        start = sliding_window(tokens, pos, budget - fixed)
        st.seconds += time.perf_counter() - t0
        window = conv.messages[start:pos]
        st.prompts += 1
        total = fixed + sum(tokens[start:pos])
        st.peak_ratio = max(st.peak_ratio, total / budget)
        if total > budget:
            st.over_budget += 1
        st.violations += len(check_pairing(window))
        first_kept = max(first_kept, start)
    st.lost += first_kept  # the window start never moves back: these left with no archive
    st.left_prompt += first_kept
    st.messages += len(conv.messages)
    st.message_tokens += sum(tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--budgets", type=int, nargs="+", default=[1_000, 4_000, 16_000])
    ap.add_argument("--locomo", type=int, default=None, help="LoCoMo conversations (default all 10).")
    ap.add_argument("--tau", type=int, default=None, help="τ-bench runs (default all 200).")
    ap.add_argument("--tau-tasks", type=int, default=None,
                    help="τ-bench tasks with all their trials in one session (default all 50).")
    ap.add_argument("--seed", type=int, default=7, help="Seed of the τ-bench samples.")
    ap.add_argument("--fast", action="store_true",
                    help="2 LoCoMo conversations, 20 τ-bench runs, 5 τ-bench tasks.")
    ap.add_argument("--json", type=Path, default=None, help="Also write the rows as JSON here.")
    args = ap.parse_args()
    n_locomo = args.locomo if args.locomo is not None else (2 if args.fast else None)
    n_tau = args.tau if args.tau is not None else (20 if args.fast else None)
    n_tasks = args.tau_tasks if args.tau_tasks is not None else (5 if args.fast else None)
    datasets = {"LoCoMo": list(locomo(args.data, n_locomo)),
                "τ-bench": list(tau(args.data, n_tau, args.seed)),
                "τ-bench tasks": list(tau_tasks(args.data, n_tasks, args.seed))}

    rows = []
    for name, convs in datasets.items():
        for budget in args.budgets:
            cons, win = Stats(), Stats()
            with tempfile.TemporaryDirectory() as tmp:
                settings = {"context_window_tokens": budget + COMPLETION_TOKENS + SAFETY_TOKENS,
                            "max_completion_tokens": COMPLETION_TOKENS,
                            "safety_buffer_tokens": SAFETY_TOKENS}
                with Memory.open(Path(tmp) / "ws", session=settings, embed={"provider": "none"},
                                 llm={"provider": "extractive"}) as mem:
                    assert mem.session("probe").consolidator.budget_tokens == budget
                    for conv in convs:
                        run_consolidator(conv, mem, budget, cons)
                        run_window(conv, mem.tokens, budget, win)
            rows.append((name, budget, "consolidator", cons))
            rows.append((name, budget, "sliding window", win))

    table = Table(title=f"Session consolidation vs sliding window — LoCoMo {len(datasets['LoCoMo'])} "
                        f"conversations, τ-bench {len(datasets['τ-bench'])} runs, "
                        f"{len(datasets['τ-bench tasks'])} τ-bench tasks (all trials in one session)")
    for col in ("data", "budget", "method", "prompts", "consolidations (entries)", "peak / budget",
                "over budget (trimmed)", "refused / backed off", "pairing violations", "lost w/o archive",
                "archived coverage", "summary tok / 1k msg tok", "ms / msg"):
        table.add_column(col, justify="left" if col in ("data", "method") else "right")
    out = []
    for name, budget, method, st in rows:
        is_cons = method == "consolidator"
        coverage = (f"{100 * st.covered / st.left_prompt:.1f}%" if st.left_prompt else "n/a") \
            if is_cons else "0% (none kept)" if st.left_prompt else "n/a"
        table.add_row(
            name, f"{budget:,}", method, f"{st.prompts:,}",
            f"{st.consolidations:,} ({st.entries:,})" if is_cons else "—",
            f"{st.peak_ratio:.2f}",
            f"{st.over_budget} ({st.over_unavoidable})" if is_cons else str(st.over_budget),
            f"{st.refused} / {st.backed_off}" if is_cons else "—",
            str(st.violations), f"{st.lost:,}", coverage,
            f"{1000 * st.summary_tokens / max(1, st.message_tokens):.0f}" if is_cons else "0",
            f"{1000 * st.seconds / max(1, st.messages):.2f}",
        )
        out.append({"data": name, "budget": budget, "method": method, **{
            k: v for k, v in st.__dict__.items() if k != "notes"}, "notes": st.notes[:5]})
        for note in st.notes[:3]:
            print("note:", note)
    Console(width=240).print(table)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
