"""Embeddings of the SQLite store: vectors as BLOBs, exact (or pluggable) vector search."""

from __future__ import annotations

import logging
import sqlite3
import threading
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from mindpalace.errors import DimensionMismatchError, NotFoundError, StoreError, ValidationError
from mindpalace.scope import Scope
from mindpalace.store.annfile import AnnFiles, GraphState
from mindpalace.store.base import Document, SearchHit
from mindpalace.store.heap import GrowingBuffer, release_free_heap
from mindpalace.store.inputs import embedding_rows
from mindpalace.store.sqlite.connection import SQLiteBase
from mindpalace.store.sqlite.rows import scope_where
from mindpalace.store.vectors import (
    AdaptiveIndex,
    ExactCosineIndex,
    GrowableVectorIndex,
    HnswIndex,
    VectorIndex,
    VectorIndexFactory,
)

_log = logging.getLogger(__name__)

_GROWABLE = (AdaptiveIndex, ExactCosineIndex, HnswIndex)  # GrowableVectorIndex, by class

#: Room for appends kept past the rows an index is built from, as a share of them: an
#: anonymous map's untouched pages, no resident memory until a row is appended (the growth
#: ExactCosineIndex would otherwise make at the first append after every build copies the
#: whole matrix: 25.6 MB at 100k × 64-d, inside the query after a write).
ROOM_SHARE = 0.25

#: At close a graph is saved again when its documents were deleted or at least this many rows
#: were appended since it was saved or loaded (fewer are appended quickly on the next open).
CLOSE_SAVE_MIN_ROWS = 1000


class EmbeddingsMixin(SQLiteBase):
    """The embedding part of the store protocol; a vector index per (scope, model, kinds) is
    cached and kept up to date in place (:meth:`_vector_index`)."""

    _index_factory: VectorIndexFactory
    _vec_cache: dict[tuple[Any, ...], CachedVectors]
    _vec_lock: threading.Lock
    _ann: AnnFiles | None

    def _init_embeddings(
        self, vector_index_factory: VectorIndexFactory, ann: AnnFiles | None = None
    ) -> None:
        """`ann`: persisted HNSW graphs (the default index only): cached indexes are
        :class:`AdaptiveIndex` es whose graphs are saved once built and loaded on open."""
        self._index_factory = vector_index_factory
        self._vec_cache = {}
        self._vec_lock = threading.Lock()
        self._ann = ann

    def close(self) -> None:
        """Save the graphs that changed since they were saved (see ``CLOSE_SAVE_MIN_ROWS``),
        then close the connections. A failed save is logged: the next open rebuilds."""
        if self._ann is not None:
            with self._vec_lock:
                cached = list(self._vec_cache.items())
            for key, entry in cached:
                with entry.lock:
                    self._save_on_close(key, entry)
        super().close()

    def _save_on_close(self, key: tuple[Any, ...], entry: CachedVectors) -> None:
        index = entry.index
        if self._ann is None or not isinstance(index, AdaptiveIndex) or not index.approximate:
            return
        graph = index.inner
        assert isinstance(graph, HnswIndex)
        saved = entry.saved
        if saved is not None and (
            saved.generation == entry.generation
            and entry.after - saved.after < CLOSE_SAVE_MIN_ROWS
        ):
            return
        try:
            self._ann.save(key, entry.model, graph, entry.state())
        except (StoreError, OSError) as exc:  # the next open rebuilds: never fail a close
            _log.warning("HNSW graph not saved at close: %s", exc)

    def put_embeddings(
        self,
        doc_ids: Sequence[int],
        vectors: np.ndarray,
        model: str,
        *,
        rows: Sequence[int] | None = None,
    ) -> None:
        mat, counts = embedding_rows(doc_ids, vectors, model, rows)
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        dim = int(mat.shape[1])
        with self.transaction():
            existing = self._execute(
                "SELECT dim FROM embeddings WHERE model = ? LIMIT 1", (model,)
            ).fetchone()
            if existing is not None and existing[0] != dim:
                raise DimensionMismatchError(existing[0], dim, model)
            if self._replaces_vectors(doc_ids, model):  # rows move: the indexes rebuild
                self._bump_index_generation()
            # Explicit rowids above a stored high-water mark: never reused, so the indexes
            # append exactly the rows above the last one they saw.
            first = int(self._execute(
                "SELECT max(value, (SELECT coalesce(max(rowid), 0) FROM embeddings)) "
                "FROM meta WHERE key = 'embedding_rowid'"
            ).fetchone()[0]) + 1
            self._execute(
                "UPDATE meta SET value = ? WHERE key = 'embedding_rowid'", (first + len(doc_ids) - 1,)
            )
            try:
                self._conn().executemany(
                    "INSERT OR REPLACE INTO embeddings (rowid, doc_id, model, dim, vector) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [
                        (first + j, int(i), model, dim, mat[bounds[j] : bounds[j + 1]].tobytes())
                        for j, i in enumerate(doc_ids)
                    ],
                )
            except sqlite3.IntegrityError as exc:  # a doc id that does not exist (foreign key)
                known = self.get_documents([int(i) for i in doc_ids])
                missing = [int(i) for i in doc_ids if int(i) not in known]
                raise NotFoundError("document", missing[:10]) from exc
            self._bump_generation()

    def _replaces_vectors(self, doc_ids: Sequence[int], model: str) -> bool:
        ids = [int(i) for i in doc_ids]
        for i in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[i : i + 500]
            found = self._execute(
                f"SELECT 1 FROM embeddings WHERE model = ? AND doc_id IN ({','.join('?' * len(chunk))}) "
                "LIMIT 1", [model, *chunk],
            ).fetchone()
            if found is not None:
                return True
        return False

    def vector_search(
        self,
        scope: Scope,
        vector: np.ndarray,
        model: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not np.isfinite(q).all():
            raise ValidationError(f"query vector for model {model!r} contains NaN or infinity")
        cached = self._vector_index(scope, model, kinds)
        with cached.lock:  # an index is updated in place: never searched while it changes
            index, extra = cached.index, cached.extra
            if index.dim and q.shape[0] != index.dim:
                raise DimensionMismatchError(index.dim, int(q.shape[0]), model)
            ids, sims = index.search(q, k + extra)
        if extra:  # chunk rows share their document's id: keep each document's best chunk
            _, first = np.unique(ids, return_index=True)
            keep = np.sort(first)[:k]
            ids, sims = ids[keep], sims[keep]
        id_list = ids.tolist()  # Python ints and floats (float32 widens exactly), no numpy scalars
        docs = self.get_documents(id_list)
        return [
            SearchHit(docs[i], s, rank, "vector")
            for rank, (i, s) in enumerate(zip(id_list, sims.tolist(), strict=True), 1)
            if i in docs
        ]

    def get_embeddings(self, doc_ids: Sequence[int], model: str) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        ids = [int(i) for i in doc_ids]
        for i in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
            chunk = ids[i : i + 500]
            rows = self._execute(
                f"SELECT doc_id, dim, vector FROM embeddings WHERE model = ? "
                f"AND doc_id IN ({','.join('?' * len(chunk))})",
                [model, *chunk],
            )
            for r in rows:
                m = np.frombuffer(r["vector"], dtype=np.float32).reshape(-1, r["dim"])
                v = m.mean(axis=0) if m.shape[0] > 1 else m[0]
                out[int(r["doc_id"])] = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
        return out

    def _vector_index(
        self, scope: Scope, model: str, kinds: Sequence[str] | None
    ) -> CachedVectors:
        """The scope's index and how many chunk rows it holds beyond one per document.

        Kept up to date incrementally (:class:`CachedVectors`): vectors
        above the last embeddings rowid seen are appended, documents this process deleted are
        dropped, anything else (another process's deletion, a text change, a replaced or
        dropped vector) rebuilds it. Inside a write transaction it is built from what the
        transaction sees and not cached."""
        key = (scope.values(), model, tuple(sorted(kinds)) if kinds else None)
        conn = self._conn()
        if conn.in_transaction:
            return self._fresh_vector_index(scope, model, kinds)
        self._retry(lambda: conn.execute("BEGIN"))  # one snapshot for the state and the rows
        try:
            generation, top = self._vector_state()
            with self._vec_lock:
                cached = self._vec_cache.get(key)
            if cached is not None:
                with cached.lock:
                    if cached.current(generation, top) or cached.catch_up(self, generation, top):
                        return cached
            fresh = self._open_vector_index(key, scope, model, kinds, generation, top)
            with self._vec_lock:
                if len(self._vec_cache) > 64:  # bounded: scopes come and go
                    self._vec_cache.clear()
                self._vec_cache[key] = fresh
            return fresh
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _vector_state(self) -> tuple[int, int]:
        """(index generation, highest embeddings rowid) of the current snapshot."""
        row = self._execute(
            "SELECT (SELECT value FROM meta WHERE key = 'index_generation'), "
            "(SELECT coalesce(max(rowid), 0) FROM embeddings)"
        ).fetchone()
        return int(row[0]), int(row[1])

    def _open_vector_index(
        self, key: tuple[Any, ...], scope: Scope, model: str, kinds: Sequence[str] | None,
        generation: int, top: int,
    ) -> CachedVectors:
        """The index of `key` at (`generation`, `top`): the persisted graph when it is valid
        (rows added since appended), else built from the rows (the graph, above the size, in
        the background — and saved once built)."""
        ann = self._ann
        if ann is None:
            fresh = self._fresh_vector_index(scope, model, kinds)
            fresh.generation, fresh.seen, fresh.after = generation, top, top
            return fresh
        loaded = ann.load(key, model, generation=generation, top=top,
                          check=lambda ids: self._stored_unit_vectors(ids, model))
        if loaded is not None:
            graph, state = loaded
            index = AdaptiveIndex.from_graph(
                graph, min_ann_rows=self.settings.ann_min_vectors,
                ef_search=self.settings.hnsw_ef_search, background=True,
                on_built=self._graph_saver(key, model),
            )
            cached = CachedVectors(scope, model, kinds, index, state.extra)
            cached.generation, cached.seen, cached.after = state.generation, state.after, state.after
            cached.saved = state
            with cached.lock:
                if cached.catch_up(self, generation, top):  # appends the rows saved after it
                    return cached
        ids, matrix, docs, room = self._vector_rows_with_room(scope, model, kinds)
        extra = ids.shape[0] - docs
        index = AdaptiveIndex(
            ids, matrix, min_ann_rows=self.settings.ann_min_vectors,
            ef_search=self.settings.hnsw_ef_search, background=True,
            tag=GraphState(generation, top, extra), on_built=self._graph_saver(key, model),
            copy=False,  # the rows were read for it: normalised in place, not copied
            room=room,  # and the first appends go into the read's room (see ROOM_SHARE)
        )
        cached = CachedVectors(scope, model, kinds, index, extra)
        cached.generation, cached.seen, cached.after = generation, top, top
        release_free_heap(int(ids.shape[0]))  # the read's temporaries: back to the OS
        return cached

    def _graph_saver(self, key: tuple[Any, ...], model: str) -> Any:
        """`on_built` of the cached indexes: save a built graph with the state it reflects."""
        ann = self._ann
        assert ann is not None

        def save(graph: HnswIndex, tag: object) -> None:
            if isinstance(tag, GraphState):
                ann.save(key, model, graph, tag)
                with self._vec_lock:
                    entry = self._vec_cache.get(key)
                if entry is not None:
                    entry.saved = tag  # read at close; a plain assignment

        return save

    def _stored_unit_vectors(self, doc_ids: Sequence[int], model: str) -> dict[int, np.ndarray]:
        """Each document's `model` vectors (every chunk row), L2-normalised."""
        out: dict[int, np.ndarray] = {}
        ids = [int(i) for i in doc_ids]
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            for r in self._execute(
                f"SELECT doc_id, dim, vector FROM embeddings WHERE model = ? "
                f"AND doc_id IN ({','.join('?' * len(chunk))})", [model, *chunk],
            ):
                m = np.frombuffer(r["vector"], dtype=np.float32).reshape(-1, r["dim"])
                out[int(r["doc_id"])] = m / np.maximum(
                    np.linalg.norm(m, axis=1, keepdims=True), 1e-12
                )
        return out

    def _fresh_vector_index(
        self, scope: Scope, model: str, kinds: Sequence[str] | None
    ) -> CachedVectors:
        ids, matrix, docs = self._vector_rows(scope, model, kinds, after=0)
        return CachedVectors(scope, model, kinds, self._index_factory(ids, matrix), ids.shape[0] - docs)

    def _vector_rows(
        self, scope: Scope, model: str, kinds: Sequence[str] | None, *, after: int
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """(row ids, matrix, documents) of the scope's `model` vectors with rowid > `after`,
        in rowid order (one row per chunk, each with its document's id)."""
        ids, matrix, docs, _ = self._read_vector_rows(scope, model, kinds, after=after, room=0.0)
        return ids, matrix, docs

    def _vector_rows_with_room(
        self, scope: Scope, model: str, kinds: Sequence[str] | None
    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
        """:meth:`_vector_rows` of every row, and an array whose first rows are the matrix
        (the same memory) followed by room for :data:`ROOM_SHARE` as many rows again (None
        when the read could not keep room): the index built from them appends into it."""
        return self._read_vector_rows(scope, model, kinds, after=0, room=ROOM_SHARE)

    def _read_vector_rows(
        self, scope: Scope, model: str, kinds: Sequence[str] | None, *, after: int, room: float
    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
        where, scope_params = scope_where(scope, "d")
        sql = (
            "SELECT e.doc_id, e.dim, e.vector FROM embeddings e JOIN docs d ON d.id = e.doc_id "
            f"WHERE e.rowid > ? AND e.model = ? AND {where or '1'}"
        )
        params = [after, model, *scope_params]
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        # Streamed into one growing buffer: holding every row (fetchall) and then joining
        # their blobs cost ~3× the matrix in peak memory (~65 MB more at 100k × 64); a
        # memory map, as a bytearray's regrowth copies stayed resident (see GrowingBuffer).
        # Ids and counts in typed arrays: a list of 100k int objects left ~4 MB of freed
        # small-object memory the process kept.
        vectors = GrowingBuffer()
        doc_ids = array("q")
        per_doc = array("q")
        dim = 0
        for doc_id, width, blob in self._execute(sql + " ORDER BY e.rowid", params):
            dim = int(width)
            doc_ids.append(doc_id)
            per_doc.append(len(blob) // (4 * dim))
            vectors.extend(blob)
        if not doc_ids:
            return np.empty(0, np.int64), np.empty((0, 0), np.float32), 0, None
        counts = np.frombuffer(per_doc, np.int64)
        ids = np.repeat(np.frombuffer(doc_ids, np.int64), counts)
        rows = int(counts.sum())
        spare = int(rows * room) * 4 * dim
        full = vectors.array(np.float32, spare=spare)
        matrix = full[: rows * dim].reshape(rows, dim)
        held = full.shape[0] // dim
        grown = full[: held * dim].reshape(held, dim) if spare and held > rows else None
        return ids, matrix, len(doc_ids), grown

    def documents_missing_embeddings(
        self, model: str, *, limit: int = 1000, after_id: int = 0
    ) -> list[Document]:
        rows = self._execute(
            "SELECT d.* FROM docs d WHERE d.id > ? AND NOT EXISTS (SELECT 1 FROM embeddings e "
            "WHERE e.doc_id = d.id AND e.model = ?) "
            # late parts of a huge text are keyword-only (store.inputs.document_parts)
            "AND json_extract(d.meta, '$.keyword_only') IS NULL ORDER BY d.id LIMIT ?",
            (after_id, model, limit),
        )
        return [self._doc(r) for r in rows]

    def embedding_models(self) -> dict[str, tuple[int, int]]:
        rows = self._execute(
            "SELECT model, max(dim) AS dim, count(*) AS n FROM embeddings GROUP BY model"
        )
        return {r["model"]: (int(r["dim"]), int(r["n"])) for r in rows}

    def delete_embeddings(self, *, keep_model: str | None = None) -> int:
        with self.transaction():
            if keep_model is None:
                cur = self._execute("DELETE FROM embeddings")
            else:
                cur = self._execute("DELETE FROM embeddings WHERE model != ?", (keep_model,))
            self._bump_generation()
            if cur.rowcount:
                self._bump_index_generation()
            return cur.rowcount


class CachedVectors:
    """One scope's vector index and the database state it reflects."""

    def __init__(
        self, scope: Scope, model: str, kinds: Sequence[str] | None, index: VectorIndex, extra: int
    ) -> None:
        self.scope, self.model, self.kinds = scope, model, kinds
        self.index = index
        self.extra = extra  # chunk rows beyond one per document (search widens by it)
        self.generation = 0
        self.seen = 0  # highest embeddings rowid when last brought up to date
        self.after = 0  # rows above this are not in the index yet (rowids never repeat)
        self.saved: GraphState | None = None  # the state of the persisted graph, if any
        self.lock = threading.Lock()

    def state(self) -> GraphState:
        """The database state the index reflects now."""
        return GraphState(self.generation, self.after, self.extra)

    def current(self, generation: int, rowid: int) -> bool:
        """Whether the index reflects this (index generation, highest rowid) already."""
        return self.generation == generation and self.seen == rowid

    def catch_up(self, store: EmbeddingsMixin, generation: int, rowid: int) -> bool:
        """Bring the index to (generation, rowid) in place; False = it must be rebuilt."""
        index = self.index
        # the built-in indexes first: isinstance of a runtime-checkable Protocol inspects
        # every attribute (~30 µs, a quarter of a one-row catch-up)
        if not isinstance(index, _GROWABLE) and not isinstance(index, GrowableVectorIndex):
            return False
        if generation != self.generation:
            removed = store.removals.removed_between(self.generation, generation)
            if removed is None:
                return False
            if removed:
                # `extra` stays: a wider search returns the same best k documents
                index.remove(np.fromiter(removed, dtype=np.int64, count=len(removed)))
        if rowid > self.after:
            ids, matrix, docs = store._vector_rows(self.scope, self.model, self.kinds, after=self.after)
            if ids.shape[0]:
                if index.dim and matrix.shape[1] != index.dim:
                    return False  # another width under this model: rebuild raises it cleanly
                extra = self.extra + int(ids.shape[0]) - docs
                if isinstance(index, AdaptiveIndex):  # a graph built from here reflects this
                    index.tag = GraphState(generation, rowid, extra)
                index.add(ids, matrix)
                self.extra = extra
            self.after = rowid
        self.generation, self.seen = generation, rowid
        return True
