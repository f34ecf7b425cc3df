"""Fixtures for step-memory tests: a workspace with a small step budget and a scripted LLM."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.memory import Session
from mindpalace.settings import LLMSettings
from mindpalace.steps import StepMemory
from mindpalace.testing import wiring
from mindpalace.testing.fakes import FakeLLM

SMALL = {"budget_tokens": 60, "line_max_chars": 120}


@pytest.fixture
def small_memory(tmp_path: Path) -> Iterator[Memory]:
    """A workspace whose recent tier compacts after a few steps (B = 60 tokens)."""
    mem = Memory.open(tmp_path / "ws", embed={"provider": "none"}, steps=SMALL)
    try:
        yield mem
    finally:
        mem.close()


def new_session(mem: Memory) -> Session:
    return mem.session(uuid.uuid4().hex[:10], user="u1", agent="a1")


def step_memory(mem: Memory, llm: FakeLLM | None = None) -> StepMemory:
    """A StepMemory on a fresh session, summarizing with `llm` (default: extractive FakeLLM)."""
    return wiring.step_memory(new_session(mem), llm or FakeLLM(settings=LLMSettings(max_retries=0)))


def run_steps(steps: StepMemory, n: int, *, start: int = 0) -> list[int]:
    ids = []
    for i in range(start, start + n):
        sid = steps.begin(f"look up reservation R{i:04d} for passenger number {i}", action=f"lookup({i})")
        steps.evaluate(sid, "success", analysis=f"found R{i:04d}", tool_outputs=[f'{{"id": "R{i:04d}"}}'])
        ids.append(sid)
    return ids
