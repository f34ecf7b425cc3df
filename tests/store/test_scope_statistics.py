"""BM25 statistics (N, document frequency, average length) are the searched scope's own: another
tenant's or user's documents never change a score, on the cached and on the SQL path."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore

WORDS = ["hotel", "budget", "paris", "trip", "dinner", "zebra", "booking", "london", "cafe"]
MINE = Scope("tenant-a", "u", "ag", "s")
OTHER_TENANT = Scope("tenant-b", "u", "ag", "s")
OTHER_USER = Scope("tenant-a", "v", "ag", "s")

texts = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30).map(" ".join),
                 min_size=1, max_size=25)


def _scores(store: SQLiteStore, query: str) -> list[tuple[str, float]]:
    return [(h.doc.ref, h.score) for h in store.keyword_search(MINE, query, k=50)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mine=texts, others=texts, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_other_scopes_do_not_change_scores(
    tmp_path_factory: object, mine: list[str], others: list[str], query: list[str]
) -> None:
    path = tmp_path_factory.mktemp("stats") / "s.db"  # type: ignore[attr-defined]
    store = SQLiteStore(path)
    sql_only = SQLiteStore(path, in_process_bm25=False)
    try:
        for i, text in enumerate(mine):
            store.index_document(MINE, "message", str(i), text)
        q = " ".join(query)
        before = _scores(store, q)
        assert _scores(store, q) == before  # second query: from the rebuilt cache
        for i, text in enumerate(others):
            store.index_document(OTHER_TENANT, "message", str(i), text * 3)
            store.index_document(OTHER_USER, "message", str(i), text)
        assert _scores(sql_only, q) == before  # SQL path, scope statistics
        assert _scores(store, q) == before  # stale cache: SQL path
        assert _scores(store, q) == before  # rebuilt cache
        assert store.bm25_cache_generation == store.search_generation()
    finally:
        store.close()
        sql_only.close()


def test_a_long_document_is_normalised_against_its_own_scope(tmp_path: Path) -> None:
    """The same long reply and short statement rank the same way whether or not another
    tenant holds many short documents (which would shrink a workspace-wide average length)."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        store.index_document(MINE, "message", "1", "my hotel in paris is the ritz")
        store.index_document(MINE, "message", "2", "hotel " + "words about many other things " * 40)
        alone = _scores(store, "hotel paris")
        for i in range(300):
            store.index_document(OTHER_TENANT, "message", str(i), "hotel")
        assert _scores(store, "hotel paris") == alone
        assert alone[0][0] == "1"
    finally:
        store.close()
