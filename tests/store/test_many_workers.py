"""Many agent workers on one PostgreSQL memory (issue 14): 8 worker processes, each with its
own session, share one user's long-term facts and one task's ledger.

Invariants checked after the run: zero lost writes (every acknowledged remember and message is
there), zero duplicate side effects (each ledger key's tool ran exactly once, whichever worker
got there first; the others were refused or got the recorded result), zero resurrected
deletions (a forgotten fact stays forgotten while others keep writing), and concurrent
corrections of one key form one contiguous version chain with one current value.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from mindpalace import Memory
from mindpalace.errors import ToolCallInFlightError

WORKERS = 8
ROUNDS = 6
USER = "alice"


def _worker(url: str, folder: str, p: int, effects: str, start: Any) -> dict[str, Any]:
    """One agent worker: its own session, the user's shared facts, the shared task's ledger."""
    acked: dict[str, str] = {}
    forgotten: list[str] = []
    shared: list[str] = []
    ran: list[str] = []
    refused = 0
    with Memory.open(url, workspace=folder, embed={"provider": "hashing"}) as mem:
        own = mem.session(f"worker-{p}", user=USER, agent="agent")
        task = mem.session("shared-task", user=USER, agent="agent")
        start.wait()  # every worker is open before any writes
        for i in range(ROUNDS):
            own.add_message({"role": "user", "content": f"worker {p} turn {i}"})
            own.add_message({"role": "assistant", "content": f"noted {p}/{i}"})
            key = f"user:fact_{p}_{i}"
            own.remember(key, f"value {p} {i}", importance=0.9)
            acked[key] = f"value {p} {i}"
            if i % 3 == 0:
                assert own.forget(key) is True
                forgotten.append(key)
            city = f"city-{p}-{i}"
            own.remember("user:shared_city", city, importance=0.9)
            shared.append(city)

            def book(slot: int, _p: int = p) -> dict[str, int]:
                with open(effects, "a", encoding="utf-8") as fh:  # the side effect
                    fh.write(f"book-{slot} {_p}\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                ran.append(f"book-{slot}")
                return {"slot": slot, "by": _p}

            try:
                with task.tool_call("book", {"slot": i}, key=f"book-{i}") as call:
                    call.run(book)
            except ToolCallInFlightError:  # another worker is mid-call: never run it twice
                refused += 1
    return {"acked": acked, "forgotten": forgotten, "shared": shared, "ran": ran,
            "refused": refused}


@pytest.mark.slow
def test_eight_workers_lose_nothing_duplicate_nothing_resurrect_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    url = pg_url
    folder, effects = str(tmp_path / "ws"), str(tmp_path / "effects.log")
    Path(effects).touch()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Barrier(WORKERS)
        with ctx.Pool(WORKERS) as pool:
            results = pool.starmap(_worker, [(url, folder, p, effects, start)
                                             for p in range(WORKERS)])
    with Memory.open(url, workspace=folder, embed={"provider": "hashing"}) as mem:
        reader = mem.session("reader", user=USER, agent="agent")
        # zero lost writes: every acknowledged fact not forgotten is there with its value
        forgotten = {k for r in results for k in r["forgotten"]}
        for r in results:
            for key, value in r["acked"].items():
                got = reader.facts.get(key)
                if key in forgotten:  # zero resurrected deletions
                    assert got is None, key
                else:
                    assert got is not None and got.content == value, key
        assert len(forgotten) == WORKERS * len(range(0, ROUNDS, 3))
        recalled = {h.fact.key for h in reader.recall("value", k=200) if h.fact is not None}
        assert recalled and not recalled & forgotten
        for p in range(WORKERS):  # every message of every worker, in order
            texts = [m.message["content"] for m in mem.session(
                f"worker-{p}", user=USER, agent="agent").messages.list()]
            assert texts == [t for i in range(ROUNDS) for t in
                             (f"worker {p} turn {i}", f"noted {p}/{i}")]
        # one version chain for the key every worker corrected: all acknowledged, one current
        history = reader.facts.history("user:shared_city")
        assert sorted(v.content for v in history) == sorted(c for r in results for c in r["shared"])
        assert sum(v.current for v in history) == 1
        # zero duplicate side effects: each booking ran exactly once and is recorded completed
        lines = Path(effects).read_text(encoding="utf-8").splitlines()
        per_key = Counter(line.split()[0] for line in lines)
        assert per_key == {f"book-{i}": 1 for i in range(ROUNDS)}
        assert sorted(k for r in results for k in r["ran"]) == sorted(per_key)
        ledger = {e.key: e for e in mem.session("shared-task", user=USER, agent="agent")
                  .tasks.ledger.entries("shared-task")}
        assert {k: e.status for k, e in ledger.items()} == {f"book:book-{i}": "completed"
                                                           for i in range(ROUNDS)}
        for line in lines:  # the recorded result names the worker whose effect it was
            slot, by = line.split()
            assert ledger[f"book:{slot}"].result == {"slot": int(slot.split("-")[1]), "by": int(by)}
