"""Store tests: every backend of mindpalace.testing.conformance.BACKENDS behind one fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.register_assert_rewrite("mindpalace.testing.conformance")

from mindpalace.store.base import Store  # noqa: E402
from mindpalace.testing.conformance import BACKENDS, drop, make_store  # noqa: E402


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    st = make_store(request.param, tmp_path)
    try:
        yield st
    finally:
        drop(st)
