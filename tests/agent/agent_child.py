"""A child process for the kill-and-resume tests (run as a script, not collected by pytest).

The agent loop against the test's stub server with a side-effecting ``book_ticket`` that counts
its effects in a file, and a read-only ``wait_for_operator``; ``--park-in book`` / ``wait``
parks the process inside that tool (after ``book_ticket`` wrote its effect): it prints
``PARKED`` and blocks on stdin, which the test never writes — it kills the process instead.
Prints ``RESULT <json of the turn>`` when the turn ends.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mindpalace import Memory
from mindpalace.agent import Agent, AgentTurn, tool


def turn_json(turn: AgentTurn | None) -> Any:
    if turn is None:
        return None
    return {"index": turn.index, "reply": turn.reply, "stopped": turn.stopped, "resumed": turn.resumed,
            "tool_calls": [{"name": c.name, "status": c.status, "content": c.content} for c in turn.tool_calls],
            "unknown_calls": turn.unknown_calls, "earlier": turn_json(turn.earlier)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workspace")
    p.add_argument("--session", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--effects", required=True)
    p.add_argument("--park-in", choices=["none", "book", "wait"], default="none")
    p.add_argument("--message")
    a = p.parse_args()
    effects = Path(a.effects)

    def park() -> None:
        print("PARKED", flush=True)
        sys.stdin.readline()  # the test kills the process while it waits here

    @tool(side_effect=True)
    def book_ticket(place: str, date: str) -> dict[str, str]:
        """Book one entry ticket."""
        with effects.open("a", encoding="utf-8") as f:
            f.write(f"{place} {date}\n")
        if a.park_in == "book":
            park()
        return {"booking_id": f"TK{len(effects.read_text(encoding='utf-8').splitlines()):03d}"}

    @tool
    def wait_for_operator() -> str:
        """Wait until an operator confirms the booking."""
        if a.park_in == "wait":
            park()
        return "confirmed"

    with Memory.open(a.workspace, embed={"provider": "hashing"}, llm={"max_retries": 0},
                     agent={"base_url": a.base_url, "model": "stub"}) as mem, \
            Agent(mem.session(a.session, user="u1"), [book_ticket, wait_for_operator]) as agent:
        turn = agent.run(a.message) if a.message else agent.resume()
    print("RESULT " + json.dumps(turn_json(turn)), flush=True)


if __name__ == "__main__":
    main()
