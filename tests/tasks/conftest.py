"""Fixtures for task tests: a session of a fresh workspace with a small snapshot interval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.memory import Session


@pytest.fixture
def tmemory(tmp_path: Path) -> Iterator[Memory]:
    mem = Memory.open(tmp_path / "ws", embed={"provider": "none"}, tasks={"snapshot_every_events": 5})
    try:
        yield mem
    finally:
        mem.close()


@pytest.fixture
def session(tmemory: Memory, uid: str) -> Session:
    return tmemory.session(f"trip-{uid}", user="u1", agent="planner")
