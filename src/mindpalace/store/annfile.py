"""Persisted HNSW graphs of the SQLite store, beside the database, validated on open.

Building a graph over a million vectors takes minutes; without a file every new process would
answer from exact cosine (and read every vector) for that long. The store saves a graph once it
is built (in the build thread, off the query path) and at close when it changed since, and a
new process loads it instead of building.

Layout: a folder ``<database>.ann/`` beside the database file; per cached index (scope, model,
kinds) a stem (a hash of that key) and

* ``<stem>.<token>.graph`` — the graph in hnswlib's format (dropped rows marked deleted);
* ``<stem>.<token>.ids.npy`` — the document id of every graph row (-1 = dropped);
* ``<stem>.json`` — the manifest, written last: the key, embedder model, width, the database
  state the graph reflects (:class:`GraphState`), the token, sizes and CRC-32 of both files.

Every file is written through :func:`~mindpalace.fsutil.atomic_write_with` (temp file, fsync,
rename), and the manifest is the commit point: a reader sees an old complete graph or a new
complete one. A new token per save keeps a reader of the old manifest from reading half of a
new graph; the previous save's files are removed after the manifest moved on.

On open (:meth:`AnnFiles.load`) a graph is used only when the manifest is this key's and
model's, the database's ``index_generation`` is the one the graph was saved at (nothing it
holds was deleted, replaced or re-embedded since: those move the generation), the highest
embeddings rowid it holds is not above the database's, both files have their recorded size and
CRC-32, hnswlib loads the graph with as many rows as ids, and sampled rows of the graph hold
the vectors the database holds for their documents (a graph of another database with the same
counters is refused). Anything else returns None — the store then builds from the rows, as
without a file — and a damaged or foreign file is logged; nothing here raises to a query.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mindpalace.errors import StoreError
from mindpalace.fsutil import atomic_write, atomic_write_with
from mindpalace.store.vectors import HnswIndex

_log = logging.getLogger(__name__)

FORMAT = 1
SAMPLE_ROWS = 16  # graph rows compared with the database's vectors on load
ORPHAN_SECONDS = 3600  # graph files no manifest names, older than this, are removed on save

#: ``check(doc_ids)`` → each document's stored vectors of the model, rows L2-normalised
#: (float32 (chunks, dim)); documents without vectors are absent.
VectorCheck = Callable[[Sequence[int]], dict[int, np.ndarray]]


@dataclass(frozen=True)
class GraphState:
    """The database state a graph reflects: ``index_generation``, the highest embeddings
    rowid whose vector it holds (rows above it are appended on load), and the chunk rows it
    holds beyond one per document (the store widens its search by that)."""

    generation: int
    after: int
    extra: int


def ann_dir(db_path: Path) -> Path:
    """The folder of the persisted graphs of the database at `db_path`."""
    return db_path.with_name(db_path.name + ".ann")


class AnnFiles:
    """Save and load the HNSW graphs of one database (thread-safe; several processes may
    save the same key, the last manifest written wins).

    Args:
        db_path: the SQLite database file; the graphs live in :func:`ann_dir` of it.
        ef_search: HNSW candidate list of a loaded graph.
    """

    def __init__(self, db_path: Path, *, ef_search: int = 100) -> None:
        self.folder = ann_dir(Path(db_path))
        self.ef_search = ef_search
        self._lock = threading.Lock()

    @staticmethod
    def _stem(key: object) -> str:
        return hashlib.sha256(_key_text(key).encode()).hexdigest()[:24]

    def manifest_path(self, key: object) -> Path:
        """The manifest of `key`'s graph (it may not exist)."""
        return self.folder / f"{self._stem(key)}.json"

    # -- save ------------------------------------------------------------------------------
    def save(self, key: object, model: str, graph: HnswIndex, state: GraphState) -> Path:
        """Write `graph` as `key`'s, reflecting `state`; returns the manifest path. The caller
        keeps the graph unchanged meanwhile (the build thread owns it, or the store holds the
        index's lock).

        Raises:
            StoreError: a file could not be written (the previous save stays in use).
        """
        with self._lock:
            try:
                self.folder.mkdir(exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create {self.folder}: {exc}") from exc
            stem, token = self._stem(key), secrets.token_hex(6)
            graph_path = self.folder / f"{stem}.{token}.graph"
            ids_path = self.folder / f"{stem}.{token}.ids.npy"
            previous = self._manifest(stem)
            try:
                atomic_write_with(graph_path, graph.save)
                atomic_write_with(ids_path, lambda p: _save_npy(p, graph.row_ids))
                manifest = {
                    "format": FORMAT, "key": _key_text(key), "model": model, "dim": graph.dim,
                    "generation": state.generation, "after": state.after, "extra": state.extra,
                    "rows": int(graph.row_ids.shape[0]), "token": token,
                    "graph_bytes": graph_path.stat().st_size, "graph_crc": _crc(graph_path),
                    "ids_bytes": ids_path.stat().st_size, "ids_crc": _crc(ids_path),
                    "saved_at": time.time(),
                }
                atomic_write(self.folder / f"{stem}.json", json.dumps(manifest).encode())
            except BaseException as exc:
                graph_path.unlink(missing_ok=True)
                ids_path.unlink(missing_ok=True)
                if isinstance(exc, OSError):
                    raise StoreError(f"cannot save the HNSW graph in {self.folder}: {exc}") from exc
                raise
            self._remove_old(stem, token, previous)
            return self.folder / f"{stem}.json"

    def _remove_old(self, stem: str, token: str, previous: dict[str, Any] | None) -> None:
        """Drop the previous save's files and orphans (a save killed before its manifest)."""
        now = time.time()
        for path in self.folder.glob(f"{stem}.*"):
            if path.suffix == ".json" or f".{token}." in path.name:
                continue
            old = previous is not None and f".{previous.get('token')}." in path.name
            try:
                if old or now - path.stat().st_mtime > ORPHAN_SECONDS:
                    path.unlink()
            except OSError:  # gone already, or not ours to remove: harmless
                continue

    # -- load ------------------------------------------------------------------------------
    def load(
        self, key: object, model: str, *, generation: int, top: int, check: VectorCheck
    ) -> tuple[HnswIndex, GraphState] | None:
        """`key`'s saved graph and the state it reflects, when it is valid for a database at
        (`generation`, highest embeddings rowid `top`) — see the module docstring — else None
        (no file, stale, damaged or foreign; the last two logged as warnings)."""
        stem = self._stem(key)
        if not (self.folder / f"{stem}.json").exists():
            return None
        try:
            return self._load(stem, key, model, generation, top, check)
        except _Stale as why:
            _log.info("persisted HNSW graph %s not used: %s", stem, why)
        except Exception as exc:  # damaged or foreign: the store builds the graph again
            _log.warning("persisted HNSW graph %s ignored: %s", stem, exc)
        return None

    def _load(
        self, stem: str, key: object, model: str, generation: int, top: int, check: VectorCheck
    ) -> tuple[HnswIndex, GraphState]:
        m = self._manifest(stem, strict=True)
        assert m is not None
        if m.get("format") != FORMAT or m.get("key") != _key_text(key):
            raise StoreError(f"manifest of another index (format {m.get('format')})")
        if m["model"] != model:
            raise _Stale(f"embedder model {m['model']!r}, not {model!r}")
        if int(m["generation"]) != generation:
            raise _Stale("documents were deleted or vectors replaced since it was saved")
        if int(m["after"]) > top:
            raise StoreError(f"holds vectors up to rowid {m['after']}, the database only {top}")
        graph_path = self.folder / f"{stem}.{m['token']}.graph"
        ids_path = self.folder / f"{stem}.{m['token']}.ids.npy"
        for path, size, crc in ((graph_path, m["graph_bytes"], m["graph_crc"]),
                                (ids_path, m["ids_bytes"], m["ids_crc"])):
            if path.stat().st_size != size or _crc(path) != crc:
                raise StoreError(f"{path.name}: size or checksum differs from the manifest")
        with open(ids_path, "rb") as fh:
            row_ids = np.load(fh, allow_pickle=False)
        if row_ids.dtype != np.int64 or row_ids.ndim != 1 or row_ids.shape[0] != m["rows"]:
            raise StoreError(f"{ids_path.name}: not {m['rows']} int64 row ids")
        graph = HnswIndex.load(graph_path, row_ids, int(m["dim"]), ef_search=self.ef_search)
        _check_sample(graph, check)
        return graph, GraphState(int(m["generation"]), int(m["after"]), int(m["extra"]))

    def _manifest(self, stem: str, *, strict: bool = False) -> dict[str, Any] | None:
        path = self.folder / f"{stem}.json"
        try:
            out = json.loads(path.read_text())
        except (OSError, ValueError):
            if strict:
                raise
            return None
        if not isinstance(out, dict):
            if strict:
                raise StoreError(f"{path.name}: not a manifest")
            return None
        return out


class _Stale(Exception):
    """The file is sound but no longer describes the database: rebuild (not a warning)."""


def _check_sample(graph: HnswIndex, check: VectorCheck) -> None:
    """Sampled live rows of `graph` must hold one of their document's stored vectors."""
    live = np.flatnonzero(graph.row_ids >= 0)
    if live.shape[0] == 0:
        return
    picks = np.unique(np.concatenate([
        live[np.linspace(0, live.shape[0] - 1, min(SAMPLE_ROWS, live.shape[0])).astype(np.int64)],
        live[-1:],
    ]))
    doc_ids = graph.row_ids[picks]
    stored = check([int(i) for i in doc_ids])
    vectors = graph.vectors(picks)
    for doc_id, vector in zip(doc_ids.tolist(), vectors, strict=True):
        rows = stored.get(int(doc_id))
        if rows is None or rows.shape[1] != vector.shape[0] or not np.any(
            np.abs(rows - vector).max(axis=1) <= 1e-4
        ):
            raise StoreError(f"row of document {doc_id} does not hold the database's vector")


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as fh:  # a file object: np.save would append ".npy" to a name
        np.save(fh, np.asarray(array, dtype=np.int64), allow_pickle=False)


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            crc = zlib.crc32(chunk, crc)
    return crc


def _key_text(key: object) -> str:
    return json.dumps(key, sort_keys=True, default=str)
