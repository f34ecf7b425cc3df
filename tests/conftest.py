"""Shared fixtures: fresh workspaces with fresh random scopes, and the real evaluation data."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from mindpalace import Memory
from mindpalace.testing import postgres

REPO = Path(__file__).resolve().parents[1]

# No per-example deadline anywhere: a property test must not fail because the machine is
# loaded (tests never depend on timing); tests that set their own settings inherit this.
settings.register_profile("mindpalace", deadline=None)
settings.load_profile("mindpalace")


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


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str | None]:
    """The facade tests run on both backends: None (SQLite, the workspace's memory.db), or the
    URL of a fresh schema on the PostgreSQL test server (dropped afterwards), also set as
    ``MINDPALACE_DATABASE_URL`` so that every ``Memory.open`` of the test (a reopen too) uses
    it. Tests marked ``sqlite_only`` inspect SQLite's file and run on SQLite only. Without a
    server the PostgreSQL half is skipped with a message saying so (a failure in CI, see
    mindpalace.testing.postgres)."""
    if request.param == "sqlite":
        yield None
        return
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("inspects SQLite's file directly")
    url, why = postgres.database_url()
    if url is None:
        if postgres.required():
            pytest.fail(f"PostgreSQL is required here but {why}")
        pytest.skip(f"POSTGRESQL HALF SKIPPED: {why}")
    schema = postgres.fresh_schema_name()
    try:
        schema_url = postgres.create_schema_url(url, schema)
        monkeypatch.setenv("MINDPALACE_DATABASE_URL", schema_url)
        yield schema_url
    finally:
        postgres.drop_schema(url, schema)


@pytest.fixture
def memory(workspace_dir: Path, database_url: str | None) -> Iterator[Memory]:
    """A fresh workspace with the deterministic hashing embedder (no model load in unit tests)."""
    mem = Memory.open(workspace_dir, embed={"provider": "hashing"}, database_url=database_url)
    try:
        yield mem
    finally:
        mem.close()


@pytest.fixture
def uid() -> str:
    """A fresh random id for scopes, so tests never see each other's rows."""
    return uuid.uuid4().hex[:12]
