"""BM25 over the FTS5 word index with statistics of the searched scope, in numpy.

Okapi BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N − n + 0.5)/(n + 0.5))) where N, n (documents
holding the term) and the average document length are counted **over the documents of the
searched scope and kinds only**: one tenant's (or user's) documents never change another's
scores, and a long reply is length-normalised against the documents it competes with, not
against the whole workspace. Tokens and document lengths are exactly the word index's (read
through its ``fts5vocab`` tables and its ``docsize`` table), so stemming and CJK bigrams are
the index's own.

Two ways to get the postings, same scores:

* :class:`PostingIndex` — the whole index's postings cached in numpy; a query restricts them
  to the scope with a boolean mask (fast path, ~ms at 100k documents). It is kept up to date
  in place: new documents (ids only grow) are appended to a small side segment that is folded
  into the main one now and then, deleted documents are masked out; the scores are exactly
  those of an index built from scratch. In scopes of 50,000+ documents the long posting lists
  are read by impact, only as deep as the top k needs (:mod:`mindpalace.store.topk`);
* :func:`score_postings` over postings read per query term from SQL (used while the cache is
  stale or inside a write transaction).

A huge document (a tens-of-MB tool output) can be held *external*: it takes its position,
length and liveness in the cache like any other, but its postings stay in the store's word
index and the caller hands them in per query term (``top(..., extra=)``), so following its
append costs O(1) instead of O(its tokens). Scores are the same as with its postings cached.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from mindpalace.store import topk
from mindpalace.store.okapi import K1, idf, length_norm, top_k

_BLOCK = 1 << 18  # occurrences mapped to positions at a time while building


def score_postings(
    postings: Sequence[tuple[np.ndarray, np.ndarray]],
    doc_len: np.ndarray,
    avgdl: float,
    n_docs: int,
    *,
    max_df_ratio: float | None = None,
    norm: np.ndarray | None = None,
) -> np.ndarray:
    """BM25 scores of `n_docs` documents (positions 0…n_docs−1) for one query.

    Args:
        postings: per query term, (document positions, term frequencies) restricted to the
            scope; a repeated term is a repeated entry (it counts twice, as in FTS5).
        doc_len: tokens per document, aligned with positions (float64).
        avgdl: mean document length of the scope (tokens).
        n_docs: documents in the scope (N).
        max_df_ratio: drop terms found in more than this share of the scope's documents
            while a rarer term remains (the rarest term always stays); None keeps all.
        norm: :func:`length_norm` of (doc_len, avgdl) when the caller keeps it (then
            `doc_len` is not read).
    Returns:
        float64 array of shape (n_docs,), 0 for documents holding no term.
    """
    score = np.zeros(n_docs, dtype=np.float64)
    if n_docs == 0:
        return score
    terms = list(postings)
    if max_df_ratio is not None and len(terms) > 1:
        dfs = [int(p.shape[0]) for p, _ in terms]
        keep = [t for t, df in zip(terms, dfs, strict=True) if df <= max_df_ratio * n_docs]
        terms = keep or [terms[int(np.argmin(dfs))]]
    if norm is None:
        norm = length_norm(doc_len, avgdl)
    for pos, tf in terms:
        if pos.size == 0:
            continue
        weight = idf(n_docs, int(pos.shape[0]))
        score[pos] += weight * (tf * (K1 + 1.0)) / (tf + norm[pos])
    return score


_NO_LENGTHS = np.empty(0)
_UNASKED = object()  # a token not in _Starts' memo yet
_SPAN_MEMO = 8_192  # tokens whose posting bounds a segment remembers


class _Grow:
    """A 1-D numpy array with spare room at the end: appending n items costs O(n) amortised."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.n = int(a.shape[0])

    def view(self) -> np.ndarray:
        return self.a[: self.n]

    def extend(self, items: np.ndarray) -> None:
        end = self.n + int(items.shape[0])
        if end > self.a.shape[0]:
            grown = np.empty(max(end, self.n + self.n // 4, 1024), self.a.dtype)
            grown[: self.n] = self.a[: self.n]
            self.a = grown
        self.a[self.n : end] = items
        self.n = end


@dataclass
class _ScopeView:
    """One scope's documents among the index positions, and its BM25 statistics."""

    mask: _Grow  # bool over index positions: in the scope and not deleted
    upto: int  # index positions covered by `mask` (later ones are looked up on use)
    n_docs: int = 0
    avgdl: float = 0.0
    dirty: bool = True  # the mask changed since the statistics were computed
    removed: bool = True  # a position left the mask since: recount everything
    done: int = 0  # mask positions the statistics cover
    _positions: _Grow = field(default_factory=lambda: _Grow(np.empty(0, np.int64)))
    _local: _Grow = field(default_factory=lambda: _Grow(np.empty(0, np.int64)))
    _lengths: _Grow = field(default_factory=lambda: _Grow(np.empty(0, np.float64)))
    _norm: np.ndarray | None = None
    # token → (documents of the scope holding it, mask positions counted): valid while no
    # document left the mask; appended positions are counted on use
    dfs: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def positions(self) -> np.ndarray:
        """Index positions of the scope's documents, ascending."""
        return self._positions.view()

    @property
    def local(self) -> np.ndarray:
        """Scope-local position of every index position (cumulative count of the mask − 1)."""
        return self._local.view()

    @property
    def lengths(self) -> np.ndarray:
        """Tokens of each scope document, aligned with :attr:`positions` (float64)."""
        return self._lengths.view()

    @property
    def norm(self) -> np.ndarray:
        """:func:`length_norm` of the scope's documents (computed on first use)."""
        if self._norm is None:
            self._norm = length_norm(self.lengths, self.avgdl)
        return self._norm

    def refresh(self, doc_len: np.ndarray) -> None:
        """Recompute the statistics from the mask (the same arithmetic as a fresh build);
        lazily, on the next query of the scope, so a scope not queried costs nothing. When
        documents were only appended since, the position arrays are extended, not rebuilt
        (a write before every query at 1M documents paid three passes over the index)."""
        if not self.dirty:
            return
        self.dirty = False
        mask = self.mask.view()
        if self.removed or self.done == 0:
            self.dfs.clear()
            positions = np.flatnonzero(mask)
            self._positions = _Grow(positions)
            self._local = _Grow(np.cumsum(mask) - 1)
            self._lengths = _Grow(doc_len[positions])
        else:
            tail = mask[self.done :]
            new = np.flatnonzero(tail) + self.done
            before = int(self._local.a[self.done - 1])  # scope documents below, minus one
            self._positions.extend(new)
            self._local.extend(before + np.cumsum(tail))
            self._lengths.extend(doc_len[new])
        self.done, self.removed = int(mask.shape[0]), False
        self.n_docs = self._positions.n
        # the mean of the same values in the same order as a fresh build's: the same float
        self.avgdl = float(self.lengths.mean()) if self.n_docs else 0.0
        self._norm = None


class _Vocab(Sequence[str]):
    """The tokens of a segment in index order, held compactly: their UTF-8 bytes in one blob,
    the offsets and a by-bytes order in arrays, and a lookup by binary search. A list of
    ~180k short ``str`` plus a dict from them held ~23 MB at 100k facts; this holds ~4 MB, and
    a lookup (a few per query) costs ~20 µs.
    """

    def __init__(self, tokens: Sequence[str]) -> None:
        # One token at a time into the blob: no list of encoded copies is ever held.
        blob = bytearray()
        off = array("q", [0])
        ordered, last = True, b""
        for i, token in enumerate(tokens):
            key = token.encode("utf-8", "surrogatepass")
            ordered = ordered and (i == 0 or last < key)
            last = key
            blob += key
            off.append(len(blob))
        self._blob = bytes(blob)
        del blob
        self._off = off
        # The word index lists its terms in byte order already: then no permutation is held.
        self._order: array[int] | range = range(len(off) - 1)
        if not ordered:  # a fold appended new tokens at the end
            self._order = array("i", sorted(self._order, key=self._bytes))

    def _bytes(self, i: int) -> bytes:
        return self._blob[self._off[i] : self._off[i + 1]]

    def __len__(self) -> int:
        return len(self._off) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._bytes(i % len(self)).decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        blob, off = self._blob, self._off
        for i in range(len(self)):
            yield blob[off[i] : off[i + 1]].decode("utf-8", "surrogatepass")

    def find(self, token: str) -> int:
        """Index of `token`, or −1 when it is not held."""
        key = token.encode("utf-8", "surrogatepass")
        at = bisect_left(self._order, key, key=self._bytes)
        if at < len(self._order) and self._bytes(self._order[at]) == key:
            return self._order[at]
        return -1


class _Starts(Mapping[str, tuple[int, int]]):
    """token → [start, end) of its postings, for the tokens that have any: the tokens in a
    compact :class:`_Vocab` and the bounds in numpy (a dict of (start, end) tuples held ~3×
    the memory of a dict of ints, which itself held ~13 MB at 100k documents)."""

    def __init__(self, tokens: _Vocab, bounds: np.ndarray) -> None:
        self._tokens = tokens
        self._bounds = bounds
        self._held = np.flatnonzero(bounds[1:] > bounds[:-1])
        # token → its [start, end), or None when it has no postings: the tokens queries asked
        # (a few dozen per recall, the same ones query after query), each found by one binary
        # search over the vocabulary; at most _SPAN_MEMO held, then forgotten at once
        self._asked: dict[str, tuple[int, int] | None] = {}

    def get(self, token: str, default: Any = None) -> Any:
        """``[start, end)`` of `token`'s postings, `default` when it has none (as Mapping.get,
        answered from the memo of asked tokens when held)."""
        asked = self._asked
        span = asked.get(token, _UNASKED)
        if span is _UNASKED:
            i = self._tokens.find(token)
            span = None
            if i >= 0:
                start, end = int(self._bounds[i]), int(self._bounds[i + 1])
                span = (start, end) if start != end else None
            if len(asked) >= _SPAN_MEMO:
                asked.clear()
            asked[token] = span
        return default if span is None else span

    @property
    def bounds(self) -> np.ndarray:
        """Posting offsets by token index (length len(tokens) + 1, non-decreasing)."""
        return self._bounds

    def __getitem__(self, token: str) -> tuple[int, int]:
        i = self._tokens.find(token)
        if i < 0:
            raise KeyError(token)
        start, end = int(self._bounds[i]), int(self._bounds[i + 1])
        if start == end:
            raise KeyError(token)
        return start, end

    def __iter__(self) -> Iterator[str]:
        return (self._tokens[int(i)] for i in self._held)

    def __len__(self) -> int:
        return int(self._held.shape[0])

    def spans(self) -> Iterator[tuple[str, int, int]]:
        """(token, start, end) of every token with postings, in index order (no lookups)."""
        bounds = self._bounds.tolist()
        for i in self._held.tolist():
            yield self._tokens[i], bounds[i], bounds[i + 1]


@dataclass
class _Segment:
    """Postings grouped by token: ``starts[token]`` = [start, end) into the two arrays."""

    tokens: _Vocab
    starts: _Starts
    post_doc: np.ndarray  # document positions, int32
    post_tf: np.ndarray  # term frequencies, float32 (small integers: exact)
    # token → its postings' impact order (the long lists a query read), built on first use
    impacts: dict[str, topk.ImpactOrder] = field(default_factory=dict)

    @classmethod
    def grouped(
        cls, tokens: Sequence[str], tok: np.ndarray, doc: np.ndarray, tf: np.ndarray
    ) -> _Segment:
        """From postings in any order; `tok` indexes `tokens`."""
        if tok.size > 1 and not bool(np.all(tok[1:] >= tok[:-1])):
            order = np.argsort(tok, kind="stable")
            tok, doc, tf = tok[order], doc[order], tf[order]
        bounds = np.searchsorted(tok, np.arange(len(tokens) + 1))
        vocab = _Vocab(tokens)
        return cls(vocab, _Starts(vocab, bounds), doc.astype(np.int32, copy=False), tf.astype(np.float32, copy=False))


@dataclass
class PostingIndex:
    """Postings of the whole word index, kept up to date in place.

    Positions: document ``doc_ids[p]`` is at position p; ids only grow, so a new document is
    appended at the end. A deleted document keeps its position but leaves every scope mask (it
    no longer counts in N, document frequencies or the average length); a text change or a
    deletion by another process means a rebuild (the store decides, see ``fulltext``).
    """

    generation: object  # label: the store's search generation when last brought up to date
    state: Any  # the store's (index generation, last document id) the postings reflect
    ids: _Grow  # docs.id by position (int64, ascending)
    lens: _Grow  # tokens per document (float64)
    alive: _Grow  # bool: not deleted
    main: _Segment
    delta: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    delta_postings: int = 0
    views: dict[object, _ScopeView] = field(default_factory=dict)
    external: _Grow = field(default_factory=lambda: _Grow(np.empty(0, np.int64)))  # positions
    # the caller's per-token (doc ids, tf) in the external documents; emptied when they change
    external_postings: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def doc_ids(self) -> np.ndarray:
        return self.ids.view()

    @property
    def doc_len(self) -> np.ndarray:
        return self.lens.view()

    @property
    def n_docs(self) -> int:
        return self.ids.n

    @classmethod
    def build(
        cls, generation: object, doc_ids: np.ndarray, vocab: Sequence[tuple[str, int]], docs: np.ndarray,
        *, state: Any = None, external: Mapping[int, int] | None = None,
    ) -> PostingIndex:
        """`vocab`: (token, occurrences) in index order (the ``fts5vocab`` row table); `docs`:
        the document id of every occurrence in the same order (the ``instance`` table), both
        read in one snapshot. `external`: documents held without postings (doc id → tokens),
        as in :meth:`append`; their occurrences are left out of `vocab` and `docs`.

        Raises:
            LookupError: the two tables and the docs table disagree (a torn read).
        """
        n = int(doc_ids.shape[0])
        tokens = [t for t, _ in vocab]
        counts = np.fromiter((c for _, c in vocab), dtype=np.int64, count=len(vocab))
        if int(counts.sum()) != int(docs.shape[0]):
            raise LookupError("word index vocabulary and instances disagree")
        tok = np.repeat(np.arange(len(tokens), dtype=np.int32), counts)
        # Positions < n: int32, found a block at a time so no int64 copy of all ~10 occurrences
        # per document is ever held (the build's peak memory).
        pos = np.empty(docs.shape[0], np.int32)
        for at in range(0, docs.shape[0], _BLOCK):
            part = docs[at : at + _BLOCK]
            wide = np.searchsorted(doc_ids, part)
            if wide.max() >= n or not np.array_equal(doc_ids[wide], part):
                raise LookupError("word index and docs table disagree")
            pos[at : at + _BLOCK] = wide
        main, doc_len = _collapse(tokens, tok, pos, n)
        index = cls(
            generation, state, _Grow(np.asarray(doc_ids, np.int64)), _Grow(doc_len),
            _Grow(np.ones(n, dtype=bool)), main,
        )
        if external:
            ext_ids = np.fromiter(sorted(external), np.int64, count=len(external))
            ext_pos = np.searchsorted(doc_ids, ext_ids)
            if ext_pos.max() >= n or not np.array_equal(doc_ids[ext_pos], ext_ids):
                raise LookupError("external documents and docs table disagree")
            doc_len[ext_pos] = [float(external[int(i)]) for i in ext_ids]
            index.external.extend(ext_pos)
        return index

    # -- in-place updates ------------------------------------------------------------------
    def append(
        self, doc_ids: np.ndarray, tokens: list[str], tok: np.ndarray, docs: np.ndarray,
        *, external: Mapping[int, int] | None = None,
    ) -> None:
        """Add documents above every id held: `doc_ids` ascending; the occurrences of their
        tokens as (`tok` indexes `tokens`, `docs` = document id) pairs, any order.

        `external`: documents among `doc_ids` held without postings (doc id → its token
        count, ≥ 0); none of their occurrences may be passed. Their postings are supplied per
        query through :meth:`top`'s `extra`.

        Raises:
            ValueError: ids not above every id held, or an external id not among `doc_ids`
                or with occurrences passed.
        """
        doc_ids = np.asarray(doc_ids, np.int64)
        if doc_ids.size == 0:
            return
        if self.ids.n and int(doc_ids[0]) <= int(self.ids.a[self.ids.n - 1]):
            raise ValueError("appended document ids must be above every id held")
        first = self.ids.n
        pos = np.searchsorted(doc_ids, docs)
        if not external and tok.shape[0] <= _SMALL_APPEND:
            # A write before a query appends a document or two: counted in Python, without
            # the sorted segment a batch needs (~20 numpy calls for a dozen occurrences).
            doc_len, added = self._delta_small(int(doc_ids.shape[0]), tokens, tok, pos, first)
        else:
            seg, doc_len = _collapse(tokens, tok, pos, int(doc_ids.shape[0]))
            if external:
                ext_ids = np.fromiter(sorted(external), np.int64, count=len(external))
                ext_pos = np.searchsorted(doc_ids, ext_ids)
                if ext_pos.max() >= doc_ids.shape[0] or not np.array_equal(doc_ids[ext_pos], ext_ids):
                    raise ValueError("external documents must be among the appended ids")
                if np.isin(docs, ext_ids).any():
                    raise ValueError("external documents are appended without occurrences")
                doc_len[ext_pos] = [float(external[int(i)]) for i in ext_ids]
                self.external.extend(ext_pos + first)
                self.external_postings.clear()
            for token, start, end in seg.starts.spans():
                plist, tlist = self.delta.setdefault(token, ([], []))
                plist.extend((seg.post_doc[start:end] + first).tolist())
                tlist.extend(seg.post_tf[start:end].tolist())
            added = int(seg.post_doc.shape[0])
        self.ids.extend(doc_ids)
        self.lens.extend(doc_len)
        self.alive.extend(np.ones(doc_ids.shape[0], dtype=bool))
        self.delta_postings += added
        if self.delta_postings > max(50_000, self.main.post_doc.shape[0] // 8):
            self._fold()

    def _delta_small(
        self, n_docs: int, tokens: list[str], tok: np.ndarray, pos: np.ndarray, first: int
    ) -> tuple[np.ndarray, int]:
        """The side-segment postings of a few occurrences (no external documents), as
        :func:`_collapse` makes them (per token, in token order; positions ascending; term
        frequencies counted), added to :attr:`delta` at positions from `first`: (each
        document's length, postings added)."""
        counts: dict[tuple[int, int], int] = {}
        for pair in zip(tok.tolist(), pos.tolist(), strict=True):
            counts[pair] = counts.get(pair, 0) + 1
        doc_len = np.zeros(n_docs, np.float64)
        for (t, p), tf in sorted(counts.items()):
            plist, tlist = self.delta.setdefault(tokens[t], ([], []))
            plist.append(p + first)
            tlist.append(float(tf))
            doc_len[p] += tf
        return doc_len, len(counts)

    def remove(self, doc_ids: np.ndarray) -> None:
        """Drop these documents (ids not held are ignored) from every scope."""
        held = self.doc_ids
        pos = np.searchsorted(held, doc_ids)
        ok = pos < held.shape[0]
        pos = pos[ok][held[pos[ok]] == np.asarray(doc_ids)[ok]]
        if pos.size == 0:
            return
        self.alive.a[pos] = False
        for view in self.views.values():
            covered = pos[pos < view.upto]
            view.mask.a[covered] = False
            view.dirty = view.removed = True

    def _fold(self) -> None:
        """Merge the side segment into the main one (same postings, so the same scores)."""
        tokens = list(self.main.tokens)
        index = {t: i for i, t in enumerate(tokens)}
        # The main segment is grouped by token index: token i holds [bounds[i], bounds[i+1]).
        main_tok = np.repeat(np.arange(len(tokens), dtype=np.int64), np.diff(self.main.starts.bounds))
        extra_tok, extra_doc, extra_tf = [], [], []
        for t, (plist, tlist) in self.delta.items():
            i = index.get(t)
            if i is None:
                i = index[t] = len(tokens)
                tokens.append(t)
            extra_tok.append(np.full(len(plist), i, np.int64))
            extra_doc.append(np.asarray(plist, np.int64))
            extra_tf.append(np.asarray(tlist, np.float32))
        self.main = _Segment.grouped(
            tokens,
            np.concatenate([main_tok, *extra_tok]),
            np.concatenate([self.main.post_doc.astype(np.int64), *extra_doc]),
            np.concatenate([self.main.post_tf, *extra_tf]),
        )
        self.delta, self.delta_postings = {}, 0

    # -- scoring ---------------------------------------------------------------------------
    def view(self, key: object, ids_in_scope: np.ndarray) -> _ScopeView:
        """A new scope view from the ids of every live document of the scope (cached under
        `key`, bounded)."""
        mask = np.zeros(self.n_docs, dtype=bool)
        mask[np.searchsorted(self.doc_ids, ids_in_scope)] = True  # same snapshot: all found
        found = _ScopeView(_Grow(mask), self.n_docs)
        found.refresh(self.doc_len)
        if len(self.views) > 64:  # bounded: scopes come and go
            self.views.clear()
        self.views[key] = found
        return found

    def extend_view(self, view: _ScopeView, ids_in_scope: np.ndarray) -> None:
        """Cover the positions appended since `view` was last used; `ids_in_scope`: the live
        scope documents among them."""
        added = np.zeros(self.n_docs - view.upto, dtype=bool)
        pos = np.searchsorted(self.doc_ids, ids_in_scope) - view.upto
        added[pos] = True
        view.mask.extend(added & self.alive.view()[view.upto :])
        view.upto = self.n_docs
        view.dirty = True

    def external_ids(self, view: _ScopeView) -> np.ndarray:
        """Ids (ascending) of the external documents live in `view`'s scope: the documents
        whose postings :meth:`top` needs in `extra` (int64, usually empty)."""
        pos = self.external.view()
        if pos.size == 0:
            return np.empty(0, np.int64)
        pos = pos[pos < view.upto]
        return self.doc_ids[pos[view.mask.a[pos]]]

    def postings(
        self, token: str, view: _ScopeView,
        extra: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scope-local positions, term frequencies float64) of `token` inside the scope;
        `extra`: (doc ids, term frequencies) of the token in external documents."""
        start, end = self.main.starts.get(token, (0, 0))
        idx = self.main.post_doc[start:end]
        tf = self.main.post_tf[start:end]
        side = self.delta.get(token)
        if side is not None:
            idx = np.concatenate([idx, np.asarray(side[0], np.int32)])
            tf = np.concatenate([tf, np.asarray(side[1], np.float32)])
        if extra is not None and extra[0].size:
            ext_pos = np.searchsorted(self.doc_ids, np.asarray(extra[0], np.int64))
            if ext_pos.max() >= self.n_docs or not np.array_equal(self.doc_ids[ext_pos], extra[0]):
                raise ValueError("external postings name a document the index does not hold")
            idx = np.concatenate([idx, ext_pos.astype(np.int32)])
            tf = np.concatenate([tf, np.asarray(extra[1], np.float32)])
        inside = view.mask.a[idx]
        return view.local[idx[inside]], tf[inside].astype(np.float64)

    def top(
        self, tokens: Sequence[str], view: _ScopeView, k: int, *, max_df_ratio: float | None = None,
        extra: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> list[tuple[int, float]]:
        """(doc id, score) best first, ties by doc id, statistics of `view`'s scope; `tokens`
        are index tokens, one per query term (a repeated token counts twice); `extra`: per
        token, (doc ids int64, term frequencies) of its postings in the scope's external
        documents (:meth:`external_ids`) — required for a token found in one of them."""
        view.refresh(self.doc_len)
        if view.n_docs == 0 or k <= 0:
            return []
        got = extra or {}
        if view.n_docs >= PRUNE_MIN_DOCS and not any(t in got for t in tokens):
            pruned = self._top_pruned(tokens, view, k, max_df_ratio)
            if pruned is not None:
                return pruned
        # Scope-local positions: scores are computed over the scope's documents only.
        postings = [self.postings(token, view, got.get(token)) for token in tokens]
        scope_pos = view.positions
        score = score_postings(  # lengths enter through the scope's cached norm
            postings, _NO_LENGTHS, view.avgdl, view.n_docs, max_df_ratio=max_df_ratio,
            norm=view.norm,
        )
        return top_k(score, self.doc_ids[scope_pos], k)


    def _top_pruned(
        self, tokens: Sequence[str], view: _ScopeView, k: int, max_df_ratio: float | None
    ) -> list[tuple[int, float]] | None:
        """:meth:`top` without scoring every document that holds a common term: the long
        posting lists read by impact, as deep as the answer needs (:func:`topk.exact_top_k`).
        Same ids, scores and order; None when that would not save work (the caller scores
        densely)."""
        lists = [self._all_postings(token) for token in tokens]
        dfs = [self._scope_df(view, token, idx, side)
               for token, (idx, _, side, _) in zip(tokens, lists, strict=True)]
        terms = list(range(len(lists)))
        if max_df_ratio is not None and len(terms) > 1:  # as score_postings drops terms
            keep = [t for t in terms if dfs[t] <= max_df_ratio * view.n_docs]
            terms = keep or [int(np.argmin(dfs))]
        terms = [t for t in terms if dfs[t] > 0]
        if not terms:
            return None
        postings = [
            topk.TermPostings(
                idf(view.n_docs, dfs[t]), *lists[t],
                self._impact_order(tokens[t]) if lists[t][0].shape[0] >= max(topk.LONG_POSTINGS, 1) else None,
            )
            for t in terms  # query order: the dense pass's order of additions
        ]
        stats = topk.ScopeStats(view.mask.a, self.lens.a, view.avgdl)
        return topk.exact_top_k(postings, stats, self.ids.a, k,
                                max_candidates=max(PRUNE_MAX_CANDIDATES, 4 * k))

    def _all_postings(self, token: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(main positions ascending int32, their term frequencies float32, appended positions
        ascending and above the main ones, their frequencies) of `token` over the whole index
        (every scope, deleted documents included)."""
        start, end = self.main.starts.get(token, (0, 0))
        idx, tf = self.main.post_doc[start:end], self.main.post_tf[start:end]
        side = self.delta.get(token)
        if side is None:
            return idx, tf, _NO_POSITIONS, _NO_FREQUENCIES
        return idx, tf, np.asarray(side[0], np.int32), np.asarray(side[1], np.float32)

    def _impact_order(self, token: str) -> topk.ImpactOrder:
        """The impact order of `token`'s main postings, kept until the next fold (bounded by
        the bytes held)."""
        held = self.main.impacts.get(token)
        if held is None:
            start, end = self.main.starts[token]
            docs = self.main.post_doc[start:end]
            held = topk.ImpactOrder.of(self.main.post_tf[start:end], self.lens.a[docs])
            if sum(o.nbytes for o in self.main.impacts.values()) > _IMPACT_BYTES:
                self.main.impacts.clear()
            self.main.impacts[token] = held
        return held

    @staticmethod
    def _scope_df(view: _ScopeView, token: str, idx: np.ndarray, side: np.ndarray) -> int:
        """Documents of `view`'s scope holding `token` (`idx`, `side`: its main and appended
        postings, ascending), counted once per scope and then only over the positions
        appended since."""
        held = view.dfs.get(token)
        mask = view.mask.a
        if held is None:
            df = int(np.count_nonzero(mask[idx])) + int(np.count_nonzero(mask[side]))
        else:  # positions below held[1] were counted; the main ones all lie below it
            from_main = idx[int(np.searchsorted(idx, held[1])) :]
            from_side = side[int(np.searchsorted(side, held[1])) :]
            df = held[0] + int(np.count_nonzero(mask[from_main])) + int(np.count_nonzero(mask[from_side]))
        if len(view.dfs) > 50_000:  # bounded: every distinct query word of the scope
            view.dfs.clear()
        view.dfs[token] = (df, view.done)
        return df


PRUNE_MIN_DOCS = 50_000
"""Scopes from which :meth:`PostingIndex.top` reads long posting lists by impact (below it
the dense pass over the scope is cheap)."""

PRUNE_MAX_CANDIDATES = 200_000
"""Postings read above which the impact read gives up (the dense pass is as cheap)."""

_SMALL_APPEND = 4096  # occurrences up to which an append is counted in Python
_IMPACT_BYTES = 64 << 20  # impact orders held per main segment (~16M postings' worth)
_NO_POSITIONS = np.empty(0, np.int32)
_NO_FREQUENCIES = np.empty(0, np.float32)


def _collapse(
    tokens: list[str], tok: np.ndarray, pos: np.ndarray, n: int
) -> tuple[_Segment, np.ndarray]:
    """Occurrences (token index, document position) → postings with term frequencies, and
    the tokens per document (float64, length n)."""
    tok = tok.astype(np.int32, copy=False)
    pos = pos.astype(np.int32, copy=False)
    ordered = tok.size < 2 or bool(
        np.all((tok[1:] > tok[:-1]) | ((tok[1:] == tok[:-1]) & (pos[1:] >= pos[:-1])))
    )
    if not ordered:  # a new documents' batch: sort by (token, document) first
        order = np.lexsort((pos, tok))
        tok, pos = tok[order], pos[order]
    # The word index lists occurrences by (token, document): equal neighbours are one posting,
    # so run lengths are the term frequencies — no sort of the ~10 M occurrences at 1 M docs.
    if tok.size:
        starts = np.flatnonzero(
            np.concatenate(([True], (tok[1:] != tok[:-1]) | (pos[1:] != pos[:-1])))
        ).astype(np.int32 if tok.size < 2**31 else np.int64)
        tf = np.diff(starts, append=tok.size).astype(np.float32)
        post_tok, post_doc = tok[starts], pos[starts]
    else:
        tf, post_tok, post_doc = np.empty(0, np.float32), tok, pos
    doc_len = np.bincount(post_doc, weights=tf, minlength=n).astype(np.float64)
    return _Segment.grouped(tokens, post_tok, post_doc, tf), doc_len
