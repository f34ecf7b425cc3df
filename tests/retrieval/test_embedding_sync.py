"""Embedder-change detection and re-embedding: never mixed dimensions, never silently dropped vectors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mindpalace import Memory
from mindpalace.errors import ProviderError
from mindpalace.providers.embed import HashingEmbedder
from mindpalace.retrieval.embedding_sync import sync_embeddings
from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore


class FailingAfter(HashingEmbedder):
    """A hashing embedder whose provider fails after `ok_batches` batches (a flaky endpoint)."""

    def __init__(self, dim: int, ok_batches: int) -> None:
        super().__init__(dim, batch_size=4)
        self.ok_batches = ok_batches

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        if self.ok_batches <= 0:
            raise ProviderError("endpoint down")
        self.ok_batches -= 1
        return super()._embed_batch(texts, query=query)


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    st = SQLiteStore(tmp_path / "memory.db")
    yield st
    st.close()


def fill(store: SQLiteStore, scope: Scope, n: int, prefix: str = "doc") -> list[int]:
    return [store.index_document(scope, "note", f"{prefix}{i}", f"{prefix} {i} hotel budget {i * 7}")
            for i in range(n)]


A, B = Scope("t", "alice", "", ""), Scope("t", "bob", "", "")


class TestSync:
    def test_every_document_in_every_scope_gets_a_vector(self, store: SQLiteStore) -> None:
        fill(store, A, 5)
        fill(store, B, 3)
        emb = HashingEmbedder(64)
        report = sync_embeddings(store, emb, batch=2)
        assert (report.model, report.dim, report.embedded) == ("hashing-64", 64, 8)
        assert store.embedding_models() == {"hashing-64": (64, 8)}
        hits = store.vector_search(B, emb.embed_query("bob hotel"), "hashing-64", k=10)
        assert len(hits) == 3 and all(h.doc.scope == B for h in hits)

    def test_second_run_on_unchanged_store_does_nothing(self, store: SQLiteStore) -> None:
        fill(store, A, 4)
        sync_embeddings(store, HashingEmbedder(64))
        again = sync_embeddings(store, HashingEmbedder(64))
        assert (again.embedded, again.retired_models, again.dropped_vectors) == (0, [], 0)

    def test_changed_text_is_re_embedded(self, store: SQLiteStore) -> None:
        fill(store, A, 3)
        emb = HashingEmbedder(64)
        sync_embeddings(store, emb)
        store.index_document(A, "note", "doc1", "completely new text about trains")
        assert sync_embeddings(store, emb).embedded == 1
        top = store.vector_search(A, emb.embed_query("trains"), emb.model_id, k=1)[0]
        assert top.doc.ref == "doc1"

    def test_progress_reports_reach_the_total(self, store: SQLiteStore) -> None:
        fill(store, A, 7)
        seen: list[tuple[int, int]] = []
        sync_embeddings(store, HashingEmbedder(64), batch=3, progress=lambda d, t: seen.append((d, t)))
        assert seen[0] == (0, 7) and seen[-1] == (7, 7)
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)


class TestEmbedderChange:
    def test_new_model_replaces_old_after_all_documents_have_new_vectors(
        self, store: SQLiteStore
    ) -> None:
        fill(store, A, 6)
        sync_embeddings(store, HashingEmbedder(64))
        new = HashingEmbedder(32)
        report = sync_embeddings(store, new, batch=4)
        assert report.embedded == 6
        assert (report.retired_models, report.dropped_vectors) == (["hashing-64"], 6)
        assert store.embedding_models() == {"hashing-32": (32, 6)}
        hits = store.vector_search(A, new.embed_query("doc 3"), new.model_id, k=6)
        assert len(hits) == 6 and {len(new.embed_query("x"))} == {32}

    def test_failure_halfway_keeps_every_old_vector(self, store: SQLiteStore) -> None:
        fill(store, A, 10)
        old = HashingEmbedder(64)
        sync_embeddings(store, old)
        with pytest.raises(ProviderError, match="endpoint down"):
            sync_embeddings(store, FailingAfter(32, ok_batches=1), batch=4)
        models = store.embedding_models()
        assert models["hashing-64"] == (64, 10)  # old model still complete and searchable
        assert models["hashing-32"] == (32, 4)  # the finished batch is kept, not redone
        assert len(store.vector_search(A, old.embed_query("hotel"), old.model_id, k=20)) == 10
        report = sync_embeddings(store, HashingEmbedder(32))
        assert report.embedded == 6 and report.retired_models == ["hashing-64"]
        assert store.embedding_models() == {"hashing-32": (32, 10)}


class TestFacade:
    def test_open_does_no_embedding_work(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", embed={"provider": "hashing"}) as mem:
            fill(mem.store, mem.scope(user="u"), 3)
        with Memory.open(tmp_path / "ws", embed={"provider": "hashing", "dimensions": 32}) as mem:
            assert "embedder" not in mem.__dict__  # not even constructed
            assert mem.store.embedding_models() == {}
            report = mem.sync_embeddings()
            assert report is not None and report.embedded == 3
            assert mem.store.embedding_models() == {"hashing-32": (32, 3)}

    def test_no_embedder_keeps_existing_vectors(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", embed={"provider": "hashing"}) as mem:
            fill(mem.store, mem.scope(user="u"), 2)
            mem.sync_embeddings()
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
            assert mem.sync_embeddings() is None
            assert mem.store.embedding_models() == {"hashing-256": (256, 2)}


# Re-embeds a store for a new model, announcing each finished batch, and blocks (to be killed)
# once two batches are written.
SYNC_WORKER = r"""
import sys
from pathlib import Path
from mindpalace.providers.embed import HashingEmbedder
from mindpalace.retrieval.embedding_sync import sync_embeddings
from mindpalace.store import SQLiteStore

class Announcing(HashingEmbedder):
    batches = 0
    def _embed_batch(self, texts, *, query):
        if Announcing.batches == 2:  # two batches are stored by now
            print("two batches stored", flush=True)
            sys.stdin.readline()  # killed here
        Announcing.batches += 1
        return super()._embed_batch(texts, query=query)

sync_embeddings(SQLiteStore(Path(sys.argv[1])), Announcing(32, batch_size=3), batch=3)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
class TestKilledSync:
    def test_kill_during_re_embedding_keeps_every_old_vector(self, tmp_path: Path) -> None:
        db = tmp_path / "memory.db"
        st = SQLiteStore(db)
        fill(st, A, 12)
        old = HashingEmbedder(64)
        sync_embeddings(st, old)
        st.close()
        proc = subprocess.Popen([sys.executable, "-c", SYNC_WORKER, str(db)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "two batches stored"
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)

        st = SQLiteStore(db)
        try:
            assert st.embedding_models() == {"hashing-64": (64, 12), "hashing-32": (32, 6)}
            assert len(st.vector_search(A, old.embed_query("hotel"), old.model_id, k=20)) == 12
            report = sync_embeddings(st, HashingEmbedder(32))  # the rerun finishes the job
            assert (report.embedded, report.retired_models) == (6, ["hashing-64"])
            assert st.embedding_models() == {"hashing-32": (32, 12)}
        finally:
            st.close()
