"""An agent worker's workload for multi-process benchmarks: importable, so that spawned worker
processes find it whatever way the benchmark itself was loaded."""

from __future__ import annotations

import hashlib
import random
import time
from typing import Any

from mindpalace.memory import Memory

CITIES = ["Lisbon", "Porto", "Tokyo", "Kyoto", "Osaka", "Paris", "Lyon", "Berlin", "Munich",
          "Madrid", "Seville", "Rome", "Milan", "Vienna", "Prague", "Oslo", "Bergen", "Dublin"]
THINGS = ["hotel", "flight", "budget", "restaurant", "museum", "train", "visa", "meeting",
          "dentist", "gym", "concert", "birthday", "allergy", "car", "insurance", "rent"]


def fact_text(i: int, rng: random.Random) -> str:
    """A made-up fact about the user (varied words, cities, amounts)."""
    return (f"user:{rng.choice(THINGS)}_{i}: the {rng.choice(THINGS)} in {rng.choice(CITIES)} "
            f"costs {rng.randint(10, 5000)} and is booked for day {rng.randint(1, 365)} "
            f"(note {i})")


def agent_turns(url: str, folder: str, p: int, turns: int, start: Any) -> list[tuple[float, float]]:
    """Worker process `p`: after `start` (a barrier) releases, `turns` agent turns on its own
    session of the shared user ``alice`` — a user message, a remembered long-term fact, a
    recall, an assistant message. Returns (start time, seconds) per turn (perf_counter)."""
    rng = random.Random(p)
    out = []
    with Memory.open(url, workspace=folder, embed={"provider": "hashing"}) as mem:
        s = mem.session(f"worker-{p}", user="alice", agent="a")
        s.recall("warm up")
        start.wait()
        for i in range(turns):
            t0 = time.perf_counter()
            s.add_message({"role": "user", "content": f"worker {p} turn {i}: {fact_text(i, rng)}"})
            s.remember(f"user:w{p}_t{i}", fact_text(i, rng), importance=0.9)
            s.recall(f"{rng.choice(THINGS)} in {rng.choice(CITIES)}")
            s.add_message({"role": "assistant", "content": f"noted {p}/{i}"})
            out.append((t0, time.perf_counter() - t0))
    return out


TAIL_PHRASE = "quokka zeppelin marmalade"
"""Rare words that appear only in the last line of :func:`log_output` (a recall probe)."""


def log_output(chars: int) -> str:
    """A huge tool output: distinct log lines (no two alike, so nothing collapses into a few
    terms) of about `chars` characters, then a tail sentence holding :data:`TAIL_PHRASE`, found
    nowhere else — what the payload tests and ``bench_payloads`` record and recall."""
    lines, size, i = [], 0, 0
    while size < chars:
        line = f"{i:08d} GET /api/v1/items/{i} 200 sha={hashlib.sha1(str(i).encode()).hexdigest()[:16]} ok"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines) + f"\nfinal line: the {TAIL_PHRASE} report ends here"
