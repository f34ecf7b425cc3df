"""Shared fixtures: fresh workspaces with fresh random scopes, and the real evaluation data."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mindpalace import Memory

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """`../shared/data` beside the repository (override with MINDPALACE_SHARED_DATA)."""
    return Path(os.environ.get("MINDPALACE_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.exists():
        pytest.skip(f"evaluation data not found at {path}")
    return path


@pytest.fixture
def workspace_dir(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def memory(workspace_dir: Path) -> Iterator[Memory]:
    """A fresh workspace with the deterministic hashing embedder (no model load in unit tests)."""
    mem = Memory.open(workspace_dir, embed={"provider": "hashing"})
    try:
        yield mem
    finally:
        mem.close()


@pytest.fixture
def uid() -> str:
    """A fresh random id for scopes, so tests never see each other's rows."""
    return uuid.uuid4().hex[:12]
