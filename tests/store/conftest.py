"""Store tests: every backend of mindpalace.testing.conformance.BACKENDS behind one fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.register_assert_rewrite("mindpalace.testing.conformance")

from mindpalace.store.base import Store  # noqa: E402
from mindpalace.testing import postgres  # noqa: E402
from mindpalace.testing.conformance import BACKENDS, drop, make_store  # noqa: E402


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    st = make_store(request.param, tmp_path)
    try:
        yield st
    finally:
        drop(st)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a fresh schema on the PostgreSQL test server (dropped afterwards); skipped
    with a message when there is no server, failed when MINDPALACE_REQUIRE_POSTGRES=1."""
    base, why = postgres.database_url()
    if base is None:
        if postgres.required():
            pytest.fail(f"PostgreSQL is required here but {why}")
        pytest.skip(f"POSTGRESQL HALF SKIPPED: {why}")
    schema = postgres.fresh_schema_name()
    try:
        yield postgres.create_schema_url(base, schema)
    finally:
        postgres.drop_schema(base, schema)
