"""Where the tokens of a small prompt go: quoted memory versus the framing around it.

``bench_prompt_recall``'s ``recall packed`` baseline spends almost its whole budget on quoted
lines; ``Session.prepare`` also pays for what makes the memory usable — each recalled day's date
line and references, relative-date notes, envelopes and headers, the archived-range pointer,
the memory tool exchange, the request's date. This script builds the same prompts (one LoCoMo
conversation in one session, each question appended last, ``Session.prepare(budget)``) and
reports the mean tokens of each part per budget, so a framing change can be weighed against
what the quoted lines would gain from the room.

Parts (tokens of the exact counter; a part's lines are counted with their newline):

- ``memory call``: the synthetic ``memory`` tool call and the tool message's own overhead;
- ``archived pointer``: the archived-context envelope (summaries or the hidden ranges' names);
- ``headers``: the recalled block's header line;
- ``envelopes``: the ``<memory …>`` / ``</memory>`` tags around recalled items;
- ``day lines``: ``[8 May 2023 message:11–12,15]`` — a recalled day's date and references;
- ``date notes``: ``[yesterday = 7 May 2023]`` after a quoted line;
- ``message dates``: when the messages shown verbatim were written (the request's date);
- ``conversation``: messages shown verbatim, the request included;
- ``quoted``: the rest — the recalled lines themselves (``Speaker: text``) and the reply priming.

    python benchmarks/prompt_framing.py --budgets 1000 2000 --conversations conv-26 conv-30
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.blocks import is_memory_message
from mindpalace.eval.locomo import load_locomo, turn_content
from mindpalace.recalled import (
    COMPACT_DATES_HEADER,
    COMPACT_RECALLED_HEADER,
    DATES_HEADER,
    RECALLED_HEADER,
)
from mindpalace.tokens import TokenCounter

REPO = Path(__file__).resolve().parents[1]
PARTS = ("memory call", "archived pointer", "headers", "envelopes", "day lines", "date notes",
         "message dates", "conversation", "quoted")
_OPEN = re.compile(r"^<memory [^>]*>")
_CLOSE = "</memory>"
_DAY_LINE = re.compile(r"^\[[^\]]*message:[^\]]*\]$")
_NOTE = re.compile(r" \[[^\[\]]* = [^\[\]]*\]")
_SENT = re.compile(r"^message:\S+ sent ")  # the message-dates note of one run
_DATES_RUN = re.compile(r"^(?:#\d|message:\S+: )")  # a run's line below the note's header
_HEADERS = (RECALLED_HEADER, COMPACT_RECALLED_HEADER)
_DATES = (DATES_HEADER, COMPACT_DATES_HEADER)


def parts_of(messages: Sequence[dict[str, Any]], counter: TokenCounter) -> Counter[str]:
    """Tokens of each of :data:`PARTS` in one prompt; they add up to the prompt's count
    (``quoted`` takes what no other part claims, the reply priming included)."""
    out: Counter[str] = Counter()
    for m in messages:
        whole = counter.count_message(m)
        if not is_memory_message(m):
            out["conversation"] += whole
            continue
        content = m.get("content")
        text = content if isinstance(content, str) else ""
        out["memory call"] += whole - counter.count(text)
        _memory_text(text, counter, out)
    out["quoted"] += counter.count_messages(list(messages)) - sum(out.values())
    return out


def _memory_text(text: str, counter: TokenCounter, out: Counter[str]) -> None:
    """Adds the framing parts of one memory message's text to `out` (its quoted lines are the
    remainder :func:`parts_of` computes)."""
    archived = dates = False
    for line in text.split("\n"):
        opened = _OPEN.match(line)
        if opened and 'source="archived summary"' in opened.group(0):
            archived = True
        if archived:
            out["archived pointer"] += counter.count(line) + 1
            archived = _CLOSE not in line
            continue
        if line in _HEADERS:
            out["headers"] += counter.count(line) + 1
            continue
        dates = line in _DATES or (dates and bool(_DATES_RUN.match(line)))
        if dates or _SENT.match(line):
            out["message dates"] += counter.count(line) + 1
            continue
        if opened:
            out["envelopes"] += counter.count(opened.group(0))
            line = line[opened.end():]
        if line.endswith(_CLOSE):
            out["envelopes"] += counter.count(_CLOSE)
            line = line.removesuffix(_CLOSE)
        if _DAY_LINE.match(line):
            out["day lines"] += counter.count(line) + 1
            continue
        out["date notes"] += sum(counter.count(n) for n in _NOTE.findall(line))


def run(data: Path, conversations: Sequence[str] | None, budgets: Sequence[int], limit: int | None,
        embed: str | None) -> dict[int, dict[str, float]]:
    """Mean tokens of each part per budget over every question (categories 1–4 with
    evidence, as ``bench_prompt_recall`` asks them) of the `conversations` (None = all)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_prompt_recall import questions  # the benchmark's own question set

    file = data / "locomo" / "locomo10.json"
    raw = {s["sample_id"]: s for s in json.loads(file.read_text(encoding="utf-8"))}
    convs = [c for c in load_locomo(file) if not conversations or c.sample_id in conversations]
    totals: dict[int, Counter[str]] = {b: Counter() for b in budgets}
    asked = 0
    overrides: dict[str, Any] = {"embed": {"provider": embed}} if embed else {}
    with tempfile.TemporaryDirectory(prefix="mindpalace-framing-") as tmp, \
            Memory.open(Path(tmp) / "ws", **overrides) as memory:
        for conv in convs:
            qas = questions(raw[conv.sample_id], conv)[:limit]
            first = conv.turns[0].speaker
            msgs = [{"role": "user" if t.speaker == first else "assistant", "name": t.speaker,
                     "content": turn_content(t, captions=True)} for t in conv.turns]
            asked += len(qas)
            for budget in budgets:
                session = memory.session("chat", user=f"{conv.sample_id}-{budget}", agent="locomo")
                session.messages.add_many(msgs, timestamps=[t.date for t in conv.turns])
                for qa in qas:
                    session.add_message({"role": "user", "content": qa.question}, timestamp=conv.turns[-1].date)
                    totals[budget] += parts_of(session.prepare(budget).messages, memory.tokens)
    return {b: {p: totals[b][p] / max(1, asked) for p in PARTS} for b in budgets}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("MINDPALACE_SHARED_DATA", REPO.parent / "shared" / "data")))
    ap.add_argument("--budgets", type=int, nargs="+", default=[1_000, 2_000])
    ap.add_argument("--conversations", nargs="*", default=None, help="sample ids (default all ten)")
    ap.add_argument("--questions", type=int, default=None, help="first N questions per conversation")
    ap.add_argument("--embed", default=None, help="embed.provider override (default: the workspace default)")
    ap.add_argument("--json", type=Path, default=None, help="also write the means as JSON here")
    args = ap.parse_args(argv)
    if not (args.data / "locomo" / "locomo10.json").exists():
        print(f"LoCoMo data not found under {args.data}", file=sys.stderr)
        return 2
    means = run(args.data, args.conversations, args.budgets, args.questions, args.embed)
    table = Table(title="Mean tokens of each part of the prepare prompt")
    table.add_column("part")
    for b in args.budgets:
        table.add_column(str(b), justify="right")
    for part in PARTS:
        table.add_row(part, *(f"{means[b][part]:.1f}" for b in args.budgets))
    table.add_row("total", *(f"{sum(means[b].values()):.1f}" for b in args.budgets))
    Console(width=120).print(table)
    if args.json:
        args.json.write_text(json.dumps({str(b): m for b, m in means.items()}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
