"""Embeddings of the PostgreSQL store: pgvector rows (one per chunk), cosine search.

Each model's vectors get an HNSW index (``vector_cosine_ops``) at that model's width, made
when its first vectors are written. Where the planner uses it (a large scope), ranking is
**approximate**: a true nearest neighbour can be missed or two close documents swapped,
unlike SQLite's exact scan; the returned scores are the exact cosine similarities of the rows
found, and a scope-filtered scan keeps going until it has k rows (``hnsw.iterative_scan``).
Small scopes are ranked exactly (the planner scans the scope's rows and sorts them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from mindpalace.errors import DimensionMismatchError, NotFoundError, ValidationError
from mindpalace.scope import Scope
from mindpalace.store.base import Document, SearchHit
from mindpalace.store.inputs import embedding_rows
from mindpalace.store.postgres.connection import scope_where
from mindpalace.store.postgres.documents import DOC_COLS, DocumentsMixin, doc_of
from mindpalace.store.postgres.schema import hnsw_index_sql


def _index_name(model: str, dim: int) -> str:
    return f"mp_emb_hnsw_{hashlib.sha1(model.encode()).hexdigest()[:16]}_{int(dim)}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class EmbeddingsMixin(DocumentsMixin):
    """The embedding part of the store protocol."""

    def _model_dim(self, model: str) -> int | None:
        row = self._one("SELECT dim FROM mp_models WHERE model = %s", (model,))
        return None if row is None else int(row[0])

    def put_embeddings(
        self,
        doc_ids: Sequence[int],
        vectors: np.ndarray,
        model: str,
        *,
        rows: Sequence[int] | None = None,
    ) -> None:
        mat, counts = embedding_rows(doc_ids, vectors, model, rows)
        if not doc_ids:
            return
        dim = int(mat.shape[1])
        ids = [int(i) for i in doc_ids]
        with self._tx(serialize=False) as conn:
            self._xact_lock(conn, "model", model)
            known = {int(r[0]) for r in conn.execute(
                "SELECT id FROM mp_docs WHERE id = ANY(%s) FOR KEY SHARE", (ids,))}
            missing = [i for i in ids if i not in known]
            if missing:
                raise NotFoundError("document", missing[:10])
            found = conn.execute("SELECT dim FROM mp_models WHERE model = %s", (model,)).fetchone()
            if found is not None and int(found[0]) != dim:
                raise DimensionMismatchError(int(found[0]), dim, model)
            if found is None:
                conn.execute("INSERT INTO mp_models (model, dim) VALUES (%s, %s)", (model, dim))
                conn.execute(hnsw_index_sql(_index_name(model, dim), _literal(model), dim))
            conn.execute("DELETE FROM mp_embeddings WHERE model = %s AND doc_id = ANY(%s)",
                         (model, ids))
            bounds = np.concatenate([[0], np.cumsum(counts)]).astype(int)
            with conn.cursor().copy(
                "COPY mp_embeddings (doc_id, model, chunk, vector) FROM STDIN"
            ) as copy:
                for j, doc in enumerate(ids):
                    for c, row in enumerate(mat[bounds[j]: bounds[j + 1]]):
                        copy.write_row((doc, model, c, "[" + ",".join(map(repr, row.tolist())) + "]"))
            self._bump_generation(conn)

    def get_embeddings(self, doc_ids: Sequence[int], model: str) -> dict[int, np.ndarray]:
        if not doc_ids:
            return {}
        rows = self._all("SELECT doc_id, vector FROM mp_embeddings WHERE model = %s "
                         "AND doc_id = ANY(%s) ORDER BY doc_id, chunk",
                         (model, [int(i) for i in doc_ids]))
        chunks: dict[int, list[np.ndarray]] = {}
        for doc_id, vec in rows:
            chunks.setdefault(int(doc_id), []).append(np.asarray(vec.to_numpy(), dtype=np.float32))
        out: dict[int, np.ndarray] = {}
        for doc_id, vs in chunks.items():
            v = np.mean(vs, axis=0) if len(vs) > 1 else vs[0]
            out[doc_id] = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
        return out

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
        dim = self._model_dim(model)
        if dim is None or k <= 0:
            return []
        if q.shape[0] != dim:
            raise DimensionMismatchError(dim, int(q.shape[0]), model)
        where, params = scope_where(scope, "d")
        kind_sql = " AND d.kind = ANY(%s)" if kinds else ""
        kind_params: list[Any] = [list(kinds)] if kinds else []
        literal = "[" + ",".join(map(repr, q.tolist())) + "]"
        limit = k * 2 + 8  # chunk rows share their document: fetch more, keep each's best
        while True:
            rows = self._all(
                f"SELECT e.doc_id, e.vector::vector({dim}) <=> %s::vector({dim}) AS dist "
                f"FROM mp_embeddings e JOIN mp_docs d ON d.id = e.doc_id WHERE e.model = "
                f"{_literal(model)} AND {where}{kind_sql} ORDER BY dist LIMIT %s",
                [literal, *params, *kind_params, limit])
            best: dict[int, float] = {}
            for doc_id, dist in rows:
                best.setdefault(int(doc_id), 1.0 - float(dist))
            if len(best) >= k or len(rows) < limit:
                break
            limit *= 4
        top = sorted(best.items(), key=lambda t: (-t[1], t[0]))[:k]
        docs = self.get_documents([i for i, _ in top])
        return [SearchHit(docs[i], s, rank, "vector")
                for rank, (i, s) in enumerate(top, 1) if i in docs]

    def documents_missing_embeddings(
        self, model: str, *, limit: int = 1000, after_id: int = 0
    ) -> list[Document]:
        cols = ", ".join(f"d.{c.strip()}" for c in DOC_COLS.split(","))
        rows = self._all(
            f"SELECT {cols} FROM mp_docs d WHERE d.id > %s AND NOT EXISTS (SELECT 1 FROM "
            "mp_embeddings e WHERE e.doc_id = d.id AND e.model = %s) "
            # late parts of a huge text are keyword-only (store.inputs.document_parts)
            "AND (d.meta::jsonb ->> 'keyword_only') IS NULL ORDER BY d.id LIMIT %s",
            (after_id, model, limit))
        return [doc_of(r) for r in rows]

    def embedding_models(self) -> dict[str, tuple[int, int]]:
        rows = self._all("SELECT m.model, m.dim, count(DISTINCT e.doc_id) FROM mp_models m "
                         "JOIN mp_embeddings e ON e.model = m.model GROUP BY m.model, m.dim")
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    def delete_embeddings(self, *, keep_model: str | None = None) -> int:
        with self._tx(serialize=False) as conn:
            if keep_model is None:
                n = conn.execute("DELETE FROM mp_embeddings").rowcount
                dropped = conn.execute("DELETE FROM mp_models RETURNING model, dim").fetchall()
            else:
                n = conn.execute("DELETE FROM mp_embeddings WHERE model != %s",
                                 (keep_model,)).rowcount
                dropped = conn.execute("DELETE FROM mp_models WHERE model != %s "
                                       "RETURNING model, dim", (keep_model,)).fetchall()
            for model, dim in dropped:
                conn.execute(f"DROP INDEX IF EXISTS {_index_name(model, int(dim))}")
            self._bump_generation(conn)
        return n
