"""The SQLite store's document cache (``get_documents``) never serves a changed document.

Documents read by id are kept while no document's text or metadata changed and none was
deleted, by this store object or another one on the same file (another process); documents
and vectors added meanwhile keep them valid.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore
from mindpalace.store.inputs import MAX_DOCUMENT_CHARS

SCOPE = Scope("t", "u", "a", "s")


def _stores(tmp_path: Path) -> tuple[SQLiteStore, SQLiteStore]:
    path = tmp_path / "memory.db"
    return SQLiteStore(path), SQLiteStore(path)


def test_served_again_while_only_documents_are_added(tmp_path: Path) -> None:
    reader, writer = _stores(tmp_path)
    first = reader.index_document(SCOPE, "note", "n1", "hotel budget", {"v": 1})
    before = reader.get_documents([first])[first]
    writer.index_document(SCOPE, "note", "n2", "another note")  # an append by another process
    writer.put_embeddings([first], np.ones((1, 4), dtype=np.float32), "m4")
    assert reader.get_documents([first])[first] is before  # cached, still exact
    assert reader.get_documents([first + 1])[first + 1].text == "another note"


def test_a_metadata_change_by_another_store_is_seen(tmp_path: Path) -> None:
    reader, writer = _stores(tmp_path)
    doc_id = reader.index_document(SCOPE, "note", "n1", "hotel budget", {"v": 1})
    assert reader.get_documents([doc_id])[doc_id].meta == {"v": 1}
    writer.index_document(SCOPE, "note", "n1", "hotel budget", {"v": 2})  # same text, new meta
    assert reader.get_documents([doc_id])[doc_id].meta == {"v": 2}
    reader.index_document(SCOPE, "note", "n1", "hotel budget", {"v": 3})  # and by itself
    assert reader.get_documents([doc_id])[doc_id].meta == {"v": 3}


def test_text_changes_and_deletions_are_seen(tmp_path: Path) -> None:
    reader, writer = _stores(tmp_path)
    doc_id = reader.index_document(SCOPE, "note", "n1", "hotel budget")
    assert reader.get_documents([doc_id])[doc_id].text == "hotel budget"
    writer.index_document(SCOPE, "note", "n1", "train budget")
    assert reader.get_documents([doc_id])[doc_id].text == "train budget"
    writer.delete_documents(SCOPE, "note", ["n1"])
    assert reader.get_documents([doc_id]) == {}


def test_a_rolled_back_change_is_never_served(tmp_path: Path) -> None:
    store, _ = _stores(tmp_path)
    doc_id = store.index_document(SCOPE, "note", "n1", "hotel budget", {"v": 1})
    store.get_documents([doc_id])
    try:
        with store.transaction():
            store.index_document(SCOPE, "note", "n1", "hotel budget", {"v": 2})
            assert store.get_documents([doc_id])[doc_id].meta == {"v": 2}  # its own write
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert store.get_documents([doc_id])[doc_id].meta == {"v": 1}
    store.index_document(SCOPE, "note", "n1", "hotel budget", {"v": 3})
    assert store.get_documents([doc_id])[doc_id].meta == {"v": 3}


def test_own_deletions_keep_the_append_only_generation(tmp_path: Path) -> None:
    store, other = _stores(tmp_path)
    store.index_document(SCOPE, "note", "n1", "hotel budget")
    store.index_document(SCOPE, "note", "n2", "train budget")
    before = store.append_only_generation()
    store.delete_documents(SCOPE, "note", ["n1"])  # a superseded fact: no vector lost
    store.index_document(SCOPE, "note", "n3", "new note")
    assert store.append_only_generation() == before
    store.index_document(SCOPE, "note", "n2", "changed text")  # its vector is dropped
    changed = store.append_only_generation()
    assert changed != before
    other.delete_documents(SCOPE, "note", ["n3"])  # another process: cannot be told apart
    assert store.append_only_generation() != changed


def test_deleting_a_long_document_deletes_its_parts_only(tmp_path: Path) -> None:
    store, _ = _stores(tmp_path)
    long_text = "word " * (MAX_DOCUMENT_CHARS // 2)  # cut into 3 parts
    store.index_document(SCOPE, "note", "n1", long_text)
    store.index_document(SCOPE, "note", "n10", long_text)  # "n1" is a prefix of its ref
    store.index_document(SCOPE, "note", "n1x", "short")
    refs = lambda: sorted(d.ref for d in store.iter_documents(SCOPE))  # noqa: E731
    assert len(refs()) == 7
    assert store.delete_documents(SCOPE, "note", ["n1"]) == 1
    assert refs() == ["n10", "n10#part2", "n10#part3", "n1x"]
