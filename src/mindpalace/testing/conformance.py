"""Store conformance suite: the behaviour every backend of the store protocol must show.

Plain pytest test classes that take a ``store`` fixture (a fresh, empty backend). A backend's
test module imports the classes and provides the fixture, parametrized over backends, e.g.::

    from mindpalace.testing.conformance import TestEvents, TestRecords  # …

    @pytest.fixture(params=["sqlite"])
    def store(request, tmp_path):
        st = make_store(request.param, tmp_path)
        yield st
        st.close()

Every test uses fresh random scope ids, so backends may share one database between tests.
Concerns covered: transactions, event log, records, key/value, documents (keyword and vector
search, the search generation), locks, scope isolation (I10), bad input, and processes
(optimistic appends and lock exclusion across processes). All are required.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mindpalace.errors import (
    ConcurrencyError,
    DimensionMismatchError,
    InvalidNameError,
    InvalidTextError,
    MindPalaceError,
    NotFoundError,
    StoreError,
    ValidationError,
)
from mindpalace.scope import ANY, Scope
from mindpalace.store.base import NewEvent, Record, Store
from mindpalace.store.blobs import BLOB_MIN_CHARS

StoreFactory = Callable[[Path], Store]


def _sqlite(tmp: Path) -> Store:
    from mindpalace.store.sqlite import SQLiteStore

    return SQLiteStore(tmp / "memory.db")


def _postgres(tmp: Path) -> Store:
    """A store in a fresh schema of the test server (skipped, or failed under
    ``MINDPALACE_REQUIRE_POSTGRES=1``, when there is none: see mindpalace.testing.postgres)."""
    from mindpalace.store.postgres import PostgresStore
    from mindpalace.testing import postgres

    url, why = postgres.database_url()
    if url is None:
        if postgres.required():
            pytest.fail(f"PostgreSQL is required here ({postgres.REQUIRE_VAR}=1) but {why}")
        pytest.skip(f"POSTGRESQL HALF SKIPPED: {why}")
    return PostgresStore(url, schema=postgres.fresh_schema_name())


def drop(store: Store) -> None:
    """Close `store` and remove what a factory made for it (a PostgreSQL test schema)."""
    store.close()
    schema = getattr(store, "schema", None)
    url = getattr(store, "url", None)
    if schema and url:
        from mindpalace.testing.postgres import drop_schema

        drop_schema(url, schema)


BACKENDS: dict[str, StoreFactory] = {"sqlite": _sqlite, "postgres": _postgres}
"""Backend name → factory building a fresh, empty store (under a temporary folder, or in a
fresh schema of the test server)."""


def make_store(backend: str, tmp: Path) -> Store:
    """A fresh store of `backend` (a key of :data:`BACKENDS`) under the folder `tmp`."""
    return BACKENDS[backend](tmp)


def fresh_scope(**fields: str) -> Scope:
    """A concrete scope with a random tenant, so no test sees another test's rows."""
    values = {"tenant": "t-" + uuid.uuid4().hex[:10], "user": "u", "agent": "a", "session": "s"}
    values.update(fields)
    return Scope(**values)


def unit(vec: list[float]) -> np.ndarray:
    v = np.asarray(vec, dtype=np.float32)
    return v / np.linalg.norm(v)


class TestTransactions:
    def test_outer_rollback_discards_every_write(self, store: Store) -> None:
        scope = fresh_scope()
        with pytest.raises(RuntimeError), store.transaction():
            store.append_events(scope, "s", [NewEvent("a")])
            store.kv_put(scope, "ns", "k", 1)
            store.put_record(Record(scope, "step_1", "step", "body"))
            store.index_document(scope, "note", "n1", "rolled back text")
            raise RuntimeError("boom")
        assert store.stream_version(scope, "s") == 0
        assert store.kv_get(scope, "ns", "k") is None
        assert store.get_records(scope, ["step_1"]) == {}
        assert store.keyword_search(scope, "rolled back") == []

    def test_nested_rollback_undoes_only_the_inner_block(self, store: Store) -> None:
        scope = fresh_scope()
        with store.transaction():
            store.append_events(scope, "s", [NewEvent("outer")])
            with pytest.raises(RuntimeError), store.transaction():
                store.append_events(scope, "s", [NewEvent("inner")])
                store.kv_put(scope, "ns", "inner", True)
                raise RuntimeError("inner fails")
            store.kv_put(scope, "ns", "outer", True)
            store.append_events(scope, "s", [NewEvent("after")])
        assert [e.type for e in store.read_events(scope, "s")] == ["outer", "after"]
        assert [e.version for e in store.read_events(scope, "s")] == [1, 2]
        assert store.kv_get(scope, "ns", "inner") is None
        assert store.kv_get(scope, "ns", "outer") is True

    def test_outer_rollback_also_discards_committed_inner_blocks(self, store: Store) -> None:
        scope = fresh_scope()
        with pytest.raises(RuntimeError), store.transaction():
            with store.transaction():
                store.kv_put(scope, "ns", "k", "inner done")
            raise RuntimeError("outer fails")
        assert store.kv_get(scope, "ns", "k") is None

    def test_store_is_usable_after_a_rollback(self, store: Store) -> None:
        scope = fresh_scope()
        with pytest.raises(ValueError), store.transaction():
            raise ValueError("x")
        store.kv_put(scope, "ns", "k", 1)
        assert store.kv_get(scope, "ns", "k") == 1


class TestEvents:
    def test_appended_event_is_returned_as_stored(self, store: Store) -> None:
        scope = fresh_scope()
        (one,) = store.append_events(scope, "s", [NewEvent("t", {"k": "v"})])
        (read,) = store.read_events(scope, "s")
        assert (one.scope, one.stream, one.version, one.type, one.data, one.position) == (
            read.scope, read.stream, read.version, read.type, read.data, read.position)
        assert abs((one.created_at - read.created_at).total_seconds()) < 1e-3

    def test_versions_start_at_one_and_are_contiguous(self, store: Store) -> None:
        scope = fresh_scope()
        first = store.append_events(scope, "s", [NewEvent("a"), NewEvent("b")])
        second = store.append_events(scope, "s", [NewEvent("c", {"n": 3})])
        assert [e.version for e in first + second] == [1, 2, 3]
        positions = [e.position for e in first + second]
        assert positions == sorted(positions) and len(set(positions)) == 3
        assert store.stream_version(scope, "s") == 3
        read = store.read_events(scope, "s")
        assert [(e.version, e.type, e.data) for e in read] == [
            (1, "a", {}), (2, "b", {}), (3, "c", {"n": 3})]
        assert all(e.created_at.tzinfo is not None for e in read)

    def test_stream_head_is_the_last_event(self, store: Store) -> None:
        scope = fresh_scope()
        assert store.stream_head(scope, "s") == (0, None)
        store.append_events(scope, "s", [NewEvent("a"), NewEvent("b")])
        store.append_events(scope, "other", [NewEvent("x")])
        last = store.append_events(scope, "s", [NewEvent("c")])[-1]
        assert store.stream_head(scope, "s") == (3, last.position)
        assert store.stream_head(fresh_scope(), "s") == (0, None)  # scoped
        store.delete_stream(scope, "s")
        assert store.stream_head(scope, "s") == (0, None)
        again = store.append_events(scope, "s", [NewEvent("a")])[-1]
        assert store.stream_head(scope, "s") == (1, again.position)

    @pytest.mark.parametrize("batch", [1, 2])
    @pytest.mark.parametrize("in_transaction", [False, True])
    def test_expected_version_conflict_raises_and_appends_nothing(
        self, store: Store, batch: int, in_transaction: bool
    ) -> None:
        scope = fresh_scope()
        store.append_events(scope, "s", [NewEvent("a")], expected_version=0)
        store.append_events(scope, "s", [NewEvent("b")], expected_version=1)
        late = [NewEvent(f"x{i}") for i in range(batch)]
        with pytest.raises(ConcurrencyError) as info:
            if in_transaction:
                with store.transaction():
                    store.append_events(scope, "s", late, expected_version=1)
            else:
                store.append_events(scope, "s", late, expected_version=1)
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert [e.type for e in store.read_events(scope, "s")] == ["a", "b"]
        stored = store.append_events(scope, "s", late, expected_version=2)
        assert [e.version for e in stored] == list(range(3, 3 + batch))
        assert [e.version for e in store.read_events(scope, "s")] == list(range(1, 3 + batch))

    def test_threads_appending_to_one_stream_get_contiguous_versions(self, store: Store) -> None:
        scope = fresh_scope()
        per_thread, threads = 40, 4

        def writer(tid: int) -> None:
            for i in range(per_thread):
                if i % 2:  # mix the single-event and the batched (transaction) paths
                    store.append_events(scope, "s", [NewEvent("e", {"t": tid, "i": i})])
                else:
                    with store.transaction():
                        store.append_events(scope, "s", [NewEvent("e", {"t": tid, "i": i})])

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(writer, range(threads)))
        events = store.read_events(scope, "s")
        assert [e.version for e in events] == list(range(1, per_thread * threads + 1))
        assert {(e.data["t"], e.data["i"]) for e in events} == {
            (t, i) for t in range(threads) for i in range(per_thread)}

    def test_read_window_and_limit(self, store: Store) -> None:
        scope = fresh_scope()
        store.append_events(scope, "s", [NewEvent(f"e{i}") for i in range(1, 11)])
        window = store.read_events(scope, "s", from_version=3, to_version=6)
        assert [e.version for e in window] == [3, 4, 5, 6]
        assert [e.version for e in store.read_events(scope, "s", from_version=8, limit=2)] == [8, 9]

    def test_streams_are_per_scope(self, store: Store) -> None:
        a, b = fresh_scope(), fresh_scope()
        b = b.with_(tenant=a.tenant, session="other")
        store.append_events(a, "s", [NewEvent("a")])
        store.append_events(b, "s", [NewEvent("b1"), NewEvent("b2")])
        assert store.stream_version(a, "s") == 1 and store.stream_version(b, "s") == 2
        assert [e.type for e in store.read_events(a, "s")] == ["a"]
        widened = a.with_(session=ANY)
        listed = {(sc.session, name, v) for sc, name, v in store.list_streams(widened)}
        assert listed == {("s", "s", 1), ("other", "s", 2)}

    def test_list_streams_by_prefix(self, store: Store) -> None:
        scope = fresh_scope()
        for name in ("task:1", "task:2", "messages"):
            store.append_events(scope, name, [NewEvent("x")])
        assert [n for _, n, _ in store.list_streams(scope, prefix="task:")] == ["task:1", "task:2"]

    def test_empty_append_changes_nothing(self, store: Store) -> None:
        scope = fresh_scope()
        assert store.append_events(scope, "s", []) == []
        assert store.stream_version(scope, "s") == 0

    def test_write_needs_a_concrete_scope(self, store: Store) -> None:
        with pytest.raises(ValidationError):
            store.append_events(fresh_scope(session=ANY), "s", [NewEvent("a")])  # type: ignore[arg-type]


class TestRecords:
    @pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", ".hidden", "", "x" * 129, "has space"])
    def test_bad_names_are_rejected(self, store: Store, name: str) -> None:
        scope = fresh_scope()
        with pytest.raises(InvalidNameError):
            store.put_record(Record(scope, name, "step", "body"))
        assert store.list_records(scope) == []

    def test_128_character_names_are_fine(self, store: Store) -> None:
        scope = fresh_scope()
        store.put_record(Record(scope, "x" * 128, "info", "body"))
        assert store.get_record(scope, "x" * 128).body == "body"

    def test_round_trip_keeps_every_field(self, store: Store) -> None:
        scope = fresh_scope()
        when = datetime(2025, 5, 20, 9, 30, tzinfo=UTC)
        store.put_record(Record(scope, "step_7", "step", "did X", "desc", 7, when, {"k": [1, "二"]}))
        got = store.get_record(scope, "step_7")
        assert (got.scope, got.name, got.type, got.body, got.description, got.step_id) == (
            scope, "step_7", "step", "did X", "desc", 7)
        assert got.created_at == when and got.meta == {"k": [1, "二"]}

    def test_existing_name_needs_overwrite(self, store: Store) -> None:
        scope = fresh_scope()
        store.put_record(Record(scope, "step_1", "step", "first version"))
        with pytest.raises(ValidationError, match="already exists"):
            store.put_record(Record(scope, "step_1", "step", "second version"))
        assert store.get_record(scope, "step_1").body == "first version"
        store.put_record(Record(scope, "step_1", "step", "second version"), overwrite=True)
        assert store.get_record(scope, "step_1").body == "second version"
        assert len(store.list_records(scope)) == 1

    def test_overwrite_reindexes_the_body(self, store: Store) -> None:
        scope = fresh_scope()
        store.put_record(Record(scope, "r", "info", "zebra crossing"))
        store.put_record(Record(scope, "r", "info", "giraffe neck"), overwrite=True)
        assert store.keyword_search(scope, "zebra") == []
        assert [h.doc.ref for h in store.keyword_search(scope, "giraffe")] == ["r"]

    def test_overwrite_with_another_type_or_unindexed_leaves_no_stale_document(
        self, store: Store
    ) -> None:
        scope = fresh_scope()
        store.put_record(Record(scope, "r", "step", "zebra crossing"))
        store.put_record(Record(scope, "r", "info", "giraffe neck"), overwrite=True)
        assert store.keyword_search(scope, "zebra") == []
        assert [(h.doc.kind, h.doc.ref) for h in store.keyword_search(scope, "giraffe")] == [("info", "r")]
        store.put_record(Record(scope, "r", "info", "okapi stripes"), overwrite=True, index=False)
        assert store.keyword_search(scope, "giraffe") == []
        assert store.get_record(scope, "r").body == "okapi stripes"

    def test_listing_is_newest_first_and_filters_by_type(self, store: Store) -> None:
        scope = fresh_scope()
        for i in range(1, 5):
            store.put_record(Record(scope, f"step_{i}", "step", f"s{i}"))
        store.put_record(Record(scope, "snap_1", "snapshot", "raw"))
        assert [r.name for r in store.list_records(scope)] == [
            "snap_1", "step_4", "step_3", "step_2", "step_1"]
        assert [r.name for r in store.list_records(scope, type="step", limit=2)] == ["step_4", "step_3"]

    def test_missing_names_are_absent_and_get_record_raises(self, store: Store) -> None:
        scope = fresh_scope()
        store.put_record(Record(scope, "a", "info", "x"))
        assert set(store.get_records(scope, ["a", "b"])) == {"a"}
        with pytest.raises(NotFoundError, match="'b'"):
            store.get_record(scope, "b")

    def test_deleted_records_and_their_search_documents_are_gone(self, store: Store) -> None:
        scope = fresh_scope()
        other = scope.with_(session="other")
        for sc in (scope, other):
            store.put_record(Record(sc, "step_1", "step", "booked the zebra hotel"))
        store.put_record(Record(scope, "snap_1", "snapshot", "zebra snapshot"))
        assert store.delete_records(scope, ["step_1", "snap_1", "missing"]) == 2
        assert store.get_records(scope, ["step_1", "snap_1"]) == {}
        assert store.keyword_search(scope, "zebra") == []
        assert set(store.get_records(other, ["step_1"])) == {"step_1"}  # scoped (I10)
        assert store.delete_records(scope, []) == 0

    def test_records_are_scoped(self, store: Store) -> None:
        a = fresh_scope(user="alice")
        b = a.with_(user="bob")
        store.put_record(Record(a, "secret", "info", "alice only"))
        assert store.get_records(b, ["secret"]) == {}
        assert store.list_records(b) == []
        assert store.keyword_search(b, "alice") == []


class TestKeyValue:
    def test_put_get_overwrite_delete(self, store: Store) -> None:
        scope = fresh_scope()
        assert store.kv_get(scope, "ns", "k", default="dflt") == "dflt"
        store.kv_put(scope, "ns", "k", {"a": [1, 2.5, None, True, "字"]})
        assert store.kv_get(scope, "ns", "k") == {"a": [1, 2.5, None, True, "字"]}
        store.kv_put(scope, "ns", "k", 7)
        assert store.kv_get(scope, "ns", "k") == 7
        assert store.kv_delete(scope, "ns", "k") is True
        assert store.kv_delete(scope, "ns", "k") is False
        assert store.kv_get(scope, "ns", "k") is None

    def test_list_by_prefix_in_key_order(self, store: Store) -> None:
        scope = fresh_scope()
        for key in ("fact:b", "fact:a", "other", "fact:c"):
            store.kv_put(scope, "facts", key, key.upper())
        store.kv_put(scope, "elsewhere", "fact:z", 0)
        listed = store.kv_list(scope, "facts", prefix="fact:")
        assert [(k, v) for _, k, v in listed] == [("fact:a", "FACT:A"), ("fact:b", "FACT:B"),
                                                  ("fact:c", "FACT:C")]

    def test_widened_list_sees_every_session_of_the_user_only(self, store: Store) -> None:
        s1 = fresh_scope(user="alice", session="s1")
        s2, other = s1.with_(session="s2"), s1.with_(user="bob")
        for scope in (s1, s2, other):
            store.kv_put(scope, "facts", "k", str(scope.session) + str(scope.user))
        widened = store.kv_list(s1.with_(session=ANY), "facts")
        assert sorted(v for _, _, v in widened) == ["s1alice", "s2alice"]

    def test_non_json_values_are_refused(self, store: Store) -> None:
        scope = fresh_scope()
        for bad in (float("nan"), {1, 2}, object()):
            with pytest.raises(ValidationError):
                store.kv_put(scope, "ns", "k", bad)
        assert store.kv_get(scope, "ns", "k") is None


class TestKeywordSearch:
    def test_english_stemming_matches_inflections(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "note", "n1", "The travellers were booking two hotels")
        store.index_document(scope, "note", "n2", "Unrelated text about gardening")
        hits = store.keyword_search(scope, "booked hotel")
        assert [h.doc.ref for h in hits] == ["n1"] and hits[0].matched == "bm25"

    def test_chinese_query_matches_chinese_text(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "note", "zh", "用户说每晚酒店预算不超过两千元")
        store.index_document(scope, "note", "en", "hotel budget is 2000 CNY")
        assert [h.doc.ref for h in store.keyword_search(scope, "酒店预算")] == ["zh"]
        assert [h.doc.ref for h in store.keyword_search(scope, "预算是多少")] == ["zh"]

    def test_single_ideograph_query_matches(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "note", "end", "我的猫")  # 猫 ends the run: in no bigram start
        store.index_document(scope, "note", "twice", "猫咪和猫")
        store.index_document(scope, "note", "none", "我的狗")
        hits = store.keyword_search(scope, "猫")
        assert [h.doc.ref for h in hits] == ["twice", "end"]
        assert hits[0].score > hits[1].score and hits[0].matched == "substring"
        assert store.keyword_search(scope, "猫", kinds=["other"]) == []

    def test_best_match_ranks_first_with_higher_score(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "note", "weak", "budget mentioned once among many other words here")
        store.index_document(scope, "note", "strong", "budget budget hotel budget")
        hits = store.keyword_search(scope, "hotel budget")
        assert [h.doc.ref for h in hits] == ["strong", "weak"]
        assert hits[0].score > hits[1].score and [h.rank for h in hits] == [1, 2]

    def test_identifier_substrings_fall_back_to_trigrams(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "note", "n1", "booking ref XQ7Z9K2 confirmed")
        hits = store.keyword_search(scope, "Q7Z9")
        assert [(h.doc.ref, h.matched) for h in hits] == [("n1", "trigram")]

    def test_user_text_is_never_fts_syntax(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "note", "n1", "budget NEAR the hotel")
        for query in ('budget" OR *', "NEAR(budget hotel)", "-hotel", "AND", '"', "(*)", "col:x"):
            store.keyword_search(scope, query)  # must not raise
        assert store.keyword_search(scope, "") == []

    def test_kinds_filter(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "fact", "f", "hotel budget")
        store.index_document(scope, "step", "s", "hotel budget")
        assert [h.doc.kind for h in store.keyword_search(scope, "hotel", kinds=["fact"])] == ["fact"]

    def test_user_a_never_sees_user_b(self, store: Store) -> None:
        a = fresh_scope(user="alice")
        b = a.with_(user="bob")
        store.index_document(a, "note", "a1", "alice private hotel budget 预算 XQ7Z9K2")
        store.index_document(b, "note", "b1", "bob private hotel budget 预算 XQ7Z9K3")
        for query in ("hotel budget", "预算", "XQ7Z9", "private", "预"):
            for scope, own in ((a, "a1"), (b, "b1")):
                refs = {h.doc.ref for h in store.keyword_search(scope, query)}
                assert refs == {own}, query
                widened = scope.with_(agent=ANY, session=ANY)
                assert {h.doc.ref for h in store.keyword_search(widened, query)} == {own}

    def test_deleted_documents_are_not_found(self, store: Store) -> None:
        scope = fresh_scope()
        store.index_document(scope, "note", "n1", "ephemeral zebra")
        assert store.delete_documents(scope, "note", ["n1", "missing"]) == 1
        assert store.keyword_search(scope, "zebra") == []
        assert store.keyword_search(scope, "ebra") == []  # the trigram index too

    def test_many_queries_answer_as_each_alone(self, store: Store) -> None:
        scope = fresh_scope(user="carol")
        other = scope.with_(user="dave")
        texts = ["hotel budget hotel", "the hotel was booked", "budget talk", "booking ref XQ7Z9K2",
                 "我的猫", "trip notes", "hotel hotel hotel notes"]
        for i, text in enumerate(texts):
            store.index_document(scope, "note" if i % 2 else "fact", f"n{i}", text)
        store.index_document(other, "note", "o1", "hotel budget")
        store.delete_documents(scope, "note", ["n5"])
        # word hits, a repeated query, trigram and substring fallbacks, nothing, no term at all
        queries = ["hotel", "budget hotel", "hotel", "Q7Z9", "猫", "zebra", "", "the"]
        for kinds in (None, ["note"]):
            for k in (1, 2, 10):
                alone = [store.keyword_search(scope, q, k=k, kinds=kinds) for q in queries]
                assert store.keyword_search_many(scope, queries, k=k, kinds=kinds) == alone
        assert store.keyword_search_many(scope, []) == []
        with pytest.raises(InvalidTextError):
            store.keyword_search_many(scope, ["hotel", "bad\x00"])


class TestVectors:
    def _docs(self, store: Store, scope: Scope, n: int) -> list[int]:
        return [store.index_document(scope, "note", f"d{i}", f"doc {i}") for i in range(n)]

    def test_nearest_first_by_cosine(self, store: Store) -> None:
        scope = fresh_scope()
        ids = self._docs(store, scope, 3)
        store.put_embeddings(ids, np.stack([unit([1, 0, 0]), unit([1, 1, 0]), unit([0, 0, 1])]), "m")
        hits = store.vector_search(scope, unit([1, 0.1, 0]), "m", k=2)
        assert [h.doc.ref for h in hits] == ["d0", "d1"]
        assert hits[0].score == pytest.approx(float(unit([1, 0.1, 0]) @ unit([1, 0, 0])), rel=1e-5)
        assert hits[0].matched == "vector" and [h.rank for h in hits] == [1, 2]

    def test_dimension_mismatch_on_write_and_search(self, store: Store) -> None:
        scope = fresh_scope()
        ids = self._docs(store, scope, 2)
        store.put_embeddings(ids[:1], np.ones((1, 4), np.float32), "m4")
        with pytest.raises(DimensionMismatchError, match="dimension 3, expected 4"):
            store.put_embeddings(ids[1:], np.ones((1, 3), np.float32), "m4")
        with pytest.raises(DimensionMismatchError):
            store.put_embeddings(ids, np.ones((1, 4), np.float32), "m4")  # 2 ids, 1 row
        with pytest.raises(DimensionMismatchError):
            store.vector_search(scope, np.ones(5, np.float32), "m4")
        with pytest.raises(ValidationError):
            store.vector_search(scope, np.array([1, np.nan, 0, 0], np.float32), "m4")
        assert store.embedding_models()["m4"] == (4, 1)

    def test_non_finite_vectors_are_refused(self, store: Store) -> None:
        scope = fresh_scope()
        ids = self._docs(store, scope, 1)
        with pytest.raises(ValidationError):
            store.put_embeddings(ids, np.array([[1.0, np.nan]], np.float32), "m")
        assert "m" not in store.embedding_models()

    def test_vectors_for_unknown_documents_are_refused(self, store: Store) -> None:
        scope = fresh_scope()
        ids = self._docs(store, scope, 1)
        with pytest.raises(MindPalaceError):
            store.put_embeddings([ids[0], 987_654_321], np.ones((2, 3), np.float32), "m")
        assert "m" not in store.embedding_models()  # the valid row was not half-written

    def test_results_follow_writes_without_a_stale_cache(self, store: Store) -> None:
        scope = fresh_scope()
        ids = self._docs(store, scope, 2)
        store.put_embeddings(ids, np.stack([unit([1, 0]), unit([0, 1])]), "m")
        q = unit([1, 0.2])
        assert [h.doc.ref for h in store.vector_search(scope, q, "m")] == ["d0", "d1"]
        new = store.index_document(scope, "note", "d2", "doc 2")
        store.put_embeddings([new], unit([1, 0.2])[None, :], "m")
        assert store.vector_search(scope, q, "m")[0].doc.ref == "d2"
        store.delete_documents(scope, "note", ["d2"])
        assert [h.doc.ref for h in store.vector_search(scope, q, "m")] == ["d0", "d1"]
        store.index_document(scope, "note", "d0", "changed text")  # its vector described the old text
        assert [h.doc.ref for h in store.vector_search(scope, q, "m")] == ["d1"]
        assert [d.ref for d in store.documents_missing_embeddings("m")] == ["d0"]

    def test_user_a_never_sees_user_b(self, store: Store) -> None:
        a = fresh_scope(user="alice")
        b = a.with_(user="bob")
        ia = store.index_document(a, "note", "a1", "alice")
        ib = store.index_document(b, "note", "b1", "bob")
        store.put_embeddings([ia, ib], np.stack([unit([1, 0]), unit([1, 0.01])]), "m")
        for scope, own in ((a, "a1"), (b, "b1")):
            for s in (scope, scope.with_(agent=ANY, session=ANY)):
                assert [h.doc.ref for h in store.vector_search(s, unit([1, 0]), "m", k=10)] == [own]

    def test_get_embeddings_unit_vectors_and_chunk_means(self, store: Store) -> None:
        scope = fresh_scope()
        one, chunked, none = self._docs(store, scope, 3)
        store.put_embeddings([one, chunked], np.array([[3, 4], [1, 0], [0, 1]], np.float32), "m",
                             rows=[1, 2])
        got = store.get_embeddings([one, chunked, none], "m")
        assert set(got) == {one, chunked}
        np.testing.assert_allclose(got[one], [0.6, 0.8], rtol=1e-5)
        np.testing.assert_allclose(got[chunked], unit([1, 1]), rtol=1e-5)
        assert got[one].dtype == np.float32
        hits = store.vector_search(scope, unit([0, 1]), "m", k=5)  # a chunked document once
        assert [h.doc.id for h in hits] == [chunked, one]
        assert hits[0].score == pytest.approx(1.0, rel=1e-5)
        assert store.embedding_models()["m"] == (2, 2)
        with pytest.raises(ValidationError):
            store.put_embeddings([one], np.ones((1, 2), np.float32), "m", rows=[0])

    def test_model_bookkeeping_and_retirement(self, store: Store) -> None:
        scope = fresh_scope()
        ids = self._docs(store, scope, 3)
        store.put_embeddings(ids, np.ones((3, 2), np.float32), "old")
        store.put_embeddings(ids[:1], np.ones((1, 5), np.float32), "new")
        assert store.embedding_models() == {"old": (2, 3), "new": (5, 1)}
        assert [d.id for d in store.documents_missing_embeddings("new")] == ids[1:]
        assert store.delete_embeddings(keep_model="new") == 3
        assert store.embedding_models() == {"new": (5, 1)}
        assert store.vector_search(scope, np.ones(2, np.float32), "old") == []


class TestBadInput:
    @pytest.mark.parametrize("bad", ["lone \ud83d surrogate", "nul \x00 byte"])
    def test_bad_text_is_refused_with_nothing_written(self, store: Store, bad: str) -> None:
        scope = fresh_scope()
        with pytest.raises(InvalidTextError):
            store.put_record(Record(scope, "r", "info", bad))
        with pytest.raises(InvalidTextError):
            store.put_record(Record(scope, "r2", "info", "ok body", description=bad))
        with pytest.raises(InvalidTextError):
            store.index_document(scope, "note", "n", bad)
        with pytest.raises(InvalidTextError):
            store.append_events(scope, "s", [NewEvent("ok"), NewEvent(bad)])
        with pytest.raises(InvalidTextError):
            store.append_events(scope, bad, [NewEvent("ok")])
        with pytest.raises(InvalidTextError):
            store.keyword_search(scope, bad)
        assert store.list_records(scope) == []
        assert store.stream_version(scope, "s") == 0
        assert store.keyword_search(scope, "body") == []

    def test_unserialisable_event_data_appends_nothing(self, store: Store) -> None:
        scope = fresh_scope()
        with pytest.raises(ValidationError):
            store.append_events(scope, "s", [NewEvent("a", {"ok": 1}), NewEvent("b", {"x": {1, 2}})])
        assert store.stream_version(scope, "s") == 0

    def test_json_with_lone_surrogates_round_trips(self, store: Store) -> None:
        scope = fresh_scope()
        value = {"key \udc80": ["lone \ud800", "pair 😀", "nul \x00", {"中": "\udfff"}]}
        store.kv_put(scope, "ns", "k", value)
        assert store.kv_get(scope, "ns", "k") == value
        store.append_events(scope, "s", [NewEvent("t", value)])
        assert store.read_events(scope, "s")[0].data == value
        store.put_record(Record(scope, "r", "info", "body", meta=value))
        assert store.get_record(scope, "r").meta == value
        store.index_document(scope, "note", "n", "text", meta=value)
        assert store.keyword_search(scope, "text")[0].doc.meta == value

    def test_store_errors_are_mindpalace_errors(self, store: Store) -> None:
        assert issubclass(ConcurrencyError, StoreError) and issubclass(StoreError, MindPalaceError)


# -- documents, generation, locks, processes --------------------------------------------------
def reopen_args(store: Store) -> tuple[str, ...]:
    """Picklable arguments from which another process opens the same store (see
    :func:`reopen`)."""
    schema = getattr(store, "schema", None)
    url = getattr(store, "url", None)
    if url is not None:
        return ("postgres", str(url), str(schema or ""))
    return ("sqlite", str(store.path))  # type: ignore[attr-defined]


def reopen(args: tuple[str, ...]) -> Store:
    """The store `args` (from :func:`reopen_args`) names, opened in this process."""
    if args[0] == "postgres":
        from mindpalace.store.postgres import PostgresStore

        return PostgresStore(args[1], schema=args[2] or None)
    from mindpalace.store.sqlite import SQLiteStore

    return SQLiteStore(args[1])


def _hold_lock(args: tuple[str, ...], scope: Scope, name: str, conn: Any) -> None:
    """Child process: take the lock, say so through the pipe, hold it until told to stop."""
    st = reopen(args)
    try:
        with st.lock(scope, name, timeout_seconds=30):
            conn.send("held")
            conn.recv()  # "release" — or EOF when the parent kills us
    finally:
        st.close()


def _append_with_retries(args: tuple[str, ...], scope: Scope, n: int, tag: int) -> int:
    """Child process: append `n` events with optimistic concurrency; returns conflicts seen."""
    st = reopen(args)
    conflicts = 0
    try:
        for i in range(n):
            while True:
                seen = st.stream_version(scope, "shared")
                try:
                    st.append_events(scope, "shared", [NewEvent("e", {"p": tag, "i": i})],
                                     expected_version=seen)
                    break
                except ConcurrencyError:
                    conflicts += 1
    finally:
        st.close()
    return conflicts


def _spawn() -> Any:
    import multiprocessing

    return multiprocessing.get_context("spawn")


class TestDocuments:
    def test_by_ref_is_scoped_and_absent_refs_are_missing(self, store: Store) -> None:
        scope = fresh_scope()
        other = scope.with_(session="other")
        ids = {ref: store.index_document(scope, "note", ref, f"text {ref}") for ref in ("a", "b")}
        store.index_document(other, "note", "a", "other session")
        store.index_document(scope, "fact", "a", "another kind")
        found = store.get_documents_by_ref(scope, "note", ["a", "b", "missing"])
        assert {r: d.id for r, d in found.items()} == ids
        assert found["a"].text == "text a" and found["a"].scope == scope
        assert store.get_documents_by_ref(scope, "note", []) == {}
        with pytest.raises(ValidationError):
            store.get_documents_by_ref(scope.with_(session=ANY), "note", ["a"])

    def test_by_refs_reads_several_scopes_at_once_and_keeps_each_scope(self, store: Store) -> None:
        scope = fresh_scope()
        other = scope.with_(session="other")
        a = store.index_document(scope, "note", "1", "first")
        b = store.index_document(other, "note", "1", "first elsewhere")
        c = store.index_document(other, "note", "2", "second")
        store.index_document(scope, "fact", "2", "another kind")
        stranger = fresh_scope()  # another tenant: same refs, never returned for ours
        store.index_document(stranger, "note", "2", "not yours")
        keys = [(scope, "1"), (scope, "2"), (other, "1"), (other, "2"), (other, "9")]
        found = store.get_documents_by_refs("note", keys)
        assert {key: d.id for key, d in found.items()} == {
            (scope, "1"): a, (other, "1"): b, (other, "2"): c}
        assert found[(other, "1")].text == "first elsewhere" and found[(other, "1")].scope == other
        # the same answer as asking each scope on its own
        for (s, ref), doc in found.items():
            assert store.get_documents_by_ref(s, "note", [ref])[ref] == doc
        assert store.get_documents_by_refs("note", []) == {}
        with pytest.raises(ValidationError):
            store.get_documents_by_refs("note", [(scope.with_(session=ANY), "1")])

    def test_has_documents_per_scope_and_kind(self, store: Store) -> None:
        scope = fresh_scope(user="alice")
        assert not store.has_documents(scope)
        store.index_document(scope, "note", "n", "text")
        assert store.has_documents(scope) and store.has_documents(scope.with_(session=ANY))
        assert store.has_documents(scope, kinds=["note", "fact"])
        assert not store.has_documents(scope, kinds=["fact"])
        assert not store.has_documents(scope.with_(session="s2"))
        assert not store.has_documents(scope.with_(user="bob", session=ANY))
        store.delete_documents(scope, "note", ["n"])
        assert not store.has_documents(scope)

    def test_replacing_text_keeps_the_id_and_meta_follows(self, store: Store) -> None:
        scope = fresh_scope()
        first = store.index_document(scope, "note", "n", "old text", {"v": 1})
        again = store.index_document(scope, "note", "n", "new text", {"v": 2})
        assert first == again
        doc = store.get_documents_by_ref(scope, "note", ["n"])["n"]
        assert (doc.text, doc.meta) == ("new text", {"v": 2})

    def test_iter_documents_by_id_kinds_and_widened_scope(self, store: Store) -> None:
        scope = fresh_scope(user="alice")
        other_session = scope.with_(session="s2")
        bob = scope.with_(user="bob")
        a = store.index_document(scope, "note", "a", "x")
        b = store.index_document(other_session, "fact", "b", "y")
        store.index_document(bob, "note", "c", "z")
        assert [d.id for d in store.iter_documents(scope)] == [a]
        widened = scope.with_(session=ANY)
        assert [d.id for d in store.iter_documents(widened)] == [a, b]
        assert [d.id for d in store.iter_documents(widened, kinds=["fact"])] == [b]

    def test_iter_documents_pages_past_a_thousand(self, store: Store) -> None:
        scope = fresh_scope()
        with store.transaction():
            for i in range(1005):
                store.index_document(scope, "note", f"n{i}", f"t{i}")
        ids = [d.id for d in store.iter_documents(scope)]
        assert len(ids) == 1005 and ids == sorted(ids)

    def test_search_generation_moves_on_every_change_and_never_repeats(self, store: Store) -> None:
        scope = fresh_scope()
        seen = [store.search_generation()]

        def moved() -> None:
            now = store.search_generation()
            assert now not in seen
            seen.append(now)

        doc = store.index_document(scope, "note", "n", "one")
        moved()
        store.index_document(scope, "note", "n", "two")
        moved()
        store.index_document(scope, "note", "n", "two", {"edited": True})  # meta only
        moved()
        store.put_embeddings([doc], np.ones((1, 2), np.float32), "m")
        moved()
        store.delete_embeddings()
        moved()
        store.delete_documents(scope, "note", ["n"])
        moved()
        assert store.search_generation() == seen[-1]  # reads leave it alone

    def test_delete_stream_removes_only_that_stream_of_that_scope(self, store: Store) -> None:
        scope = fresh_scope()
        other = scope.with_(session="other")
        store.append_events(scope, "gone", [NewEvent("a"), NewEvent("b")])
        store.append_events(scope, "kept", [NewEvent("c")])
        store.append_events(other, "gone", [NewEvent("d")])
        assert store.delete_stream(scope, "gone") == 2
        assert store.stream_version(scope, "gone") == 0
        assert store.stream_version(scope, "kept") == 1 and store.stream_version(other, "gone") == 1
        assert store.delete_stream(scope, "never") == 0
        with pytest.raises(ValidationError):
            store.delete_stream(scope.with_(session=ANY), "kept")

    @pytest.mark.parametrize("kind", ["one", "several", "long", "blob"])
    def test_a_deleted_streams_positions_are_never_handed_out_again(self, store: Store, kind: str) -> None:
        # the stream holding the store's last positions is deleted, then the same stream is
        # written again: no position repeats (a position names one event for good — the task
        # cache keys its fold by it)
        scope = fresh_scope()
        store.append_events(scope, "early", [NewEvent("a")])
        gone = store.append_events(scope, "gone", [NewEvent("b"), NewEvent("c"), NewEvent("d")])
        store.delete_stream(scope, "gone")
        events = {
            "one": [NewEvent("e")],
            "several": [NewEvent("e"), NewEvent("f")],
            "long": [NewEvent("e", {"i": i}) for i in range(300)],  # past one statement's batch
            "blob": [NewEvent("e", {"output": "x" * (BLOB_MIN_CHARS + 10)})],
        }[kind]
        again = store.append_events(scope, "gone", events)
        assert min(e.position for e in again) > max(e.position for e in gone)
        assert [e.position for e in store.read_events(scope, "gone")] == [e.position for e in again]
        later = store.append_events(scope, "early", [NewEvent("z")])
        assert later[0].position > max(e.position for e in again)

    def test_stats_count_what_was_written(self, store: Store) -> None:
        before = store.stats()
        scope = fresh_scope()
        store.append_events(scope, "s", [NewEvent("a"), NewEvent("b")])
        store.kv_put(scope, "ns", "k", 1)
        store.put_record(Record(scope, "r", "info", "body"))  # indexed: one document
        after = store.stats()
        assert (after.events - before.events, after.streams - before.streams) == (2, 1)
        assert (after.kv_entries - before.kv_entries, after.records - before.records) == (1, 1)
        assert after.documents - before.documents == 1
        assert after.schema_version == store.schema_version and after.size_bytes > 0


class TestScopeIsolation:
    """I10: a widened read never crosses the concrete fields; no tenant sees another's rows."""

    def test_widened_reads_stay_inside_the_tenant_and_user(self, store: Store) -> None:
        mine = fresh_scope(user="alice", session="s1")
        tenant2 = Scope("t2-" + mine.tenant, "alice", "a", "s1")
        bob = mine.with_(user="bob")
        for sc in (mine, tenant2, bob):
            store.append_events(sc, "task:x", [NewEvent("e")])
            store.kv_put(sc, "facts", "k", str(sc))
            store.put_record(Record(sc, "r", "info", f"zebra {sc.user}"))
        widened = mine.with_(agent=ANY, session=ANY)
        assert [s for s, _, _ in store.list_streams(widened)] == [mine]
        assert [s for s, _, _ in store.kv_list(widened, "facts")] == [mine]
        assert [r.scope for r in store.list_records(widened)] == [mine]
        assert set(store.get_records(widened, ["r"])) == {"r"}
        assert [h.doc.scope for h in store.keyword_search(widened, "zebra")] == [mine]
        assert [d.scope for d in store.iter_documents(widened)] == [mine]
        assert store.read_events(widened, "task:x")[0].scope == mine

    def test_writes_need_concrete_scopes_everywhere(self, store: Store) -> None:
        loose = fresh_scope().with_(agent=ANY)
        for write in (
            lambda: store.kv_put(loose, "ns", "k", 1),
            lambda: store.kv_delete(loose, "ns", "k"),
            lambda: store.put_record(Record(loose, "r", "info", "b")),
            lambda: store.delete_records(loose, ["r"]),
            lambda: store.index_document(loose, "note", "n", "t"),
            lambda: store.delete_documents(loose, "note", ["n"]),
            lambda: store.lock(loose, "x", timeout_seconds=0).__enter__(),
        ):
            with pytest.raises(ValidationError):
                write()


class TestLocks:
    def test_reentrant_in_a_thread_exclusive_across_threads(self, store: Store) -> None:
        scope = fresh_scope()
        outcome: list[str] = []

        def other_thread() -> None:
            try:
                with store.lock(scope, "session", timeout_seconds=0):
                    outcome.append("acquired")
            except StoreError as exc:
                outcome.append(type(exc).__name__)

        with (store.lock(scope, "session", timeout_seconds=1),
              store.lock(scope, "session", timeout_seconds=0),  # re-entrant
              ThreadPoolExecutor(1) as pool):
            pool.submit(other_thread).result()
        assert outcome == ["StoreBusyError"]
        with ThreadPoolExecutor(1) as pool:  # released by the outer block, not the inner one
            pool.submit(other_thread).result()
        assert outcome == ["StoreBusyError", "acquired"]

    def test_names_and_scopes_are_independent(self, store: Store) -> None:
        scope = fresh_scope()
        with store.lock(scope, "session", timeout_seconds=1), ThreadPoolExecutor(1) as pool:
            pool.submit(self._take, store, scope, "dream").result()
            pool.submit(self._take, store, scope.with_(session="s2"), "session").result()

    @staticmethod
    def _take(store: Store, scope: Scope, name: str) -> None:
        with store.lock(scope, name, timeout_seconds=0):
            pass

    def test_empty_name_is_refused(self, store: Store) -> None:
        with pytest.raises(ValidationError):
            store.lock(fresh_scope(), "", timeout_seconds=0).__enter__()

    def test_excludes_another_process_and_is_freed_when_the_holder_dies(self, store: Store) -> None:
        scope = fresh_scope()
        ctx = _spawn()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_hold_lock, args=(reopen_args(store), scope, "dream", child))
        proc.start()
        try:
            assert parent.poll(60) and parent.recv() == "held"
            with pytest.raises(StoreError), store.lock(scope, "dream", timeout_seconds=0):
                pass
            proc.kill()  # dies holding the lock
            proc.join(30)
            with store.lock(scope, "dream", timeout_seconds=30):
                pass
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(30)

    def test_released_lock_passes_to_another_process(self, store: Store) -> None:
        scope = fresh_scope()
        ctx = _spawn()
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_hold_lock, args=(reopen_args(store), scope, "session", child))
        proc.start()
        try:
            assert parent.poll(60) and parent.recv() == "held"
            parent.send("release")
            with store.lock(scope, "session", timeout_seconds=30):
                pass
        finally:
            proc.join(30)
        assert proc.exitcode == 0


class TestProcesses:
    def test_optimistic_appenders_in_four_processes_lose_nothing(self, store: Store) -> None:
        scope = fresh_scope()
        from concurrent.futures import ProcessPoolExecutor

        per, procs = 15, 4
        with ProcessPoolExecutor(procs, mp_context=_spawn()) as pool:
            futures = [pool.submit(_append_with_retries, reopen_args(store), scope, per, p)
                       for p in range(procs)]
            [f.result(timeout=240) for f in futures]
        events = store.read_events(scope, "shared")
        assert [e.version for e in events] == list(range(1, per * procs + 1))
        assert sorted((e.data["p"], e.data["i"]) for e in events) == [
            (p, i) for p in range(procs) for i in range(per)]
