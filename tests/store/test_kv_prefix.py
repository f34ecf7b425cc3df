"""kv_list prefix queries use an index range; the result must equal the plain prefix filter."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore

ALPHABET = st.sampled_from(["a", "b", "#", "z", "\uffff", "\U0010ffff", "\ud7ff", "\ue000", "é"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.sets(st.text(ALPHABET, min_size=1, max_size=4), min_size=1, max_size=12),
       prefix=st.text(ALPHABET, max_size=3))
def test_prefix_listing_equals_startswith(tmp_path: Path, keys: set[str], prefix: str) -> None:
    store = SQLiteStore(tmp_path / "kv.db")
    try:
        scope = Scope("t", "u", "a", str(abs(hash((frozenset(keys), prefix)))))
        for key in keys:
            store.kv_put(scope, "ns", key, 1)
        listed = [k for _, k, _ in store.kv_list(scope, "ns", prefix=prefix)]
        assert sorted(listed) == sorted(k for k in keys if k.startswith(prefix))
    finally:
        store.close()
