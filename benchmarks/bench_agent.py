"""The agent loop (``mindpalace.agent``) against a scripted model on loopback, next to two plain
loops measured in the same run with the same script and the same model client.

Scenario (seed 004's long trip): T turns; in each the scripted model calls
``search_attraction(name)`` (read-only; ~``--result-tokens`` tokens of text) and
``book_ticket(place, date)``, then answers. Every ``--repeat-every``-th turn it has "forgotten"
the previous turn's booking and books that place again with the same arguments (seed 004's triple
booking). The model is the package's OpenAI-compatible stub server; every loop talks to it
through the same ``OpenAIProvider.chat`` over HTTP, so only the memory differs:

* **mindpalace** — ``Agent`` on a fresh session: ``Session.prepare`` before every model call
  under ``--budget`` tokens, side effects through the ledger, steps recorded;
* **full history** — the whole conversation in every prompt, tools run directly;
* **window 20** — the system prompt + the last 20 messages (cut at a user message so no tool
  result loses its call), tools run directly.

Reported per loop: model requests, the largest prompt the server received and how many were
over the budget (counted with the workspace's tokenizer on the received JSON, tool schemas
included), bookings made and duplicates (repeats of an existing booking), and turn latency
p50 / p95 (ms, client side; the stub answers at once, so this is the loop's own overhead plus
one loopback HTTP exchange per model call). Recall is keyword-only (``embed.provider = none``).

    python benchmarks/bench_agent.py            # 60 turns
    python benchmarks/bench_agent.py --fast     # 12 turns
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.agent import Agent, Tool, tool
from mindpalace.providers.llm import LLMProvider
from mindpalace.testing.openai_stub import Reply, StubServer, chat, serve_stub, tool_call
from mindpalace.tokens import TokenCounter

console = Console(width=132)
PLACES = ("Senso-ji", "Meiji Jingu", "Ueno Park", "Tokyo Tower", "Shibuya Sky", "teamLab", "Ginza Six",
          "Odaiba", "Akihabara", "Yanaka", "Kichijoji", "Nikko")
SYSTEM = "You are a travel-planning agent. Book each attraction exactly once."
WINDOW_MESSAGES = 20


class World:
    """The booking system: every call of book_ticket is one booking."""

    def __init__(self, result_tokens: int) -> None:
        self.bookings: list[tuple[str, str]] = []
        self.result_words = result_tokens // 2  # "word." ≈ 2 tokens

    def tools(self) -> list[Tool]:
        def search_attraction(name: str) -> str:
            """Opening hours, tickets and tips for an attraction."""
            return f"{name}: " + " ".join(f"tip{i}." for i in range(self.result_words))

        def book_ticket(place: str, date: str) -> dict[str, str]:
            """Book one entry ticket."""
            self.bookings.append((place, date))
            return {"booking_id": f"TK{len(self.bookings):04d}", "place": place}

        return [Tool.from_function(search_attraction), tool(book_ticket, side_effect=True)]

    @property
    def duplicates(self) -> int:
        return len(self.bookings) - len(set(self.bookings))


def script(turns: int, repeat_every: int) -> list[Reply]:
    replies = []
    for t in range(turns):
        place = PLACES[t % len(PLACES)]
        date = f"2025-05-{1 + t // len(PLACES):02d}"
        if repeat_every and t and t % repeat_every == 0:  # forgot it: books the previous one again
            earlier = t - 1  # never a repeat turn itself (repeat_every >= 2)
            place, date = PLACES[earlier % len(PLACES)], f"2025-05-{1 + earlier // len(PLACES):02d}"
        replies.append(chat(f"<summary>turn {t}: search and book {place}</summary>", tool_calls=[
            tool_call("search_attraction", {"name": place}, id=f"s{t}"),
            tool_call("book_ticket", {"place": place, "date": date}, id=f"b{t}")]))
        replies.append(chat(f"Booked {place} for {date}. <summary>booked {place}</summary>"))
    return replies


def plain_loop(llm: LLMProvider, tools: list[Tool], window: int | None) -> Callable[[str], None]:
    """A loop with no memory engine: the conversation (or its last `window` messages) as the prompt."""
    by_name = {t.name: t for t in tools}
    schemas = [t.schema for t in tools]
    convo: list[dict[str, Any]] = []

    def prompt() -> list[dict[str, Any]]:
        shown = convo
        if window is not None and len(convo) > window:
            start = len(convo) - window
            while start < len(convo) and convo[start]["role"] != "user":
                start += 1  # never start on a tool result or an assistant tool call
            shown = convo[start:]
        return [{"role": "system", "content": SYSTEM}, *shown]

    def run(message: str) -> None:
        convo.append({"role": "user", "content": message})
        while True:
            reply = llm.chat(prompt(), tools=schemas)
            convo.append(reply.message())
            if not reply.tool_calls:
                return
            for call in reply.tool_calls:
                t = by_name[call.name]
                kwargs, _ = t.parse(call.arguments)
                convo.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(t.fn(**kwargs))})

    return run


def measure(name: str, stub: StubServer, replies: list[Reply], turns: int, world: World,
            run: Callable[[str], None], counter: TokenCounter, budget: int) -> dict[str, Any]:
    stub.script(*replies)
    with stub.lock:
        stub.requests.clear()
    times = []
    for t in range(turns):
        t0 = time.perf_counter()
        run(f"Turn {t}: plan and book the next attraction.")
        times.append((time.perf_counter() - t0) * 1000)
    sizes = [counter.count_messages(r["json"]["messages"], r["json"].get("tools")) for r in stub.requests]
    return {
        "loop": name, "turns": turns, "requests": len(sizes), "peak_prompt_tokens": max(sizes),
        "over_budget": sum(1 for n in sizes if n > budget), "bookings": len(world.bookings),
        "duplicates": world.duplicates, "turn_ms_p50": round(statistics.median(times), 1),
        "turn_ms_p95": round(sorted(times)[int(0.95 * (len(times) - 1))], 1),
    }


def run_all(turns: int, repeat_every: int, budget: int, result_tokens: int) -> list[dict[str, Any]]:
    replies = script(turns, repeat_every)
    rows = []
    world = World(result_tokens)
    with serve_stub() as stub, tempfile.TemporaryDirectory() as tmp, \
            Memory.open(Path(tmp) / "ws", embed={"provider": "none"}, llm={"max_retries": 0},
                        agent={"base_url": stub.url, "model": "stub", "budget_tokens": budget,
                               "system_prompt": SYSTEM}) as mem, \
            Agent(mem.session("trip", user="bench"), world.tools()) as agent:
        rows.append(measure("mindpalace", stub, replies, turns, world, agent.run, mem.tokens, budget))
        for label, window in (("full history", None), (f"window {WINDOW_MESSAGES}", WINDOW_MESSAGES)):
            w = World(result_tokens)
            rows.append(measure(label, stub, replies, turns, w,
                                plain_loop(agent.llm, w.tools(), window), mem.tokens, budget))
    return rows


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=60)
    p.add_argument("--repeat-every", type=int, default=5, help="every Nth turn re-books the previous turn's place (0 = never, else >= 2)")
    p.add_argument("--budget", type=int, default=4_000, help="prompt budget of the agent (tokens)")
    p.add_argument("--result-tokens", type=int, default=600, help="size of one search result (tokens)")
    p.add_argument("--fast", action="store_true", help="12 turns")
    p.add_argument("--json", type=Path, help="write the rows here")
    a = p.parse_args(argv)
    if a.repeat_every == 1:
        p.error("--repeat-every must be 0 or at least 2")
    turns = 12 if a.fast else a.turns
    rows = run_all(turns, a.repeat_every, a.budget, a.result_tokens)
    table = Table(title=f"agent loop, {turns} turns, budget {a.budget} tokens, re-booking every "
                        f"{a.repeat_every} turns — {datetime.now(UTC):%Y-%m-%d}, commit {commit()}")
    for col in ("loop", "requests", "peak prompt tokens", "over budget", "bookings", "duplicates",
                "turn ms p50", "turn ms p95"):
        table.add_column(col, justify="left" if col == "loop" else "right")
    for r in rows:
        table.add_row(r["loop"], str(r["requests"]), f"{r['peak_prompt_tokens']:,}", str(r["over_budget"]),
                      str(r["bookings"]), str(r["duplicates"]), f"{r['turn_ms_p50']:.1f}",
                      f"{r['turn_ms_p95']:.1f}")
    console.print(table)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
