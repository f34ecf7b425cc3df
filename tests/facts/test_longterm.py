"""Long-term store: de-duplicate, supersede, tombstone (never resurrects), embeddings on write."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.facts.longterm import KIND, NAMESPACE, LongTermStore
from mindpalace.facts.model import Fact
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings


def lts(memory: Memory, uid: str, **kw: object) -> LongTermStore:
    return LongTermStore(memory.store, Scope("default", uid, "agent", ""), **kw)  # type: ignore[arg-type]


def searchable(store: LongTermStore, query: str) -> list[str]:
    return [h.doc.text for h in store.store.keyword_search(store.scope, query, kinds=[KIND])]


class TestWrite:
    def test_same_key_and_content_is_one_item(self, memory: Memory, uid: str) -> None:
        store = lts(memory, uid)
        a = store.put(Fact("user:city", "Paris", importance=0.6))
        b = store.put(Fact(" User:City ", "Paris ", importance=0.9))
        assert a.id == b.id and b.importance == 0.9
        assert len(store.history("user:city")) == 1
        assert len(memory.store.kv_list(store.scope, NAMESPACE)) == 1

    def test_new_value_supersedes_and_old_stays_in_history(self, memory: Memory, uid: str) -> None:
        store = lts(memory, uid)
        old = store.put(Fact("user:city", "Paris"))
        new = store.put(Fact("user:city", "Lisbon"))
        assert new.id != old.id
        assert store.current("user:city").content == "Lisbon"
        history = store.history("user:city")
        assert [f.content for f in history] == ["Paris", "Lisbon"]
        assert history[0].superseded_by == new.id and not history[0].current
        assert searchable(store, "Paris") == [] and searchable(store, "Lisbon")

    def test_forget_tombstones_and_readd_is_a_new_item(self, memory: Memory, uid: str) -> None:
        store = lts(memory, uid)
        first = store.put(Fact("user:city", "Paris"))
        gone = store.forget("user:city")
        assert gone is not None and gone.deleted_at is not None
        assert store.current("user:city") is None and searchable(store, "Paris") == []
        again = store.put(Fact("user:city", "Paris"))
        assert again.id != first.id
        assert store.get(first.id).deleted_at is not None  # the tombstone stays
        assert store.forget("user:unknown") is None

    def test_writes_embeddings_for_fact_documents(self, memory: Memory, uid: str) -> None:
        store = lts(memory, uid, embedder=memory.embedder)
        store.put_many([Fact("user:city", "Paris"), Fact("user:food", "ramen")])
        model = memory.embedder.model_id
        assert not [d for d in memory.store.documents_missing_embeddings(model) if d.scope == store.scope]
        hits = memory.store.vector_search(store.scope, memory.embedder.embed_query("ramen"), model)
        assert hits[0].doc.text == "user:food: ramen"

    def test_decay_lowers_effective_importance(self, memory: Memory, uid: str) -> None:
        now = datetime(2026, 1, 1, tzinfo=UTC)
        store = lts(memory, uid, settings=FactSettings(decay_half_life_days=7), clock=lambda: now + timedelta(days=14))
        fact = store.put(Fact("user:city", "Paris", importance=0.8, created_at=now))
        assert abs(store.effective_importance(fact) - 0.2) < 1e-9


ACTIONS = st.lists(
    st.tuples(st.sampled_from(["put", "forget"]), st.sampled_from(["a:x", "b:x"]), st.sampled_from(["v1", "v2", "v3"])),
    min_size=1, max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS)
def test_deleted_or_superseded_items_never_resurrect(memory: Memory, actions: list[tuple[str, str, str]]) -> None:
    """Against a reference model over any interleaving of writes and forgets: the current value
    is the last write after the last forget; ids are never reused; a tombstoned or superseded
    version is never current again and never searchable."""
    store = lts(memory, uuid.uuid4().hex)
    model: dict[str, str | None] = {}
    dead: set[str] = set()
    for action, key, value in actions:
        if action == "put":
            fact = store.put(Fact(key, f"{key} {value}"))
            assert fact.id not in dead
            model[key] = value
        else:
            gone = store.forget(key)
            assert (gone is not None) == (model.get(key) is not None)
            if gone is not None:
                dead.add(gone.id)
            model[key] = None
        for f in store.history("a:x") + store.history("b:x"):
            if not f.current:
                dead.add(f.id)
        for k in ("a:x", "b:x"):
            current = store.current(k)
            assert (current.content if current else None) == (f"{k} {model[k]}" if model.get(k) else None)
            assert current is None or current.id not in dead
            ids = [f.id for f in store.history(k)]
            assert len(ids) == len(set(ids))
    indexed = {h.doc.ref for h in memory.store.keyword_search(store.scope, "v1 v2 v3", k=50, kinds=[KIND])}
    assert not indexed & dead
    assert indexed == {store.current(k).id for k in ("a:x", "b:x") if store.current(k)}
