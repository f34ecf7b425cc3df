"""Embeddings of the SQLite store: vectors as BLOBs, exact (or pluggable) vector search."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from mindpalace.errors import DimensionMismatchError, NotFoundError, ValidationError
from mindpalace.scope import Scope
from mindpalace.store.base import Document, SearchHit
from mindpalace.store.inputs import embedding_rows
from mindpalace.store.sqlite.connection import SQLiteBase
from mindpalace.store.sqlite.rows import doc_of, scope_where
from mindpalace.store.vectors import VectorIndex, VectorIndexFactory


class EmbeddingsMixin(SQLiteBase):
    """The embedding part of the store protocol; a vector index per (scope, model, kinds) is
    cached until the search generation moves."""

    _index_factory: VectorIndexFactory
    _vec_cache: dict[tuple[Any, ...], tuple[object, VectorIndex, int]]
    _vec_lock: threading.Lock

    def _init_embeddings(self, vector_index_factory: VectorIndexFactory) -> None:
        self._index_factory = vector_index_factory
        self._vec_cache = {}
        self._vec_lock = threading.Lock()

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
            try:
                self._conn().executemany(
                    "INSERT OR REPLACE INTO embeddings (doc_id, model, dim, vector) "
                    "VALUES (?, ?, ?, ?)",
                    [
                        (int(i), model, dim, mat[bounds[j] : bounds[j + 1]].tobytes())
                        for j, i in enumerate(doc_ids)
                    ],
                )
            except sqlite3.IntegrityError as exc:  # a doc id that does not exist (foreign key)
                known = self.get_documents([int(i) for i in doc_ids])
                missing = [int(i) for i in doc_ids if int(i) not in known]
                raise NotFoundError("document", missing[:10]) from exc
            self._bump_generation()

    def vector_search(
        self,
        scope: Scope,
        vector: np.ndarray,
        model: str,
        *,
        k: int = 10,
        kinds: Sequence[str] | None = None,
    ) -> list[SearchHit]:
        index, extra = self._vector_index(scope, model, kinds)
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not np.isfinite(q).all():
            raise ValidationError(f"query vector for model {model!r} contains NaN or infinity")
        if index.dim and q.shape[0] != index.dim:
            raise DimensionMismatchError(index.dim, int(q.shape[0]), model)
        ids, sims = index.search(q, k + extra)
        if extra:  # chunk rows share their document's id: keep each document's best chunk
            _, first = np.unique(ids, return_index=True)
            keep = np.sort(first)[:k]
            ids, sims = ids[keep], sims[keep]
        docs = self.get_documents(ids.tolist())
        return [
            SearchHit(docs[int(i)], float(s), rank, "vector")
            for rank, (i, s) in enumerate(zip(ids, sims, strict=True), 1)
            if int(i) in docs
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
    ) -> tuple[VectorIndex, int]:
        """The scope's index and how many chunk rows it holds beyond one per document."""
        key = (scope.values(), model, tuple(sorted(kinds)) if kinds else None)
        generation = self._generation()
        with self._vec_lock:
            cached = self._vec_cache.get(key)
            if cached is not None and cached[0] == generation:
                return cached[1], cached[2]
        where, scope_params = scope_where(scope, "d")
        sql = (
            "SELECT e.doc_id, e.dim, e.vector FROM embeddings e JOIN docs d ON d.id = e.doc_id "
            f"WHERE e.model = ? AND {where}"
        )
        params = [model, *scope_params]
        if kinds:
            sql += f" AND d.kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        rows = self._execute(sql, params).fetchall()
        if rows:
            dim = rows[0]["dim"]
            per_doc = np.fromiter(
                (len(r["vector"]) // (4 * dim) for r in rows), dtype=np.int64, count=len(rows)
            )
            doc_ids = np.fromiter((r["doc_id"] for r in rows), dtype=np.int64, count=len(rows))
            ids = np.repeat(doc_ids, per_doc)  # one row per chunk, each with its document's id
            matrix = np.frombuffer(b"".join(r["vector"] for r in rows), dtype=np.float32)
            matrix = matrix.reshape(int(per_doc.sum()), dim)
        else:
            ids, matrix = np.empty(0, np.int64), np.empty((0, 0), np.float32)
        index = self._index_factory(ids, matrix)
        with self._vec_lock:
            if len(self._vec_cache) > 64:  # bounded: scopes come and go
                self._vec_cache.clear()
            extra = int(ids.shape[0]) - len(rows)
            self._vec_cache[key] = (generation, index, extra)
        return index, extra

    def documents_missing_embeddings(self, model: str, *, limit: int = 1000) -> list[Document]:
        rows = self._execute(
            "SELECT d.* FROM docs d WHERE NOT EXISTS (SELECT 1 FROM embeddings e "
            "WHERE e.doc_id = d.id AND e.model = ?) "
            # late parts of a huge text are keyword-only (store.inputs.document_parts)
            "AND json_extract(d.meta, '$.keyword_only') IS NULL ORDER BY d.id LIMIT ?",
            (model, limit),
        )
        return [doc_of(r) for r in rows]

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
            return cur.rowcount
