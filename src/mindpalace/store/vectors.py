"""Vector index seam: exact cosine over a numpy matrix now; an ANN index (usearch/hnswlib) can
implement the same two-method protocol later without touching the store or components."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from mindpalace.errors import DimensionMismatchError


class VectorIndex(Protocol):
    """A read-only index over fixed (id, vector) rows."""

    dim: int

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids int64, cosine similarities float32), best first."""
        ...


class ExactCosineIndex:
    """Brute-force cosine similarity: rows are L2-normalised once, a query is one mat-vec.

    Fine to ~100k vectors per scope (≈ 10 ms at 512-d on 2 cores); beyond that plug an ANN
    index in through :data:`VectorIndexFactory`.
    """

    def __init__(self, ids: np.ndarray, matrix: np.ndarray) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        m = np.asarray(matrix, dtype=np.float32)
        self.dim = int(m.shape[1]) if m.ndim == 2 else 0
        norms = np.linalg.norm(m, axis=1, keepdims=True) if m.size else np.ones((0, 1))
        self.matrix = m / np.maximum(norms, 1e-12)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if self.matrix.shape[0] == 0 or k <= 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        if q.shape[0] != self.dim:
            raise DimensionMismatchError(self.dim, int(q.shape[0]), "query")
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        sims = self.matrix @ q
        k = min(k, sims.shape[0])
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return self.ids[top], sims[top]


class VectorIndexFactory(Protocol):
    def __call__(self, ids: np.ndarray, matrix: np.ndarray) -> VectorIndex: ...
