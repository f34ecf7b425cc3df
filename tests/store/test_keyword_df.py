"""keyword_search(max_df_ratio=…): common terms are dropped while a rarer one remains."""

from __future__ import annotations

from pathlib import Path

from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore


def test_common_terms_are_dropped_but_the_rarest_stays(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "kw.db")
    try:
        scope = Scope("t", "u", "a", "s")
        for i in range(20):
            store.index_document(scope, "note", str(i), f"common words everywhere {i}")
        store.index_document(scope, "note", "rare", "common zebra")
        full = store.keyword_search(scope, "common zebra", k=50)
        pruned = store.keyword_search(scope, "common zebra", k=50, max_df_ratio=0.5)
        assert len(full) == 21 and [h.doc.ref for h in pruned] == ["rare"]
        only_common = store.keyword_search(scope, "common everywhere", k=50, max_df_ratio=0.5)
        assert len(only_common) == 20  # nothing rarer: the rarest common term is kept
    finally:
        store.close()
