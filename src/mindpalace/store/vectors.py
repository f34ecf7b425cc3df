"""Vector index seam: exact cosine over a numpy matrix, or an HNSW graph (hnswlib) above a size.

An index holds (id, vector) rows; several rows may share an id (the chunks of one document).
Both implementations grow in place (:meth:`add`) and drop documents (:meth:`remove`), so the
store keeps one index per scope up to date by appending new vectors instead of rebuilding it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from mindpalace.errors import DimensionMismatchError, StoreError

_log = logging.getLogger(__name__)


class VectorIndex(Protocol):
    """An index over (id, vector) rows."""

    @property
    def dim(self) -> int:
        """Vector width (0 while empty)."""
        ...

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (ids int64, cosine similarities float32), best first."""
        ...


@runtime_checkable
class GrowableVectorIndex(VectorIndex, Protocol):
    """An index the store updates in place: rows appended, documents dropped."""

    def add(self, ids: np.ndarray, matrix: np.ndarray) -> None:
        """Append rows (ids int64 shape (n,), float32 matrix shape (n, dim))."""
        ...

    def remove(self, ids: np.ndarray) -> int:
        """Drop every row of these ids; returns how many rows were dropped."""
        ...

    def __len__(self) -> int:
        """Rows held (not dropped)."""
        ...


class VectorIndexFactory(Protocol):
    def __call__(self, ids: np.ndarray, matrix: np.ndarray) -> VectorIndex: ...


_NORM_BYTES = 1 << 20  # the squares np.linalg.norm holds for one block of rows


def _unit_rows(matrix: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """`matrix` (n, dim) with every row L2-normalised, float32. `in_place`: divide the rows of
    `matrix` itself when it is a writable C-contiguous float32 array (else a new array, as
    without it) — the same values, without a second matrix held beside the first."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.size == 0:
        return m.reshape(m.shape[0], -1)
    # Norms a block of rows at a time: np.linalg.norm squares its whole input first (a
    # temporary the size of its input: 16 MB per 65,536 rows at 64-d, 400 MB at 1536-d);
    # each row's norm is the same computed either way.
    block = max(1, _NORM_BYTES // (4 * max(int(m.shape[1]), 1)))
    norms = np.empty((m.shape[0], 1), np.float32)
    for at in range(0, m.shape[0], block):
        norms[at : at + block] = np.linalg.norm(m[at : at + block], axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    if not (in_place and m.flags.writeable and m.flags.c_contiguous):
        return m / norms
    for at in range(0, m.shape[0], block):  # the same division, a block of rows at a time
        m[at : at + block] /= norms[at : at + block]
    return m


def _unit_query(query: np.ndarray, dim: int) -> np.ndarray:
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    if q.shape[0] != dim:
        raise DimensionMismatchError(dim, int(q.shape[0]), "query")
    return q / max(float(np.linalg.norm(q)), 1e-12)


def _best(sims: np.ndarray, ids: np.ndarray, k: int, live: int) -> np.ndarray:
    """Row positions of the `k` best similarities (`live` of them finite, the rest −inf), best
    first; ties by smaller id, then earlier row — deterministic, so an index updated in place
    ranks exactly as a fresh one."""
    k = min(k, live)
    if k <= 0:
        return np.empty(0, np.int64)
    kth = _kth_largest(sims, k)
    cand = np.flatnonzero(sims >= kth)  # every tie of the k-th stays, so ids decide
    order = np.lexsort((cand, ids[cand], -sims[cand]))[:k]
    return cand[order]


_KTH_BLOCK = 64  # similarities per block whose maximum bounds the k-th largest


def _kth_largest(sims: np.ndarray, k: int) -> np.floating:
    """The `k`-th largest of `sims` (1 ≤ k ≤ its length): ``np.partition(sims, n − k)[n − k]``
    without partitioning (and copying) all n values. The k blocks of :data:`_KTH_BLOCK` values
    with the largest maxima hold k values ≥ the k-th largest of those maxima, so the k-th
    largest value is ≥ it too: only the values reaching that bound (a few hundred of 100k) are
    partitioned — the same value, ~4× faster at 100k rows."""
    n = int(sims.shape[0])
    blocks = n // _KTH_BLOCK
    if blocks < 4 * k:  # few rows or a deep k: the bound would not prune much
        return np.partition(sims, n - k)[n - k]
    maxima = sims[: blocks * _KTH_BLOCK].reshape(blocks, _KTH_BLOCK).max(axis=1)
    bound = np.partition(maxima, blocks - k)[blocks - k]
    held = sims[sims >= bound]  # the rows past the last whole block are compared here too
    return np.partition(held, held.shape[0] - k)[held.shape[0] - k]


class ExactCosineIndex:
    """Brute-force cosine similarity: rows are L2-normalised once, a query is one mat-vec.

    Fine to ~100k vectors per scope (≈ 10 ms at 512-d on 2 cores); beyond that
    :class:`AdaptiveIndex` switches to HNSW. Rows live in a buffer that grows by a quarter, so
    appending n rows costs O(n) amortised; dropped rows are masked and compacted away once they
    are half the buffer. Ties rank by smaller id, then earlier row.

    Args:
        ids: int64 (n,), the id of each row.
        matrix: float32 (n, dim), the rows (any norm).
        copy: False = `matrix` is handed over: when it is a writable C-contiguous float32
            array its rows are normalised in place and it becomes the index's buffer (one
            matrix in memory instead of two while the index is built; the caller must not use
            it afterwards). True (default) never changes `matrix`.
        room: with ``copy=False``, a writable C-contiguous float32 array of more rows whose
            first rows are `matrix` itself (the same memory): the rows past them are room for
            appends, never read or written before (an anonymous map's untouched pages cost
            no resident memory) — the first appends after a build copy nothing, where the
            handed-over matrix alone had to be copied whole (25.6 MB at 100k × 64) by the
            first append. Ignored when it is not such an array.

    Raises:
        DimensionMismatchError: `matrix` is not 2-D.
    """

    def __init__(
        self, ids: np.ndarray, matrix: np.ndarray, *, copy: bool = True,
        room: np.ndarray | None = None,
    ) -> None:
        m = np.asarray(matrix, dtype=np.float32)
        self.dim = int(m.shape[1]) if m.ndim == 2 and m.shape[0] else 0
        self._n = 0
        self._dead = 0
        self._ids = np.empty(0, np.int64)
        self._alive = np.empty(0, bool)
        self._buf = np.empty((0, self.dim), np.float32)
        self._add(np.asarray(ids, dtype=np.int64), m, owned=not copy)
        if not copy and room is not None and self._n and _extends(room, self._buf):
            self._buf = room  # its first rows are the buffer just adopted
            cap = int(room.shape[0])
            self._ids = _grown(self._ids, self._n, (cap,))
            self._alive = _grown(self._alive, self._n, (cap,))

    @property
    def ids(self) -> np.ndarray:
        """Ids of the live rows, in row order."""
        return self._ids[: self._n][self._alive[: self._n]]

    @property
    def matrix(self) -> np.ndarray:
        """The live rows, L2-normalised (float32)."""
        return self._buf[: self._n][self._alive[: self._n]]

    def __len__(self) -> int:
        return self._n - self._dead

    def add(self, ids: np.ndarray, matrix: np.ndarray) -> None:
        self._add(ids, matrix, owned=False)

    def _add(self, ids: np.ndarray, matrix: np.ndarray, *, owned: bool) -> None:
        """:meth:`add`; `owned`: `matrix` may be normalised in place and kept (see ``copy``)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.shape[0] == 0:
            return
        m = _unit_rows(matrix, in_place=owned)
        if not self.dim:
            self.dim = int(m.shape[1])
            self._buf = np.empty((0, self.dim), np.float32)
        if m.ndim != 2 or m.shape[1] != self.dim:
            raise DimensionMismatchError(self.dim, int(m.shape[-1]), "vectors")
        end = self._n + ids.shape[0]
        # First rows: adopt a fresh unit-row array (or the caller's, handed over) instead of
        # copying it — one matrix, not two.
        if self._n == 0 and (owned or m.base is None) and m.flags.c_contiguous:
            self._buf = m
            self._ids = ids.copy()
            self._alive = np.ones(end, bool)
            self._n = end
            return
        if end > self._buf.shape[0]:
            cap = max(end, self._buf.shape[0] + self._buf.shape[0] // 4, 1024)
            self._buf = _grown(self._buf, self._n, (cap, self.dim))
            self._ids = _grown(self._ids, self._n, (cap,))
            self._alive = _grown(self._alive, self._n, (cap,))
        self._buf[self._n : end] = m
        self._ids[self._n : end] = ids
        self._alive[self._n : end] = True
        self._n = end

    def remove(self, ids: np.ndarray) -> int:
        rows = np.flatnonzero(np.isin(self._ids[: self._n], ids) & self._alive[: self._n])
        self._alive[rows] = False
        self._dead += int(rows.shape[0])
        if self._dead > 1024 and self._dead * 2 > self._n:  # mostly holes: compact
            keep = self._alive[: self._n]
            live = int(keep.sum())
            self._buf[:live] = self._buf[: self._n][keep]
            self._ids[:live] = self._ids[: self._n][keep]
            self._alive[:live] = True
            self._n, self._dead = live, 0
        return int(rows.shape[0])

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self) == 0 or k <= 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        q = _unit_query(query, self.dim)
        # einsum, not BLAS: one query is a memory-bound mat-vec, and a multi-threaded BLAS on a
        # busy machine made it 50-300x slower (measured: 10k x 128 in 0.3 ms vs 56 ms).
        sims = np.einsum("ij,j->i", self._buf[: self._n], q)
        if self._dead:
            sims[~self._alive[: self._n]] = -np.inf
        top = _best(sims, self._ids[: self._n], k, len(self))
        return self._ids[top], sims[top]


_GONE = -1  # the id of a dropped HNSW row (document ids are positive)


def _extends(room: np.ndarray, buf: np.ndarray) -> bool:
    """Whether `room` is a writable C-contiguous float32 array of `buf`'s width and more rows
    whose memory starts where `buf`'s does (`buf` its first rows)."""
    return (
        room.dtype == np.float32 and room.ndim == 2 and buf.ndim == 2
        and room.shape[1] == buf.shape[1] and room.shape[0] > buf.shape[0]
        and room.flags.c_contiguous and room.flags.writeable and buf.flags.c_contiguous
        and room.__array_interface__["data"][0] == buf.__array_interface__["data"][0]
    )


def _grown(a: np.ndarray, used: int, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, a.dtype)
    out[:used] = a[:used]
    return out


class HnswIndex:
    """Approximate cosine search over an HNSW graph (hnswlib): ranks by the graph, returns the
    exact cosine similarity of the rows it found (recomputed from the stored unit vectors).

    Args:
        ids / matrix: the first rows (int64 (n,), float32 (n, dim)).
        ef_search: candidate list per query (≥ k is used); higher = better recall, slower.
        m / ef_construction: graph degree and build-time candidate list (hnswlib's M, ef).
        seed: hnswlib's random seed (level assignment); bulk adds of 10,000+ rows use every
            core, so the graph (not the exact scores) may differ between builds.

    Raises:
        StoreError: hnswlib failed (its exceptions never reach the caller raw).
    """

    def __init__(
        self, ids: np.ndarray, matrix: np.ndarray, *, ef_search: int = 100, m: int = 16,
        ef_construction: int = 100, seed: int = 100,
    ) -> None:
        import hnswlib  # optional at import time: only indexes above the ANN size load it

        mat = np.asarray(matrix, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[0] == 0:
            raise StoreError("an HNSW index needs at least one vector")
        self.dim = int(mat.shape[1])
        self.ef_search = ef_search
        self._index = hnswlib.Index(space="ip", dim=self.dim)  # on unit rows ip = cosine
        self._cap = max(1024, int(mat.shape[0] * 1.25))
        try:
            self._index.init_index(
                max_elements=self._cap, ef_construction=ef_construction, M=m, random_seed=seed
            )
        except RuntimeError as exc:
            raise StoreError(f"HNSW index: {exc}") from exc
        self._ids = np.empty(0, np.int64)
        self._n = 0
        self._dead = 0
        self.add(np.asarray(ids, dtype=np.int64), mat)

    def __len__(self) -> int:
        return self._n - self._dead

    def add(self, ids: np.ndarray, matrix: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.shape[0] == 0:
            return
        m = _unit_rows(matrix)
        if m.shape[1] != self.dim:
            raise DimensionMismatchError(self.dim, int(m.shape[1]), "vectors")
        end = self._n + ids.shape[0]
        try:
            if end > self._cap:
                self._cap = max(end, self._cap + self._cap // 4)
                self._index.resize_index(self._cap)
            # Bulk builds on every core (graph order then varies; results are approximate
            # anyway); single appends on one thread.
            threads = -1 if ids.shape[0] >= 10_000 else 1
            self._index.add_items(m, np.arange(self._n, end, dtype=np.int64), num_threads=threads)
        except RuntimeError as exc:
            raise StoreError(f"HNSW index: {exc}") from exc
        self._ids = _grown(self._ids, self._n, (self._cap,))
        self._ids[self._n : end] = ids
        self._n = end

    def remove(self, ids: np.ndarray) -> int:
        rows = np.flatnonzero(np.isin(self._ids[: self._n], ids))
        removed = 0
        for row in rows.tolist():
            try:
                self._index.mark_deleted(row)
            except RuntimeError:  # already deleted
                pass
            else:
                removed += 1
            self._ids[row] = _GONE  # a dropped row matches no id again
        self._dead += removed
        return removed

    @property
    def row_ids(self) -> np.ndarray:
        """The id of every graph row (label), in label order; dropped rows hold -1."""
        return self._ids[: self._n]

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The stored unit vectors of these graph rows (live ones), float32 (len(rows), dim).

        Raises:
            StoreError: a row is not in the graph (or was dropped).
        """
        try:
            return np.asarray(self._index.get_items(np.asarray(rows, np.int64)), dtype=np.float32)
        except RuntimeError as exc:
            raise StoreError(f"HNSW index: {exc}") from exc

    def save(self, graph_path: Path) -> None:
        """Write the graph (hnswlib's format, dropped rows marked) to `graph_path`; the row ids
        are :attr:`row_ids`, saved by the caller beside it.

        Raises:
            StoreError: hnswlib could not write the file.
        """
        try:
            self._index.save_index(str(graph_path))
        except (RuntimeError, OSError) as exc:
            raise StoreError(f"cannot save the HNSW graph to {graph_path}: {exc}") from exc

    @classmethod
    def load(
        cls, graph_path: Path, row_ids: np.ndarray, dim: int, *, ef_search: int = 100
    ) -> HnswIndex:
        """A graph written by :meth:`save` with its row ids (int64, one per label, -1 =
        dropped); room for a quarter more rows is reserved.

        Raises:
            StoreError: the file is not a graph of `dim`-wide vectors with len(row_ids) rows.
        """
        import hnswlib

        ids = np.array(row_ids, dtype=np.int64).reshape(-1)
        self = cls.__new__(cls)
        self.dim, self.ef_search = int(dim), ef_search
        self._index = hnswlib.Index(space="ip", dim=self.dim)
        self._n = int(ids.shape[0])
        self._cap = max(1024, int(self._n * 1.25))
        try:
            self._index.load_index(str(graph_path), max_elements=self._cap)
            count = int(self._index.element_count)
        except (RuntimeError, OSError, ValueError, MemoryError) as exc:
            raise StoreError(f"cannot load the HNSW graph {graph_path}: {exc}") from exc
        if count != self._n:
            raise StoreError(f"HNSW graph {graph_path}: {count} rows, {self._n} row ids")
        self._ids = _grown(ids, self._n, (self._cap,))
        self._dead = int((ids < 0).sum())
        return self

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        live = len(self)
        if live == 0 or k <= 0:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        q = _unit_query(query, self.dim)
        k = min(k, live)
        ef = max(self.ef_search, k)
        while True:
            try:
                self._index.set_ef(ef)
                labels, _ = self._index.knn_query(q, k=k)
                break
            except RuntimeError as exc:  # too few reachable live rows for k at this ef
                if ef >= live:
                    raise StoreError(f"HNSW index: {exc}") from exc
                ef = min(live, ef * 4)
        rows = labels[0].astype(np.int64)
        vectors = np.asarray(self._index.get_items(rows), dtype=np.float32)
        sims = vectors @ q  # exact scores of what the graph found
        order = np.lexsort((rows, self._ids[rows], -sims))
        return self._ids[rows[order]], sims[order]


class AdaptiveIndex:
    """Exact cosine up to `min_ann_rows` rows, an :class:`HnswIndex` from then on (switched
    once, when a build or an append reaches the size; 0 = always exact).

    Args:
        ids / matrix: the first rows.
        min_ann_rows: rows from which HNSW is used (the store's ``ann_min_vectors``).
        ef_search: HNSW candidate list per query.
        background: build the graph in a background thread (off the query path: an HNSW
            build takes minutes at 100k+ rows) while the exact index keeps answering; rows
            added and removed meanwhile are replayed onto the graph when it is taken into
            use, at the next call after the build finished. False = build in the call that
            reaches the size. A failed background build is logged and the index stays exact.
        tag: what the rows reflect (the owner's state, e.g. the database snapshot); the owner
            sets :attr:`tag` again before each change. A graph built from a snapshot is handed
            to `on_built` with the tag of that snapshot.
        on_built: called as ``on_built(graph, tag)`` once a graph is built from a snapshot of
            the rows, before it is taken into use — in the build thread when `background`
            (the store saves it to disk there, off the query path). Its exceptions are logged.
        copy: False = `matrix` is handed over (normalised in place and kept, see
            :class:`ExactCosineIndex`).
        room: the handed-over matrix's room for appends (see :class:`ExactCosineIndex`).

    Not thread-safe by itself: the caller serialises calls (the store holds a lock per index).
    """

    def __init__(
        self, ids: np.ndarray, matrix: np.ndarray, *, min_ann_rows: int, ef_search: int = 100,
        background: bool = False, tag: object = None,
        on_built: Callable[[HnswIndex, object], None] | None = None, copy: bool = True,
        room: np.ndarray | None = None,
    ) -> None:
        self.min_ann_rows = min_ann_rows
        self.ef_search = ef_search
        self.background = background
        self.tag = tag
        self.on_built = on_built
        self.inner: ExactCosineIndex | HnswIndex = ExactCosineIndex(
            ids, matrix, copy=copy, room=room
        )
        self._build: _GraphBuild | None = None
        self._ann_failed = False
        self._maybe_switch()

    @classmethod
    def from_graph(
        cls, graph: HnswIndex, *, min_ann_rows: int, ef_search: int = 100,
        background: bool = False, tag: object = None,
        on_built: Callable[[HnswIndex, object], None] | None = None,
    ) -> AdaptiveIndex:
        """An index that ranks by `graph` from the start (a graph loaded from disk)."""
        empty = np.empty(0, np.int64)
        self = cls(empty, np.empty((0, graph.dim), np.float32), min_ann_rows=min_ann_rows,
                   ef_search=ef_search, background=background, tag=tag, on_built=on_built)
        graph.ef_search = ef_search
        self.inner = graph
        return self

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def approximate(self) -> bool:
        """Whether queries are ranked by the HNSW graph."""
        return isinstance(self.inner, HnswIndex)

    @property
    def building(self) -> bool:
        """Whether a background graph build is under way (or done and not yet taken into use)."""
        return self._build is not None

    def wait_built(self, timeout: float | None = None) -> bool:
        """Wait for a background build and take the graph into use; returns
        :attr:`approximate`. For tests and benchmarks: queries never wait."""
        if self._build is not None:
            self._build.thread.join(timeout)
        self._adopt()
        return self.approximate

    def __len__(self) -> int:
        return len(self.inner)

    def _maybe_switch(self) -> None:
        inner = self.inner
        if (
            not isinstance(inner, ExactCosineIndex) or self._build is not None or self._ann_failed
            or not 0 < self.min_ann_rows <= len(inner)
        ):
            return
        if self.background:
            self._build = _GraphBuild(
                inner.ids, inner.matrix, self.ef_search, self.tag, self.on_built
            )
        else:
            graph = HnswIndex(inner.ids, inner.matrix, ef_search=self.ef_search)
            _hand_over(self.on_built, graph, self.tag)
            self.inner = graph

    def _adopt(self) -> None:
        """Take a finished background graph into use, replaying what changed meanwhile."""
        build = self._build
        if build is None or build.thread.is_alive():
            return
        self._build = None
        if build.graph is None:
            self._ann_failed = True
            _log.warning("HNSW graph build failed; the index stays exact: %s", build.error)
            return
        for ids, matrix in build.pending:
            if matrix is None:
                build.graph.remove(ids)
            else:
                build.graph.add(ids, matrix)
        self.inner = build.graph

    def add(self, ids: np.ndarray, matrix: np.ndarray) -> None:
        self._adopt()
        self.inner.add(ids, matrix)
        if self._build is not None:
            self._build.pending.append(
                (np.array(ids, dtype=np.int64), np.array(matrix, dtype=np.float32))
            )
        self._maybe_switch()

    def remove(self, ids: np.ndarray) -> int:
        self._adopt()
        if self._build is not None:
            self._build.pending.append((np.array(ids, dtype=np.int64), None))
        return self.inner.remove(ids)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._adopt()
        return self.inner.search(query, k)


class _GraphBuild:
    """An :class:`HnswIndex` built from a snapshot of rows in a daemon thread, and the changes
    (``(ids, matrix)`` appended, ``(ids, None)`` removed) made after the snapshot."""

    def __init__(
        self, ids: np.ndarray, matrix: np.ndarray, ef_search: int, tag: object,
        on_built: Callable[[HnswIndex, object], None] | None,
    ) -> None:
        self.graph: HnswIndex | None = None
        self.error: BaseException | None = None
        self.pending: list[tuple[np.ndarray, np.ndarray | None]] = []
        self.thread = threading.Thread(
            target=self._run, args=(ids, matrix, ef_search, tag, on_built),
            name="mindpalace-hnsw-build", daemon=True,
        )
        self.thread.start()

    def _run(
        self, ids: np.ndarray, matrix: np.ndarray, ef_search: int, tag: object,
        on_built: Callable[[HnswIndex, object], None] | None,
    ) -> None:
        try:
            graph = HnswIndex(ids, matrix, ef_search=ef_search)
        except Exception as exc:  # reported by the index that adopts (or not) the graph
            self.error = exc
            return
        _hand_over(on_built, graph, tag)  # nobody else holds the graph yet
        self.graph = graph


def _hand_over(
    on_built: Callable[[HnswIndex, object], None] | None, graph: HnswIndex, tag: object
) -> None:
    if on_built is None:
        return
    try:
        on_built(graph, tag)
    except Exception:  # saving is an optimisation: the graph is used all the same
        _log.warning("HNSW graph hand-over failed", exc_info=True)


def adaptive_factory(
    min_ann_rows: int, ef_search: int = 100, *, background: bool = False
) -> VectorIndexFactory:
    """A factory of :class:`AdaptiveIndex` (exact below `min_ann_rows` rows, HNSW above; the
    graph built in a background thread when `background`)."""

    def build(ids: np.ndarray, matrix: np.ndarray) -> VectorIndex:
        return AdaptiveIndex(
            ids, matrix, min_ann_rows=min_ann_rows, ef_search=ef_search, background=background
        )

    return build
