"""What recall reads from the store besides the two scored lists, kept cheap.

:class:`~mindpalace.retrieval.hybrid.HybridRetriever` scores candidates, fuses them and
credits message neighbours; this module holds the reads around that, each sized to what the
ranking needs (measured on LoCoMo and the 100k-fact recall benchmark, see
``benchmarks/bench_recall.py``):

* :func:`searchable_scopes` — the scopes of a recall that hold any document. A recall
  searches the user's sessions plus the user's and the agent's knowledge scopes; most
  knowledge scopes are empty, and a keyword search of an empty scope finds no word match and
  falls back to a trigram scan of the whole index. An empty scope can only answer with
  nothing, so leaving it out changes no result.
* :class:`NeighbourCache` — the messages next to the matched ones, for every session in one
  store read (one query instead of one per session), kept until the store is written.
* :func:`matched_terms` — which query terms a returned text contains (stemmed comparison),
  stemming each distinct word of the text once, through a shared memo.

Every function keeps the scope of each read (I10): it only narrows the scopes it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from mindpalace.scope import Scope
from mindpalace.store.base import Document, Store
from mindpalace.store.textindex import query_terms

MAX_STEM_MEMO = 200_000  # distinct words remembered (~20 MB at worst); cleared when full


def searchable_scopes(
    store: Store, scopes: Sequence[Scope], kinds: Sequence[str] | None
) -> list[Scope]:
    """`scopes` without those holding no document of `kinds` (one indexed read each)."""
    if len(scopes) <= 1:  # one scope: its search answers "nothing" itself at no extra cost
        return list(scopes)
    return [s for s in scopes if store.has_documents(s, kinds=kinds)]


class NeighbourCache:
    """The documents next to matched messages, read in one store call per recall and kept
    while the store's :meth:`~mindpalace.store.base.DocumentIndex.search_generation` stays
    (any write of any process moves it, so a cached document is never stale).

    On a long conversation a recall credits neighbours of most turns (~430 of ~600 per LoCoMo
    question); repeated recalls over unchanged memory read none of them again. Refs found
    missing (past the last turn) are remembered too. At most `max_entries` are kept; the
    cache starts over when full.
    """

    def __init__(self, max_entries: int = 20_000) -> None:
        self.max_entries = max_entries
        self._generation: object = None
        self._size = 0
        # {(kind, scope): {ref: document or None}}: a Scope is hashed once per scope, not per ref
        self._docs: dict[tuple[str, Scope], dict[str, Document | None]] = {}
        self._lock = threading.Lock()

    def get(
        self, store: Store, kind: str, wanted: Mapping[Scope, set[str]]
    ) -> dict[tuple[Scope, str], Document]:
        """{(scope, ref): document} of the `kind` documents named in `wanted` ({concrete
        scope: refs}); refs not found are absent."""
        if not any(wanted.values()):
            return {}
        generation = store.search_generation()
        out: dict[tuple[Scope, str], Document] = {}
        missing: list[tuple[Scope, str]] = []
        with self._lock:
            if generation != self._generation:
                self._docs, self._generation, self._size = {}, generation, 0
            for scope, refs in wanted.items():
                held = self._docs.get((kind, scope), {})
                for ref in sorted(refs):
                    if ref in held:
                        doc = held[ref]
                        if doc is not None:
                            out[(scope, ref)] = doc
                    else:
                        missing.append((scope, ref))
        if missing:
            fetched = store.get_documents_by_refs(kind, missing)
            with self._lock:
                if self._generation == generation:  # not moved on by another thread meanwhile
                    if self._size + len(missing) > self.max_entries:
                        self._docs, self._size = {}, 0
                    for scope, ref in missing:
                        self._docs.setdefault((kind, scope), {})[ref] = fetched.get((scope, ref))
                    self._size += len(missing)
            out.update(fetched)
        return out


@cache
def _stemmer() -> Any:
    import Stemmer  # PyStemmer: the porter stemmer FTS5's porter tokenizer uses

    return Stemmer.Stemmer("english")


_stem_lock = threading.Lock()  # a Stemmer object is not thread-safe
_stem_memo: dict[str, str] = {}


def stem_words(words: Sequence[str]) -> list[str]:
    """The English stems of `words` (PyStemmer), each distinct word stemmed once per process."""
    memo = _stem_memo
    missing = [w for w in dict.fromkeys(words) if w not in memo]
    if missing:
        with _stem_lock:
            stemmed = _stemmer().stemWords(missing)
        if len(memo) + len(missing) > MAX_STEM_MEMO:
            memo.clear()
        memo.update(zip(missing, stemmed, strict=True))
    return [memo.get(w) or _stem_one(w) for w in words]


def _stem_one(word: str) -> str:
    with _stem_lock:
        return str(_stemmer().stemWord(word))


def matched_terms(terms: Mapping[str, str], text: str) -> tuple[str, ...]:
    """The query terms (``{stem: term}``, query order) whose stem is the stem of a word of
    `text` (stop words included, CJK as bigrams, as :func:`query_terms` splits it)."""
    if not terms:
        return ()
    words = query_terms(text, drop_stop_words=False)  # distinct already
    present = set(stem_words(words))
    return tuple(t for stem, t in terms.items() if stem in present)
