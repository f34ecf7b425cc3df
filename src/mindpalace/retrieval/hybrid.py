"""Hybrid recall: BM25 keyword search fused with vector search over every tier, scoped (seed 004).

Tiers are the kinds of search documents in the store: ``fact`` (long-term facts), ``message``
(session messages), ``step`` / ``info`` / ``snapshot`` (step records), ``history``
(consolidated history entries) and any other kind a component indexes. One query runs

1. ``store.keyword_search`` (FTS5 BM25, porter stemming, CJK bigrams, trigram fallback) and,
   when an embedder is configured, ``store.vector_search`` (exact cosine) — each for the top
   ``facts.recall_candidates`` documents of every scope searched;
2. fusion of the two lists: ``zscore`` (default; each list's scores standardised above the
   list's floor, then weighted and summed) or ``rrf`` (reciprocal rank fusion);
3. context scoring of session messages: a message also earns ``neighbor_weights[d-1]`` × the
   best fused score of the messages ``d`` turns before or after it — an answer is often the
   reply to the turn that matches the question (measured on LoCoMo dev conversations); the
   turn right after a matching question earns ``neighbor_reply_weight`` × its score instead;
4. with ``facts.rerank``, the best ``facts.rerank_depth`` candidates reordered by a learned
   linear ranker over the features the steps above computed (:mod:`mindpalace.retrieval.rerank`),
   before supersession places corrections above what they correct;
5. top-k, each hit saying its tier, the query terms it contains, its rank and score in each
   list and, when lifted by a neighbour, which one.

Every store call carries the scope (I10): a query for user A never reads user B's rows,
through keyword or vector search.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from mindpalace.retrieval import rerank
from mindpalace.retrieval.chunking import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP_TOKENS
from mindpalace.retrieval.embedding_sync import sentence_rows
from mindpalace.retrieval.fetch import (
    MESSAGE_KIND,
    NOT_STATING_ROLES,
    DocFacts,
    NeighbourCache,
    VectorCache,
    doc_facts,
    matched_terms_of,
    searchable_scopes,
    stem_words,
)
from mindpalace.retrieval.supersession import (
    CALENDAR,
    NAME,
    NUMBER,
    ROLE,
    TRAVEL,
    FollowupKey,
    amount_units,
    best_sentence,
    choose_corrections,
    find_followups,
    followup_texts,
    holder,
    identifiers,
    names_another,
    noun_values,
    said_sentences,
    same_subject,
    says_it_changed,
    subject_terms,
    value_kinds,
)
from mindpalace.retrieval.temporal import query_periods
from mindpalace.scope import Scope
from mindpalace.settings import FactSettings
from mindpalace.store.base import Document, SearchHit, Store
from mindpalace.store.textindex import query_terms
from mindpalace.textsafe import require_text

if TYPE_CHECKING:
    from mindpalace.providers.embed.base import Embedder

_SENTENCE_MEMO = 16_384  # sentence vectors a retriever remembers for follow-ups
_WARM_MAX_CHARS = 4_096  # longer statements' sentences are embedded when a query needs them
_FOLLOWUP_MEMO = 20_000  # follow-up answers (statement, sentence, extra, retrieved) kept per search generation
# (statement id, its sentence compared, the extra candidate's id, the retrieved statements' ids it
# may read) → its current value and that value's sentence vector, or None (see find_followups'
# `answers`)
_FollowupAnswers = dict[FollowupKey, "tuple[Document, np.ndarray] | None"]
_USES_MEMO = 50_000  # words whose top keyword hits follow-ups keep per search generation
_FLOOR_STD = 1e-6  # a list whose scores are all equal still contributes (each hit = 1 std)


@dataclass(frozen=True, slots=True)
class MatchReason:
    """Why a hit matched.

    Attributes:
        terms: query terms (stemmed comparison) that occur in the hit's text.
        keyword_rank / keyword_score: 1-based rank and BM25 score in the keyword list, or None.
        vector_rank / similarity: 1-based rank and cosine similarity in the vector list, or None.
        neighbor: ref of the neighbouring message whose score lifted this one, or None.
        working: True when the hit came from working memory (matched key or terms).
        date: True when its timestamp falls in a period the query names ("in May 2023").
        supersedes / superseded_by: ``<session>/<ref>`` of the older statement this one
            corrects / of the newer statement correcting this one (same speaker and user,
            near-identical subject by embedding similarity); ``current`` is False for the
            superseded one.
    """

    terms: tuple[str, ...] = ()
    keyword_rank: int | None = None
    keyword_score: float | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    neighbor: str | None = None
    working: bool = False
    date: bool = False
    supersedes: str | None = None
    superseded_by: str | None = None

    @property
    def current(self) -> bool:
        """False when a later statement on the same subject (same speaker) was found."""
        return self.superseded_by is None

    def __str__(self) -> str:
        parts = []
        if self.working:
            parts.append("working memory")
        if self.terms:
            parts.append("terms " + ", ".join(self.terms))
        if self.keyword_rank is not None:
            parts.append(f"bm25 #{self.keyword_rank} ({self.keyword_score:.2f})")
        if self.vector_rank is not None:
            parts.append(f"cosine #{self.vector_rank} ({self.similarity:.2f})")
        if self.neighbor is not None:
            parts.append(f"next to message {self.neighbor}")
        if self.date:
            parts.append("dated in the period the query names")
        if self.supersedes is not None:
            parts.append(f"newer than {self.supersedes} (same subject)")
        if self.superseded_by is not None:
            parts.append(f"superseded by {self.superseded_by}")
        return "; ".join(parts) or "no direct match"


@dataclass(frozen=True, slots=True)
class RetrievalHit:
    """One retrieved document.

    Attributes:
        tier: the document kind (``fact``, ``message``, ``step``, ``info``, ``snapshot``,
            ``history`` …).
        ref: the id inside the tier: fact id, message index, record name, entry cursor.
        text: the matched text.
        score: fused score (higher is better; comparable within one result list only).
        scope: the scope the item belongs to.
        why: :class:`MatchReason`.
        meta: the document's metadata (message timestamp / speaker, fact key …).
    """

    tier: str
    ref: str
    text: str
    score: float
    scope: Scope
    why: MatchReason
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True, eq=False)  # identity: list.index over candidates never compares documents
class _Candidate:
    doc: Document
    fused: float = 0.0
    final: float = 0.0
    kw: SearchHit | None = None
    vec: SearchHit | None = None
    neighbor: str | None = None
    date: bool = False
    supersedes: str | None = None
    superseded_by: str | None = None
    # a statement lifted to the score of the assistant reply right after it (the reply matched
    # the query, and it answers this statement): it matches the query through that reply
    answered: bool = False
    # the final score before the learned rerank gave it another place's score (None: not
    # reranked): supersession's score ratio asks how well it matched, not where it was placed
    unranked: float | None = None
    info: DocFacts = field(init=False)  # position, speaker, stamp … derived once per document

    def __post_init__(self) -> None:
        self.info = doc_facts(self.doc)


class HybridRetriever:
    """Keyword + vector search over the store's documents with fusion and message context.

    Args:
        store: the store protocol.
        embedder: None = keyword only (``embed.provider = "none"``).
        settings: ``facts`` settings (candidates, fusion, weights, neighbour weights).
        chunk_tokens / chunk_overlap_tokens: embedding windows of long documents (tokens;
            0 = the embedder's own window), see :mod:`mindpalace.retrieval.chunking`.
        context_turns: session messages are embedded after up to this many preceding
            messages (``embed.context_turns``, see :mod:`mindpalace.retrieval.embedding_sync`);
            context_after_question: only when the previous message asks (``embed.context_after``).
        sentence_min_chars: a long stated message's sentences get vector rows of their own
            (``embed.sentence_vectors_min_chars``, see
            :func:`~mindpalace.retrieval.embedding_sync.sentence_rows`); 0 = none.

    Vectors are kept in sync lazily: before a vector search, when the store's
    ``search_generation()`` moved since the last sync, documents lacking a vector for the
    embedder are embedded in batches (``retrieval.embedding_sync``), which also retires the
    vectors of a previous embedder once every document has a new one.
    """

    def __init__(
        self,
        store: Store,
        embedder: Embedder | None = None,
        settings: FactSettings | None = None,
        *,
        chunk_tokens: int = 0,
        chunk_overlap_tokens: int = DEFAULT_OVERLAP_TOKENS,
        context_turns: int = 0,
        context_after_question: bool = False,
        sentence_min_chars: int = 0,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings or FactSettings()
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap_tokens = chunk_overlap_tokens
        self.context_turns = context_turns
        self.context_after_question = context_after_question
        self.sentence_min_chars = sentence_min_chars
        self._synced: object = None
        self._synced_upto: int | None = None  # every document up to this id had a vector
        self._synced_appended_only: object = None  # store.append_only_generation() then
        self._sync_lock = threading.Lock()
        self._neighbours = NeighbourCache()
        self._vectors = VectorCache()
        # (scopes, kind, word) → the speaker key and whether it asks, of each of the word's top
        # keyword hits (any speaker: the count of each speaker is read off the same hits), valid
        # for one store search generation (follow-ups ask the same words again across queries)
        self._uses: dict[tuple[tuple[Scope, ...], str, str], list[tuple[tuple[object, ...], bool]]] = {}
        self._uses_generation: object = None
        # doc id → (_speaker_key, asks) of the documents those hits were, same generation
        self._doc_users: dict[int, tuple[tuple[object, ...], bool]] = {}
        self._uses_lock = threading.Lock()
        self._sentence_vectors: dict[tuple[str, str], np.ndarray] = {}  # (model, text) → vector
        # follow-up answers of one store search generation, per searched scopes (see
        # _FollowupAnswers: each step's current value and its sentence vector, or None)
        self._followups: dict[tuple[Scope, ...], _FollowupAnswers] = {}
        self._followups_generation: object = None
        # the scopes holding any document, per (scopes, kinds) asked, of one search generation
        self._searchable_memo: dict[tuple[tuple[Scope, ...], tuple[str, ...] | None], list[Scope]] = {}
        self._searchable_generation: object = None

    # -- embedding sync --------------------------------------------------------------------
    def read_only(self) -> HybridRetriever:
        """A search over the same store, embedder, settings and embedding layout (windows,
        preceding-turn context, sentence rows: what a stored vector is) that never computes a
        vector: its ``sync_embeddings`` returns 0, so documents not yet embedded are found by
        keyword only. For a pure read such as a prompt build; its caches are its own."""
        return _ReadOnlyRetriever(
            self.store, self.embedder, self.settings,
            chunk_tokens=self.chunk_tokens, chunk_overlap_tokens=self.chunk_overlap_tokens,
            context_turns=self.context_turns, context_after_question=self.context_after_question,
            sentence_min_chars=self.sentence_min_chars,
        )

    def sync_embeddings(self) -> int:
        """Embed documents that have no vector for the current embedder; returns how many.

        Cheap when nothing changed (one O(1) store read). Raises ProviderError if the
        embedder fails (vectors written so far are kept).

        With follow-ups on (and ``supersede_followup_sentences_at_sync``), the sentences that
        follow-ups compare of the statements embedded here are embedded too
        (:meth:`_warm_sentences`): index-time work, so that a recall embeds its query only.
        """
        return self._sync()[0]

    def _sync(self) -> tuple[int, object]:
        """:meth:`sync_embeddings`, plus the store's ``search_generation()`` read after it
        (before any document the query reads next, so a cache tagged with it holds nothing
        older than it): the one generation read of a query. Without an embedder nothing is
        read (None: the neighbour cache reads it if it is used). A subclass that overrides
        :meth:`sync_embeddings` (e.g. one that must not write) has its override run, and the
        caches read the generation themselves."""
        if type(self).sync_embeddings is not HybridRetriever.sync_embeddings:
            return self.sync_embeddings(), None
        if self.embedder is None:
            return 0, None
        with self._sync_lock:
            generation = self.store.search_generation()
            if generation == self._synced:
                return 0, generation
            from mindpalace.retrieval.embedding_sync import sync_embeddings, sync_new_embeddings

            batch = max(64, self.embedder.batch_size)
            s = self.settings
            warm = (
                self._warm_sentences
                if s.supersede_followups and s.supersede_similarity < 1.0
                and s.supersede_followup_sentences_at_sync else None
            )
            appended_only = self.store.append_only_generation()
            if self._synced_upto is not None and appended_only == self._synced_appended_only:
                # Only documents were added since the last full sync: embed those above it.
                embedded, self._synced_upto = sync_new_embeddings(
                    self.store, self.embedder, self._synced_upto, batch=batch,
                    chunk_tokens=self.chunk_tokens, overlap_tokens=self.chunk_overlap_tokens,
                    context_turns=self.context_turns,
                    context_after_question=self.context_after_question, embedded=warm,
                    sentence_min_chars=self.sentence_min_chars,
                )
            else:
                upto = self.store.last_document_id()  # read first: later ids are above it
                embedded = sync_embeddings(
                    self.store, self.embedder, batch=batch,
                    chunk_tokens=self.chunk_tokens, overlap_tokens=self.chunk_overlap_tokens,
                    context_turns=self.context_turns,
                    context_after_question=self.context_after_question, embedded=warm,
                    sentence_min_chars=self.sentence_min_chars,
                ).embedded
                self._synced_upto, self._synced_appended_only = upto, appended_only
            self._synced = generation = self.store.search_generation()
            return embedded, generation

    # -- search ----------------------------------------------------------------------------
    def search(
        self,
        scopes: Scope | Sequence[Scope],
        query: str,
        *,
        k: int = 5,
        kinds: Sequence[str] | None = None,
        skip: Callable[[Document], bool] | None = None,
        statement_scale: bool = False,
    ) -> list[RetrievalHit]:
        """Top-`k` documents for `query` in `scopes` (ANY fields widen a scope; several scopes
        are searched and merged).

        Args:
            scopes: one scope or several; every store call is filtered by it.
            query: free text (any language; CJK is matched by bigrams).
            k: hits returned (≥ 0).
            kinds: restrict to these tiers (document kinds); None = all.
            skip: documents never returned (True = left out): dropped from the keyword and
                vector lists before fusion and from the neighbours fetched for context
                credit, e.g. the message the query was taken from, which matches itself best
                and would set every list's scale. None = none.
            statement_scale: fusion puts each list on the scale of its statements: the list's
                floor, spread and standout are those of the hits that do not only ask (text
                not ending in a question mark), and a question is scored on that scale (not
                below 0). Earlier questions worded like the query then do not flatten the
                statements' scores, and still lend neighbour credit to the replies next to
                them. Used with ``fusion`` ``zscore`` / ``adaptive``; False = every hit sets
                the scale (with fewer than two statements in a list, too).
        Returns:
            Hits best first, at most `k`.
        Raises:
            InvalidTextError: `query` is not storable text. ProviderError: the embedder failed.
        """
        require_text("query", query)
        scope_list = [scopes] if isinstance(scopes, Scope) else list(scopes)
        if k <= 0 or not query.strip():
            return []
        n = max(k, self.settings.recall_candidates)
        keyword: list[SearchHit] = []
        vector: list[SearchHit] = []
        qvec = list_vec = np.zeros(0)
        # One generation read per query, shared by the embedding sync, the searchable scopes,
        # the neighbour cache and the vector cache; read before any document the query reads.
        _, generation = self._sync()
        searchable = self._searchable(scope_list, kinds, generation)
        for scope in searchable:
            keyword += self.store.keyword_search(
                scope, query, k=n, kinds=kinds, max_df_ratio=self.settings.keyword_max_df_ratio
            )
        if self.embedder is not None:
            qvec, list_vec = self._query_vectors(query, speaker_names(h.doc for h in keyword))
            for scope in searchable:
                vector += self.store.vector_search(scope, list_vec, self.embedder.model_id, k=n, kinds=kinds)
        if skip is not None:
            keyword = [h for h in keyword if not skip(h.doc)]
            vector = [h for h in vector if not skip(h.doc)]
        keyword = _rerank(keyword)
        vector = _rerank(vector)
        cands = self._fuse(keyword, vector, statement_scale=statement_scale)
        window = max(k, self.settings.supersede_window)
        reranks = self.settings.rerank or rerank.is_recording()
        # fetched neighbours that cannot reach the best `window` are left out (their facts
        # kept); with the learned rerank, those that cannot reach the candidates it reorders
        # (any of them may land in the best `window`)
        reach = max(window, self._rerank_depth()) if reranks else window
        left_out: list[tuple[DocFacts, float]] = []
        if self.settings.neighbor_weights and (kinds is None or MESSAGE_KIND in kinds):
            left_out = self._add_message_context(cands, generation, keep=reach)
        else:
            for c in cands.values():
                c.final = c.fused
        if skip is not None:  # a neighbour fetched for context credit is left out the same way
            for doc_id in [i for i, c in cands.items() if skip(c.doc)]:
                del cands[doc_id]
        if self.settings.speaker_boost:
            _boost_named_speaker(cands, query, self.settings.speaker_boost, left_out)
        dated_left_out = False
        if self.settings.date_boost:
            dated_left_out = _boost_named_dates(
                cands, query, self.settings.date_boost, self.settings.date_slack_days, left_out
            )
        if self.settings.statement_above_reply and (kinds is None or MESSAGE_KIND in kinds):
            self._lift_answered(cands, left_out, generation, window, skip)
        if reranks:
            # before supersession: a correction is still placed above what it corrects after
            self._learned_rerank(
                cands, query, list_vec if self.embedder is not None else None, generation, left_out
            )
        # A named period, or a question in the past tense, asks about then, not the current value.
        about_then = dated_left_out or any(c.date for c in cands.values()) or _asks_about_past(query)
        supersede = self.settings.supersede_similarity < 1.0 and self.embedder is not None and not about_then
        ranked = _best_first(cands.values(), window if supersede else k)  # the rest is never read
        if supersede:
            named = identifiers(query)  # "db-7" in the query: "db-8 has …" corrects nothing of it
            ranked = self._supersede(ranked, window, qvec, generation, named, list_vec is not qvec)
            if self.settings.supersede_followups:
                ranked = self._follow_up(ranked, qvec, searchable, generation, named, kinds)
            ranked = _newest_first(ranked)
        best = ranked[:k]
        terms = stems(query_terms(query))
        return [self._hit(c, terms) for c in best]

    def _rerank_depth(self) -> int:
        """The candidates the learned rerank reorders (``facts.rerank_depth``; 0 = the shipped
        weights' depth)."""
        return self.settings.rerank_depth or rerank.shipped_ranker().depth

    def _learned_rerank(
        self, cands: dict[int, _Candidate], query: str, list_vec: np.ndarray | None, generation: object,
        left_out: Sequence[tuple[DocFacts, float]] = (),
    ) -> None:
        """Reorder the best ``facts.rerank_depth`` candidates by the shipped linear ranker
        (:mod:`mindpalace.retrieval.rerank`): each takes the ``final`` score of the position it
        lands on, so the candidates below, and the fused scale, are unchanged (supersession's
        score ratio still reads each one's own score, ``unranked``). With the stage
        off the rows are only recorded (inside :func:`~mindpalace.retrieval.rerank.recording`).
        `list_vec`: the vector the vector list searched (None: no embedder); `left_out`: the
        neighbours not built (:func:`_cannot_reach`), whose speakers count in the query-wide
        read of the one speaker the query names, as in :func:`_boost_named_speaker`."""
        top = _best_first(cands.values(), self._rerank_depth())
        if len(top) < 2:
            return
        rows = self._rerank_rows(top, cands, query, list_vec, generation, left_out)
        rerank.record(query, [c.doc for c in top], rows)
        if not self.settings.rerank:
            return  # recording only: the weights are not read (training writes new ones)
        finals = [c.final for c in top]  # best first
        order = rerank.shipped_ranker().order(rows).tolist()
        for c, score in zip((top[i] for i in order), finals, strict=True):
            c.unranked, c.final = c.final, score

    def _rerank_rows(
        self, top: list[_Candidate], cands: dict[int, _Candidate], query: str,
        list_vec: np.ndarray | None, generation: object,
        left_out: Sequence[tuple[DocFacts, float]] = (),
    ) -> np.ndarray:
        """(len(top), len(FEATURES)) features of `top` (best first), in
        :data:`~mindpalace.retrieval.rerank.FEATURES` order."""
        n = len(top)
        best_kw = max((c.kw.score for c in cands.values() if c.kw is not None), default=0.0)
        cosine = np.zeros(n)
        if list_vec is not None and self.embedder is not None and list_vec.size:
            # neighbours lifted into the top are in no list: their stored vectors (cached, and
            # read again by supersession right after)
            vectors = self._vectors.get(self.store, [c.doc.id for c in top], self.embedder.model_id, generation=generation)
            cosine = np.array([float(vectors[c.doc.id] @ list_vec) if c.doc.id in vectors else 0.0 for c in top])
        finals = np.array([c.final for c in top])
        scale = max(float(finals.max()), 1e-12)
        fused = np.array([c.fused for c in top])
        terms = list(stems(query_terms(query)))
        plain, weighted = rerank.idf_coverage(terms, [c.info.stems() for c in top])
        words = set(query_terms(query, drop_stop_words=False))
        infos = [c.info for c in cands.values()] + [info for info, _ in left_out]
        named = {i.speaker for i in infos if i.named} & words
        columns = [
            [c.kw.score / best_kw if c.kw is not None and best_kw > 0 else 0.0 for c in top],
            [1.0 / c.kw.rank if c.kw is not None else 0.0 for c in top],
            cosine,
            [1.0 / c.vec.rank if c.vec is not None else 0.0 for c in top],
            fused / scale,
            finals / scale,
            np.maximum(finals - fused, 0.0) / scale,
            [float(c.neighbor is not None) for c in top],
            plain,
            weighted,
            [float(len(named) == 1 and c.info.message and c.info.speaker in named) for c in top],
            [float(c.date) for c in top],
            [float(asks(c.doc.text)) for c in top],
            rerank.recency([c.info.stamp for c in top]),
        ]
        return np.column_stack([np.asarray(col, dtype=np.float64) for col in columns])

    def _query_vectors(self, query: str, names: set[str]) -> tuple[np.ndarray, np.ndarray]:
        """(the query's vector for supersession, the vector searched for the vector list).

        The first embeds the query without the speaker `names` (``dense_without_speakers``):
        supersession compares statements with what was asked. The second embeds
        :func:`dense_query`'s text (also in statement form with ``dense_as_statement``); when
        the two texts are the same it is the same vector (one embedding), else both are
        embedded in one provider call."""
        assert self.embedder is not None
        asked, listed = query_texts(query, names, self.settings)
        if listed == asked:
            vec = self.embedder.embed_query(asked)
            return vec, vec
        both = self.embedder.embed_queries([asked, listed])
        return both[0], both[1]

    def _searchable(
        self, scopes: list[Scope], kinds: Sequence[str] | None, generation: object
    ) -> list[Scope]:
        """:func:`~mindpalace.retrieval.fetch.searchable_scopes`, remembered while the store's
        search `generation` stays (a document added or removed anywhere moves it; None: not
        remembered): recall after recall asks the same scopes (one indexed read each)."""
        if generation is None or len(scopes) <= 1:
            return searchable_scopes(self.store, scopes, kinds)
        key = (tuple(scopes), tuple(kinds) if kinds is not None else None)
        with self._uses_lock:
            if self._searchable_generation != generation:
                self._searchable_memo, self._searchable_generation = {}, generation
            held = self._searchable_memo.get(key)
        if held is None:
            held = searchable_scopes(self.store, scopes, kinds)
            with self._uses_lock:
                if self._searchable_generation == generation and len(self._searchable_memo) < 256:
                    self._searchable_memo[key] = held
        return list(held)

    def _fuse(
        self, keyword: list[SearchHit], vector: list[SearchHit], *, statement_scale: bool = False
    ) -> dict[int, _Candidate]:
        s = self.settings
        cands: dict[int, _Candidate] = {}
        for hits, weight, is_kw in ((keyword, s.keyword_weight, True), (vector, s.vector_weight, False)):
            if not hits or weight == 0:
                values: list[float] | None = None  # still remember the rank for the explanation
            else:
                basis = hits
                if statement_scale and s.fusion != "rrf":  # the scale is the statements' (see search)
                    stated = [h for h in hits if not asks(h.doc.text)]
                    basis = stated if len(stated) >= 2 else hits
                contrib = _rrf(hits, s.rrf_k) if s.fusion == "rrf" else _above_floor(hits, basis)
                if s.fusion == "adaptive":  # a list whose best hits stand out from it counts more
                    contrib = contrib * _standout(basis)
                values = contrib.tolist()  # the same doubles: weight × value rounds the same
            for i, h in enumerate(hits):
                c = cands.get(h.doc.id)
                if c is None:
                    c = cands[h.doc.id] = _Candidate(h.doc)
                if is_kw:
                    c.kw = h
                else:
                    c.vec = h
                if values is not None:
                    c.fused += weight * values[i]
        return cands

    def _add_message_context(
        self, cands: dict[int, _Candidate], generation: object = None, keep: int | None = None
    ) -> list[tuple[DocFacts, float]]:
        """final = fused + Σ_d w_d · max(fused of the messages d before / after), same session.

        Messages next to a lender that matched nothing are fetched and become candidates too,
        except, when `keep` is given, those that cannot rank among the best `keep` whatever
        the speaker and date boosts do (:func:`_cannot_reach`): those are returned instead, as
        (facts, final), for the boosts' query-wide reads (the one named speaker, the newest
        timestamp, a dated candidate). `generation`: the store's search generation read for
        this query (None = the neighbour cache reads it).
        """
        weights = self.settings.neighbor_weights
        # Positions are (session number, index), numbered per query; a session is found by its
        # scope's values (a tuple of strings hashes in C, a Scope in Python), read of the
        # candidate's remembered DocFacts like the index itself.
        session_of: dict[tuple[object, ...], int] = {}
        scopes: list[Scope] = []
        placed: list[_Candidate] = []
        sids: list[int] = []
        index: list[int] = []
        for c in cands.values():
            c.final = c.fused
            info = c.info
            if info.position >= 0:
                sid = session_of.get(info.scope_key)
                if sid is None:
                    sid = session_of[info.scope_key] = len(scopes)
                    scopes.append(c.doc.scope)
                placed.append(c)
                sids.append(sid)
                index.append(info.position)
        if not placed:
            return []
        lenders = _Lenders(
            placed, sids, index, self.settings.neighbor_from == "questions",
            reply_weight=self.settings.neighbor_reply_weight,
        )
        # Neighbours that matched nothing themselves are fetched so they can be lifted too
        # (fused 0: they lend nothing, so the lenders stay those found above).
        wanted = {scopes[sid]: refs for sid, refs in lenders.missing_refs(len(weights))}
        infos = self._neighbours.facts(self.store, MESSAGE_KIND, wanted, generation=generation)
        finals, source = lenders.credit(
            placed, [session_of[i.scope_key] for i in infos], [i.position for i in infos], weights
        )
        out = (
            _cannot_reach(cands.values(), finals, keep, self.settings)
            if keep is not None and finals else None
        )
        if out is None:
            left_out: list[tuple[DocFacts, float]] = []
            reach: Iterable[int] = range(len(infos))
        else:  # most neighbours: their facts and finals only, no candidate built
            left = np.array(out, dtype=bool)
            left_out = [(infos[j], finals[j]) for j in np.flatnonzero(left).tolist()]
            reach = np.flatnonzero(~left).tolist()
        for j in reach:
            doc = infos[j].doc
            cand = cands[doc.id] = _Candidate(doc)  # its facts: the memo's, as `info`
            cand.final = finals[j]
            if source[j] >= 0:  # fused 0: any lift exceeds it
                cand.neighbor = placed[source[j]].doc.ref
        return left_out

    def _lift_answered(
        self, cands: dict[int, _Candidate], left_out: list[tuple[DocFacts, float]], generation: object,
        window: int, skip: Callable[[Document], bool] | None,
    ) -> None:
        """A statement ranks at least as high as the assistant reply right after it (``final``
        raised to the reply's; ties go to the older document, the statement), and is marked
        ``answered`` (see :func:`_answers_query`), its ``neighbor`` the reply's ref.

        A reply answers the message before it: when that message states something (not a
        question, not assistant, tool or system text, :func:`_states`), the fact the reply talks
        around is the statement's, and a long reply that repeats the subject's words matches a
        paraphrased query better than the short statement itself does. Only the replies among
        the best `window` candidates lift (the rest is never read). The statement is taken from
        the candidates, from the neighbours `left_out` by the context credit, or read from the
        store (one read for all of them, through the neighbour cache of `generation`); one that
        `skip` leaves out is not lifted. A reply after a question is left alone: it holds the
        answer itself; so is a reply shorter than ``_REPLY_LENGTH_RATIO`` × the statement (a turn
        of its own, as between two people, holds its own facts). Changes `cands` in place (statements read from the store are added).
        """
        top = _best_first(cands.values(), window)
        replies = [
            c for c in top
            if c.info.position > 0 and c.final > 0 and c.doc.meta.get("role") == _REPLY_ROLE
        ]
        if not replies:
            return
        at = {(c.info.scope_key, c.info.position): c for c in cands.values() if c.info.position >= 0}
        aside = {(f.scope_key, f.position): f for f, _ in left_out}
        wanted: dict[Scope, list[str]] = defaultdict(list)
        for r in replies:
            key = (r.info.scope_key, r.info.position - 1)
            if key not in at and key not in aside:
                wanted[r.doc.scope].append(str(r.info.position - 1))
        if wanted:
            for f in self._neighbours.facts(self.store, MESSAGE_KIND, wanted, generation=generation):
                aside[(f.scope_key, f.position)] = f
        for r in replies:
            key = (r.info.scope_key, r.info.position - 1)
            before = at.get(key)
            facts = aside.get(key) if before is None else None
            doc = before.doc if before is not None else facts.doc if facts is not None else None
            # only a statement the reply answers and outgrows is lifted (or read in as a candidate)
            if doc is None or not _states(doc) or len(r.doc.text) < _REPLY_LENGTH_RATIO * len(doc.text):
                continue
            if before is None:
                if skip is not None and skip(doc):
                    continue
                before = at[key] = cands[doc.id] = _Candidate(doc)
            if before.final < r.final:
                before.final = r.final
                before.answered = True
                before.neighbor = r.doc.ref  # the explanation: lifted by the message next to it

    def _supersede(
        self, ranked: list[_Candidate], window: int, qvec: np.ndarray, generation: object = None,
        named: frozenset[str] = frozenset(), own_similarity: bool = False,
    ) -> list[_Candidate]:
        """Newer statements on the same subject move above the older ones they correct.

        A statement's similarity to the query is its cosine in the vector list, or with
        `own_similarity` (the list searched another text than `qvec`'s, see
        :meth:`_query_vectors`) its stored vector's cosine with `qvec` (−inf when it is not in
        the vector list, as without).

        Among the top `window` candidates, a document B supersedes an older document A when
        both come from the same user scope and speaker (message ``name``, else ``role``; or
        the same kind for other tiers), both match the query themselves (keyword or vector
        list, not only through a neighbour), B is later (timestamp, then insertion order), the
        two are the same subject and B matches the query nearly as well — the choice is
        :func:`mindpalace.retrieval.supersession.choose_corrections` (cosine of the vectors of
        their sentences closest to the query — a sentence pasted verbatim into several of the
        speaker's statements passed over — at least ``supersede_similarity``, a property of
        the embedder: 0.5 measured for the default ``use``, and a subject word in common
        (:func:`_share_words`); or both among the speaker's ``supersede_answers`` statements closest to the
        query, each at least ``supersede_answer_share`` of the best one's query cosine, at
        ``supersede_answer_similarity``; never two statements of different holders, "I live
        in Lisbon" and "My brother lives in Paris" (:func:`~mindpalace.retrieval.supersession.
        holder`); score at least ``supersede_min_score_ratio`` × A's). B then ranks directly
        above A (if it was below),
        A is marked ``superseded_by`` B. Questions, assistant replies, tool output and system
        text take no part (:func:`_states`): they state no speaker's fact. `named`: the
        query's :func:`~mindpalace.retrieval.supersession.identifiers`; a B that names another
        thing where A names the one the query asks about corrects nothing of A
        (:func:`~mindpalace.retrieval.supersession.names_another`).
        """
        assert self.embedder is not None
        top = ranked[:window]
        vectors = self._vectors.get(
            self.store, [c.doc.id for c in top], self.embedder.model_id, generation=generation
        )
        # a question states nothing, so it neither corrects nor is corrected; a document that
        # ranks only through its neighbour does not answer the query itself
        present = [
            c for c in top
            if c.doc.id in vectors and _states(c.doc) and _answers_query(c)
        ]
        groups: dict[tuple[object, ...], list[_Candidate]] = defaultdict(list)
        for c in present:
            groups[_speaker_key(c.doc)].append(c)
        newer_of: dict[int, _Candidate] = {}
        for members in groups.values():
            if len(members) < 2:
                continue
            members.sort(key=_time_key)
            # each statement is compared on its sentence closest to the query — not on the whole
            # message, whose vector also holds an aside, a pasted text or an attachment note
            # ("[shares a photo: a photo of …]") that makes unrelated messages look alike;
            # a sentence found verbatim in another of the speaker's statements is passed over
            texts = [c.doc.text for c in members]
            counts = Counter(p for t in texts for p in set(said_sentences(t)))
            repeated = frozenset(p for p, n in counts.items() if n > 1)
            compared = [best_sentence(t, qvec, self._embed_sentences, repeated) for t in texts]
            mat = self._compared_vectors(members, compared, vectors)
            sims = mat @ mat.T
            asked = [_asked_similarity(c, vectors, qvec) if own_similarity else _query_similarity(c) for c in members]
            # a statement lifted by its reply may be in no list: its compared sentence's cosine
            asked = [float(mat[i] @ qvec) if c.answered and c.vec is None else q
                     for i, (c, q) in enumerate(zip(members, asked, strict=True))]
            chosen = _group_corrections(
                compared, sims,
                asked,
                [c.final if c.unranked is None else c.unranked for c in members],
                members[0].doc, self.settings,
            )
            for i, j in chosen.items():
                if not names_another(named, texts[i], texts[j]):
                    newer_of[members[i].doc.id] = members[j]
        if not newer_of:
            return ranked
        order = [c for c in ranked]
        for older_id, newer in newer_of.items():
            older = next(c for c in top if c.doc.id == older_id)
            older.superseded_by = _label(newer.doc)
            if newer.supersedes is None:
                newer.supersedes = _label(older.doc)
            i, j = order.index(older), order.index(newer)
            if j > i:  # the correction ranks below what it corrects: place it just above
                order.pop(j)
                order.insert(i, newer)
                newer.final = max(newer.final, older.final)
        return order

    def _compared_vectors(
        self, members: list[_Candidate], compared: list[str], stored: dict[int, np.ndarray]
    ) -> np.ndarray:
        """(len(members), dim) vectors of each member's `compared` sentence: a statement compared
        whole whose stored vector is the embedder's vector of exactly its text
        (:meth:`_stored_is_text_vector`) uses that one (`stored`, by document id), the others
        are embedded (:meth:`_embed_sentences`): at 100k facts most candidates of a query are
        new to the sentence memo, and embedding them again was most of the query's time."""
        rows: list[np.ndarray | None] = [
            stored[c.doc.id] if text == c.doc.text and self._stored_is_text_vector(c.doc) else None
            for c, text in zip(members, compared, strict=True)
        ]
        missing = [i for i, v in enumerate(rows) if v is None]
        if missing:
            for i, v in zip(missing, self._embed_sentences([compared[i] for i in missing]), strict=True):
                rows[i] = v
        return np.stack([v for v in rows if v is not None])

    def _stored_is_text_vector(self, doc: Document) -> bool:
        """Whether `doc`'s stored vector (of the embedder's model) is the embedder's vector of
        its text alone: one embedding window (at most the window's token count in characters:
        never split, see :func:`~mindpalace.retrieval.chunking.chunk_text`; a long-term fact is
        embedded whole at write time) and no preceding-turn context (``context_turns``, given
        to session messages only) and no sentence rows (``sentence_min_chars``)."""
        if doc.kind == MESSAGE_KIND and self.context_turns:
            return False
        assert self.embedder is not None
        window = self.chunk_tokens or self.embedder.chunk_tokens or DEFAULT_CHUNK_TOKENS
        # a message with sentence rows is stored as the mean of its text's and sentences' vectors
        return len(doc.text) <= window and not sentence_rows(doc, self.sentence_min_chars, 1)

    def _follow_up(
        self, ranked: list[_Candidate], qvec: np.ndarray, scopes: Sequence[Scope], generation: object = None,
        named: frozenset[str] = frozenset(), kinds: Sequence[str] | None = None,
    ) -> list[_Candidate]:
        """Later statements on the same subject that the query did not reach rank directly
        above the retrieved statement they update (:func:`~mindpalace.retrieval.supersession.
        find_followups`): the best ``supersede_followups`` messages that match the query
        themselves and state something (no question; not an assistant reply, tool output or
        system text — those talk about the speakers' facts, they do not update them) are the
        anchors (when :meth:`_supersede` already marked one, its choice is one more candidate,
        replaced by a closer statement the search finds); a follow-up's own follow-ups are
        looked for up to ``supersede_followup_depth`` steps; the search reads only `scopes`
        (I10); the vector follow-up also reads the statements this list retrieved (a long
        message holding an update as an aside is far from the anchor as a whole, and no
        neighbour of it). The anchor is marked ``superseded_by``. `generation`: the store's search
        generation of this query: the speaker's word counts and each step's answer are
        remembered while it stays (None: not remembered). Sentence vectors are remembered
        (:meth:`_embed_sentences`). `named`: as in :meth:`_supersede` — a follow-up naming
        another thing than the one the query and the anchor name is dropped."""
        assert self.embedder is not None
        s = self.settings
        # the retrieved statements: the best are the anchors, all are vector follow-up candidates
        stating = [c for c in ranked if c.doc.kind == MESSAGE_KIND and _answers_query(c) and _states(c.doc)]
        anchors = stating[: s.supersede_followups]
        if not anchors:
            return ranked
        by_label = {_label(c.doc): c for c in ranked}
        # what _supersede chose among the retrieved statements is one more candidate, compared
        # with the later statements found from the anchor's subject words on the same terms
        known = {
            c.doc.id: by_label[c.superseded_by].doc for c in anchors
            if c.superseded_by is not None and c.superseded_by in by_label
        }

        # the anchors' first searches, read together (one keyword_search_many per scope and
        # kind): (kind, terms) → the hits of each scope, as keyword_search gives them
        searched: dict[tuple[str, str], list[list[SearchHit]]] = {}

        def prefetch_search(queries: Sequence[tuple[Document, str]]) -> None:
            by_kind: dict[str, list[str]] = defaultdict(list)
            for anchor, terms in queries:
                if (anchor.kind, terms) not in searched and terms not in by_kind[anchor.kind]:
                    by_kind[anchor.kind].append(terms)
            for kind, texts in by_kind.items():
                per_scope = [
                    self.store.keyword_search_many(scope, texts, k=s.supersede_followup_candidates, kinds=[kind])
                    for scope in scopes
                ]
                for i, terms in enumerate(texts):
                    searched[(kind, terms)] = [hits[i] for hits in per_scope]

        def search(anchor: Document, terms: str) -> list[Document]:
            a = anchor.scope
            lists = searched.get((anchor.kind, terms))
            if lists is None:
                lists = [
                    self.store.keyword_search(scope, terms, k=s.supersede_followup_candidates, kinds=[anchor.kind])
                    for scope in scopes
                ]
            docs: list[Document] = []
            for hits in lists:
                for h in hits:
                    d = h.doc.scope
                    if (d.tenant, d.user, d.agent) == (a.tenant, a.user, a.agent):
                        docs.append(h.doc)
            return docs

        where = tuple(scopes)
        assert self.embedder is not None
        model = self.embedder.model_id

        def neighbours(doc: Document, vector: np.ndarray) -> list[Document]:
            # the nearest documents of `doc`'s user scope to one of its sentences (the vector
            # follow-up; filtered by speaker and time in find_followups): 4x the candidates, as
            # a long message's whole vector sits farther from one of its sentences. The search's
            # own `kinds`, filtered here: the store keeps one vector index per kinds, and a
            # narrower one would build a second copy of the scope's vectors
            a = doc.scope
            return [
                h.doc for scope in scopes
                for h in self.store.vector_search(scope, vector, model, k=4 * s.supersede_followup_candidates,
                                                  kinds=kinds)
                if h.doc.kind == doc.kind
                and (h.doc.scope.tenant, h.doc.scope.user, h.doc.scope.agent) == (a.tenant, a.user, a.agent)
            ]

        def uses(anchor: Document, words: Sequence[str]) -> list[int]:
            # the speaker's statements containing each word, counted among the word's top
            # keyword hits (see _word_users)
            key = _speaker_key(anchor)
            return [
                sum(1 for who, asking in hits if who == key and not asking)
                for hits in self._word_users(scopes, anchor.kind, words, generation)
            ]

        answers: _FollowupAnswers | None = None  # each step's answer, while the store stays
        if generation is not None:
            with self._uses_lock:
                if self._followups_generation != generation:
                    self._followups, self._followups_generation = {}, generation
                if sum(map(len, self._followups.values())) >= _FOLLOWUP_MEMO:
                    self._followups = {}
                answers = self._followups.setdefault(where, {})
        found = find_followups(
            [c.doc for c in anchors], qvec, search=search,
            same_speaker=lambda a, b: _speaker_key(a) == _speaker_key(b),
            later=lambda a, b: _doc_time_key(a) < _doc_time_key(b),
            states=lambda d: not asks(d.text), embed=self._embed_sentences,
            similarity=s.supersede_followup_similarity,
            uses=uses, max_uses=s.supersede_followup_max_uses, known=known,
            depth=s.supersede_followup_depth, answers=answers,
            speaker_terms=lambda d: query_terms(_speaker(d)),
            # the anchors' word counts in one read: remembered for the generation, so `uses`
            # finds them (without a generation nothing is remembered: no prefetch)
            prefetch_uses=None if generation is None else lambda asked: self._prefetch_word_users(
                scopes, asked, generation),
            prefetch_search=prefetch_search,
            neighbours=neighbours if s.supersede_followup_vector_similarity < 1.0 else None,
            vector_similarity=s.supersede_followup_vector_similarity,
            retrieved=[c.doc for c in stating],
        )
        if not found:
            return ranked
        order = list(ranked)
        by_id = {c.doc.id: c for c in order}
        for anchor in anchors:
            doc = found.get(anchor.doc.id)
            if doc is None or _label(doc) == anchor.superseded_by or names_another(named, anchor.doc.text, doc.text):
                continue
            if anchor.superseded_by is not None:  # a closer one replaces _supersede's choice
                previous = by_label.get(anchor.superseded_by)
                if previous is not None and previous.supersedes == _label(anchor.doc):
                    previous.supersedes = None
            newer = by_id.get(doc.id)
            if newer is None:
                newer = by_id[doc.id] = _Candidate(doc)
                order.insert(order.index(anchor), newer)
            elif order.index(newer) > order.index(anchor):
                order.remove(newer)
                order.insert(order.index(anchor), newer)
            newer.final = max(newer.final, anchor.final)
            anchor.superseded_by = _label(doc)
            if newer.supersedes is None:
                newer.supersedes = _label(anchor.doc)
        return order

    def _prefetch_word_users(
        self, scopes: Sequence[Scope], asked: Sequence[tuple[Document, Sequence[str]]], generation: object
    ) -> None:
        """:meth:`_word_users` of every anchor's words at once, per kind (remembered for
        `generation`, where the anchors' own calls then find them)."""
        by_kind: dict[str, list[str]] = defaultdict(list)
        for anchor, words in asked:
            by_kind[anchor.kind] += words
        for kind, words in by_kind.items():
            self._word_users(scopes, kind, list(dict.fromkeys(words)), generation)

    def _word_users(
        self, scopes: Sequence[Scope], kind: str, words: Sequence[str], generation: object
    ) -> list[list[tuple[tuple[object, ...], bool]]]:
        """Per word, the speaker key and whether it asks of each of the word's top
        ``4 · (supersede_followup_max_uses + 1)`` keyword hits of `kind` in `scopes` (BM25 puts
        the short statements of a frequent word first, so that many hits see past max_uses of
        one speaker's). Remembered per (scopes, kind, word) while the store's search
        `generation` stays (None: not remembered), for every speaker at once; the words not
        remembered are searched together (one store read per scope, not one per word)."""
        where = tuple(scopes)
        found: dict[str, list[tuple[tuple[object, ...], bool]]] = {}
        users: dict[int, tuple[tuple[object, ...], bool]] = {}  # per document, this call only
        if generation is not None:
            with self._uses_lock:
                if self._uses_generation != generation:
                    self._uses, self._doc_users, self._uses_generation = {}, {}, generation
                users = self._doc_users  # a document's speaker and text stay with the generation
                for w in words:
                    held = self._uses.get((where, kind, w))
                    if held is not None:
                        found[w] = held
        missing = [w for w in dict.fromkeys(words) if w not in found]
        if missing:
            reach = 4 * (self.settings.supersede_followup_max_uses + 1)
            fresh: dict[str, list[tuple[tuple[object, ...], bool]]] = {w: [] for w in missing}
            for scope in scopes:
                lists = self.store.keyword_search_many(scope, missing, k=reach, kinds=[kind])
                for w, hits in zip(missing, lists, strict=True):
                    fresh[w] += [_user_of(h.doc, users) for h in hits]
            found.update(fresh)
            if generation is not None:
                with self._uses_lock:
                    if self._uses_generation == generation:
                        if len(self._uses) + len(fresh) > _USES_MEMO:
                            self._uses = {}
                        if len(self._doc_users) > _USES_MEMO:
                            self._doc_users = {}
                        self._uses.update(((where, kind, w), h) for w, h in fresh.items())
        return [found[w] for w in words]

    def _warm_sentences(self, docs: list[Document]) -> None:
        """Embed into the sentence memo the :func:`~mindpalace.retrieval.supersession.
        followup_texts` of the statements among `docs` (just given vectors by the sync):
        messages that state something (:func:`_states`) of at most ``_WARM_MAX_CHARS``
        characters. One embed call per sync batch; nothing when the memo has no room for them
        (it is never emptied for this: what is not held is embedded when a query needs it)."""
        assert self.embedder is not None
        texts = [
            t for d in docs
            if d.kind == MESSAGE_KIND and len(d.text) <= _WARM_MAX_CHARS and _states(d)
            for t in followup_texts(d.text)
        ]
        model = self.embedder.model_id
        memo = self._sentence_vectors
        missing = [t for t in dict.fromkeys(texts) if (model, t) not in memo]
        if not missing or len(memo) + len(missing) > _SENTENCE_MEMO:
            return
        for t, v in zip(missing, self.embedder.embed(missing), strict=True):
            memo[(model, t)] = v

    def _embed_sentences(self, texts: list[str]) -> np.ndarray:
        """The embedder's (len(texts), dim) vectors of `texts`, each text embedded once per
        retriever (up to ``_SENTENCE_MEMO`` texts, then forgotten at once): follow-ups compare
        the same statements' sentences query after query, and embedding is the cost of it."""
        assert self.embedder is not None
        if not texts:
            return self.embedder.embed(texts)
        model = self.embedder.model_id
        memo = self._sentence_vectors
        vectors = {t: memo[(model, t)] for t in texts if (model, t) in memo}
        missing = [t for t in dict.fromkeys(texts) if t not in vectors]
        if missing:
            if len(memo) + len(missing) > _SENTENCE_MEMO:
                memo.clear()
            for t, v in zip(missing, self.embedder.embed(missing), strict=True):
                memo[(model, t)] = vectors[t] = v
        return np.stack([vectors[t] for t in texts])

    def _hit(self, c: _Candidate, terms: dict[str, str]) -> RetrievalHit:
        doc = c.doc
        why = MatchReason(
            terms=matched_terms_of(terms, c.info),
            keyword_rank=c.kw.rank if c.kw else None,
            keyword_score=c.kw.score if c.kw else None,
            vector_rank=c.vec.rank if c.vec else None,
            similarity=c.vec.score if c.vec else None,
            neighbor=c.neighbor,
            date=c.date,
            supersedes=c.supersedes,
            superseded_by=c.superseded_by,
        )
        meta = dict(doc.meta)
        if c.superseded_by is not None:
            meta["superseded_by"] = c.superseded_by
        if c.supersedes is not None:
            meta["supersedes"] = c.supersedes
        return RetrievalHit(doc.kind, doc.ref, doc.text, float(c.final), doc.scope, why, meta)


class _Lenders:
    """The message candidates that lend context credit — a positive fused score (and, in
    questions mode, a question mark) — by position key ``(session number << 40) + index``
    (indexes have at most 12 digits, so ≤ 10 ** 12 − 1 < 2 ** 40 − reach: a key ± d never
    lands on another session's lender), sorted, shared by :meth:`missing` and
    :meth:`credit` (the neighbours fetched in between score 0 and lend nothing).

    `placed[i]` is at (`session[i]`, `position[i]`), each position held once;
    `reply_weight`: see :meth:`credit` (``facts.neighbor_reply_weight``).
    """

    def __init__(
        self, placed: Sequence[_Candidate], session: Sequence[int], position: Sequence[int],
        questions_only: bool, *, reply_weight: float | None = None,
    ) -> None:
        self.reply_weight = reply_weight
        self.index = np.array(position, dtype=np.int64)
        self.keys = (np.array(session, dtype=np.int64) << 40) + self.index
        self.fused = fused = np.array([c.fused for c in placed], dtype=np.float64)
        lends = fused > 0
        if questions_only:
            lends &= np.array([c.info.question for c in placed], dtype=bool)
        at = np.flatnonzero(lends)
        at = at[np.argsort(self.keys[at], kind="stable")]
        self.at = at  # index in `placed` of each lender, by key
        self.lender_keys = self.keys[at]
        self.lender_fused = fused[at]
        # whether each lender asks: with reply_weight, the message right after it is its reply
        self.lender_asks = np.array([placed[i].info.question for i in at.tolist()], dtype=bool)

    def missing(self, reach: int) -> list[tuple[int, int]]:
        """(session number, message index ≥ 1) of every position within `reach` turns of a
        lender that holds no candidate yet, each once, ascending."""
        keys = self._missing_keys(reach)
        mask = (1 << 40) - 1
        return list(zip((keys >> 40).tolist(), (keys & mask).tolist(), strict=True))

    def missing_refs(self, reach: int) -> list[tuple[int, list[str]]]:
        """:meth:`missing` by session: (session number, the refs of its missing positions,
        ascending), sessions ascending — without a Python step per position."""
        keys = self._missing_keys(reach)
        if not len(keys):
            return []
        sessions = keys >> 40
        bounds = np.flatnonzero(np.diff(sessions)) + 1
        starts = [0, *bounds.tolist()]
        ends = [*bounds.tolist(), len(keys)]
        index = (keys & ((1 << 40) - 1)).tolist()
        return [
            (int(sessions[a]), list(map(str, index[a:b]))) for a, b in zip(starts, ends, strict=True)
        ]

    def _missing_keys(self, reach: int) -> np.ndarray:
        """The position keys of :meth:`missing`, ascending."""
        offsets = np.array([o for d in range(1, reach + 1) for o in (-d, d)], dtype=np.int64)
        near = (self.lender_keys[:, None] + offsets[None, :]).ravel()
        near_index = (self.index[self.at][:, None] + offsets[None, :]).ravel()
        # ascending and distinct, without those held: what np.unique + ~np.isin give, by one
        # sort and one searchsorted (about 3x faster on ~1,000 keys: unique hashes, isin sorts)
        keys = np.sort(near[near_index >= 1])
        if len(keys):
            keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
            held = np.sort(self.keys)
            at = np.minimum(np.searchsorted(held, keys), len(held) - 1)
            keys = keys[held[at] != keys]
        return keys

    def credit(
        self, placed: Sequence[_Candidate], session: Sequence[int], position: Sequence[int],
        weights: Sequence[float],
    ) -> tuple[list[float], list[int]]:
        """Set ``final`` (and ``neighbor``) of every matched message candidate (`placed` as
        given to the constructor): final = fused + Σ_d w_d · the larger fused score of the
        lenders d before / d after it (a tie goes to the one before); ``neighbor`` names the
        nearest lender when the lift exceeds the candidate's own score. With ``reply_weight``
        (not None), a lender that asks lends the message right after it (its reply)
        reply_weight × its score instead of w_1 ×; the two sides at d = 1 are then compared by
        lift.

        The neighbours fetched since (fused 0, at `session`, `position`) are scored by the same
        rule and returned: their finals, and per neighbour the index in `placed` of its
        nearest lender when it was lifted (any lift exceeds 0), else −1.

        Vectorised (one ``searchsorted`` of every candidate's ±d keys among the lender keys):
        the same additions in the same order as one candidate at a time, so the floats are
        identical.
        """
        m = len(self.keys)  # the matched candidates, `placed`
        added = (np.array(session, dtype=np.int64) << 40) + np.array(position, dtype=np.int64)
        keys = np.concatenate((self.keys, added))
        fused = np.concatenate((self.fused, np.zeros(len(added), dtype=np.float64)))
        n = len(keys)
        lift = np.zeros(n, dtype=np.float64)
        source = np.full(n, -1, dtype=np.int64)
        if len(self.lender_keys) and weights:
            offsets = np.array([o for d in range(1, len(weights) + 1) for o in (-d, d)], dtype=np.int64)
            want = keys[None, :] + offsets[:, None]  # row 2(d-1): d before; row 2d-1: d after
            pos = np.minimum(np.searchsorted(self.lender_keys, want), len(self.lender_keys) - 1)
            found = self.lender_keys[pos] == want
            value = np.where(found, self.lender_fused[pos], 0.0)
            at = self.at[pos]
            reply = self.reply_weight
            for d, w in enumerate(weights, start=1):
                has_before, before, before_at = found[2 * d - 2], value[2 * d - 2], at[2 * d - 2]
                has_after, after, after_at = found[2 * d - 1], value[2 * d - 1], at[2 * d - 1]
                if d == 1 and reply is not None:
                    # the reply to a question that matches: its lift is reply × the question's
                    # score, the other side's w × its own (compared as lifts)
                    asks = has_before & self.lender_asks[pos[0]]
                    before_lift = np.where(asks, reply, w) * before
                    take_after = has_after & (~has_before | (w * after > before_lift))
                    has = has_before | has_after
                    lift = np.where(has, lift + np.where(take_after, w * after, before_lift), lift)
                else:
                    take_after = has_after & (~has_before | (after > before))
                    has = has_before | has_after
                    best = np.where(take_after, after, before)
                    lift = np.where(has, lift + w * best, lift)
                first = has & (source < 0)
                source[first] = np.where(take_after, after_at, before_at)[first]
        finals = (fused + lift).tolist()
        for c, final in zip(placed, finals[:m], strict=True):
            c.final = final
        lifted = (lift > 0) & (fused < lift)
        for i in np.flatnonzero(lifted[:m]).tolist():
            placed[i].neighbor = placed[int(source[i])].doc.ref
        return finals[m:], np.where(lifted[m:], source[m:], -1).tolist()


def speaker_names(docs: Iterable[Document]) -> set[str]:
    """The ``name`` of every message among `docs` (the speakers a query may name)."""
    return {
        str(d.meta["name"]) for d in docs if d.kind == MESSAGE_KIND and d.meta.get("name")
    }


def dense_query(query: str, names: Iterable[str], settings: FactSettings) -> str:
    """The text embedded for the vector list of `query`: without the speaker `names` it
    contains (``dense_without_speakers``, see :func:`without_speakers`) and in the form of a
    statement (``dense_as_statement``, see :func:`as_statement`)."""
    return query_texts(query, names, settings)[1]


def query_texts(query: str, names: Iterable[str], settings: FactSettings) -> tuple[str, str]:
    """(`query` as asked, for supersession; the text :func:`dense_query` embeds for the vector
    list). Both are without the speaker `names` when ``dense_without_speakers``."""
    asked = without_speakers(query, names) if settings.dense_without_speakers else query
    return asked, as_statement(asked) if settings.dense_as_statement else asked


def without_speakers(query: str, names: Iterable[str]) -> str:
    """`query` minus the speaker names it contains (whole words, possessive ``'s`` too).

    Every message of a speaker carries the speaker's name, so a name in the query pulls the
    query's vector towards all of that speaker's messages and swamps what the question asks
    (LoCoMo dev, ``use``: dense R@5 20.5 → 38.6 with names removed). The speaker itself is
    matched by keyword search and ``speaker_boost``. Returns `query` unchanged when nothing
    but names would remain.
    """
    out = query
    for name in sorted(names, key=len, reverse=True):
        out = re.sub(rf"(?<!\w){re.escape(name)}(?:'s|’s)?(?!\w)", " ", out, flags=re.IGNORECASE)
    out = " ".join(out.split())
    return out if query_terms(out) else query


_WH = frozenset(["what", "when", "where", "who", "whom", "whose", "which", "why", "how"])
_AUX = frozenset(["do", "does", "did", "is", "are", "was", "were", "has", "have", "had", "can",
                  "could", "will", "would", "should", "might", "may"])


def as_statement(query: str) -> str:
    """An (English) question without its interrogative opening and question mark ("When did
    Melanie go camping in June?" → "Melanie go camping in June"): embedded as a question, the
    query's nearest neighbours are other questions of the conversation, not the statements
    that answer it. Returns `query` unchanged when nothing would remain."""
    words = query.strip().rstrip("?？").split()
    lowered = [w.lower() for w in words]
    if lowered and lowered[0] in _WH:
        del words[0], lowered[0]
    for i in range(min(2, len(words))):  # the auxiliary: first, or after the asked noun
        if lowered[i] in _AUX:
            del words[i]
            break
    out = " ".join(words)
    return out if query_terms(out) else query


def _boost_named_speaker(
    cands: dict[int, _Candidate], query: str, boost: float,
    left_out: Sequence[tuple[DocFacts, float]] = (),
) -> None:
    """Messages by the one speaker the query names score × (1 + boost) ("What did Caroline
    paint?" is most likely answered by Caroline). Several named speakers → no boost. The
    speakers of `left_out` (candidates not built, see :func:`_cannot_reach`) count too."""
    words = set(query_terms(query, drop_stop_words=False))
    infos = [c.info for c in cands.values()]  # speakers lowered once per document (DocFacts)
    infos += [info for info, _ in left_out]
    named = {i.speaker for i in infos if i.named} & words
    if len(named) != 1:
        return
    (who,) = named
    for c in cands.values():
        if c.info.message and c.info.speaker == who:
            c.final *= 1.0 + boost


_REPLY_ROLE = "assistant"  # the role whose message answers the one before it
# A reply lifts the statement before it only when it is this many times longer: a long reply
# talks around the statement's subject (and so matches a paraphrase of it); a reply of a
# statement's length is a turn of its own, holding its own facts (two people talking).
_REPLY_LENGTH_RATIO = 2.0
_PAST = frozenset(["did", "was", "were", "had", "used", "previously", "before", "originally",
                   "first", "earlier", "old", "former"])


def _asks_about_past(query: str) -> bool:
    """An (English) query about what was so ("what did…", "where was…", "the old…"): the
    earlier statement may be the answer, so supersession does not reorder."""
    return any(w in _PAST for w in query_terms(query, drop_stop_words=False))


def asks(text: str) -> bool:
    """True for text that ends in a question mark (any script's): it asks, it states nothing
    (such a message neither supersedes nor is superseded, and yields in the recalled block)."""
    return text.rstrip().endswith(("?", "？", "؟"))


def _states(doc: Document) -> bool:
    """The document can state a speaker's fact: not a question, and not an assistant reply,
    tool output or system text (those talk about the speakers' facts, they do not update
    them: a later reply on the same topic is not a correction of an earlier one)."""
    return doc.meta.get("role") not in NOT_STATING_ROLES and not asks(doc.text)


def _matches_directly(c: _Candidate) -> bool:
    """The document itself is in the keyword or the vector list (not lifted by a neighbour)."""
    return c.fused > 0 and (c.kw is not None or c.vec is not None)


def _answers_query(c: _Candidate) -> bool:
    """The document answers the query itself (:func:`_matches_directly`) or through the reply
    that answers it (``answered``, see :meth:`HybridRetriever._lift_answered`)."""
    return c.answered or _matches_directly(c)


def _query_similarity(c: _Candidate) -> float:
    """How well the document answers the query on its own: cosine if in the vector list."""
    return c.vec.score if c.vec is not None else float("-inf")


def _asked_similarity(c: _Candidate, vectors: dict[int, np.ndarray], qvec: np.ndarray) -> float:
    """:func:`_query_similarity` against `qvec`: the cosine of the document's stored vector
    with it, −inf when the document is not in the vector list (unit vectors: a dot product)."""
    return float(vectors[c.doc.id] @ qvec) if c.vec is not None else float("-inf")


def _newest_first(order: list[_Candidate]) -> list[_Candidate]:
    """`order` with every correction above what it corrects, along whole chains.

    :meth:`HybridRetriever._supersede` and :meth:`HybridRetriever._follow_up` each move a
    correction just above the statement it corrects, one link at a time; a chain A → B → C
    whose links were made by the two steps apart could end with B above C (the follow-up moved
    B above A after C had been placed above B: the middle value first). Here each link
    (``superseded_by``) whose newer candidate ranks below its older one moves the newer just
    above the older, until none does; the newest of a chain then ranks above every older
    value, and only corrections move up. Links point to later statements (no cycle), so the
    passes settle; they are bounded all the same (one more pass than there are links).
    """
    by_label = {_label(c.doc): c for c in order}
    links = [(c, by_label[c.superseded_by]) for c in order
             if c.superseded_by is not None and c.superseded_by in by_label]
    if not links:
        return order
    out = list(order)
    for _ in range(len(links) + 1):
        moved = False
        for older, newer in links:
            i, j = out.index(older), out.index(newer)
            if j > i:
                out.pop(j)
                out.insert(i, newer)
                newer.final = max(newer.final, older.final)
                moved = True
        if not moved:
            break
    return out


def _label(doc: Document) -> str:
    """``<session>/<ref>`` of a document (a message index is only unique within its session)."""
    return f"{doc.scope.session}/{doc.ref}"


def _user_of(
    doc: Document, memo: dict[int, tuple[tuple[object, ...], bool]]
) -> tuple[tuple[object, ...], bool]:
    """(:func:`_speaker_key`, :func:`asks`) of `doc`, held in `memo` by document id."""
    held = memo.get(doc.id)
    if held is None:
        held = memo[doc.id] = (_speaker_key(doc), asks(doc.text))
    return held


def _group_corrections(
    compared: Sequence[str], sims: np.ndarray, query_sims: Sequence[float], scores: Sequence[float],
    doc: Document, s: FactSettings,
) -> dict[int, int]:
    """:func:`~mindpalace.retrieval.supersession.choose_corrections` of one speaker's statements
    (oldest first; `compared`: the sentence of each compared, `sims`: their (n, n) cosines,
    `query_sims` / `scores`: length n; `doc`: one of them, for the speaker label) with the
    ``supersede_*`` settings of `s`, each piece of evidence read only for the statements of
    the pairs it can decide.

    The subject words, the answer links and the holders only ever veto a pair, and the values
    are read for pairs that are one subject, so, step by step with
    :func:`~mindpalace.retrieval.supersession.same_subject`: the subject words of the
    statements of the pairs one subject on their cosines alone; the answer links (value kinds,
    stated changes) of those of such pairs that share no word (a shared word is a link); the
    values and holders of those of the pairs one subject before the holders' veto. A pair
    left out is no subject whatever its evidence (True there: nothing to veto), so the answer
    is that of the evidence of every statement; at 100k facts most of the window is new text,
    whose evidence was most of the step.
    """
    def marked(pairs: np.ndarray) -> list[bool]:
        # either way round: a product of float vectors need not be symmetric to the last bit
        either: np.ndarray = np.logical_or(pairs.any(axis=0), pairs.any(axis=1))
        return [bool(x) for x in either.tolist()]

    def subject(shared: np.ndarray | None = None, links: np.ndarray | None = None) -> np.ndarray:
        return same_subject(
            sims, query_sims, similarity=s.supersede_similarity,
            answer_similarity=s.supersede_answer_similarity, answers=s.supersede_answers,
            answer_share=s.supersede_answer_share, shared=shared, answer_evidence=links,
        )

    maybe = subject()
    if not maybe.any():
        return {}
    # one subject-word matrix for both uses (a pair's entry depends on its two texts only)
    shared = _share_words(compared, doc, marked(maybe))
    links = _answer_links(compared, shared, marked(maybe & ~shared))
    before_veto = subject(shared, links)
    if not before_veto.any():
        return {}
    among = marked(before_veto)
    evidence = _marked_evidence(compared, among)  # read once: the values and `strong` share it
    n = len(compared)
    return choose_corrections(
        sims, query_sims, scores,
        similarity=s.supersede_similarity,
        answer_similarity=s.supersede_answer_similarity,
        answers=s.supersede_answers,
        min_score_ratio=s.supersede_min_score_ratio,
        answer_share=s.supersede_answer_share,
        holders=[holder(t) if among[i] else None for i, t in enumerate(compared)],
        shared=shared,
        values=_values_given(n, evidence),
        answer_evidence=links,
        strong=_values_on_shared_words(n, shared, evidence),
        typed=_typed_values(n, evidence),
    )


def _gives_values(texts: Sequence[str], among: Sequence[bool]) -> np.ndarray:
    """(n, n) bool: whether the later of one speaker's `texts` (oldest first) can give the new
    value of the earlier (:func:`~mindpalace.retrieval.supersession.gives_new_value`); only
    pairs of texts marked in `among` are checked (the others: True, nothing to veto).

    The same answer as ``gives_new_value`` pair by pair, from each marked text's evidence read
    once (:func:`_value_evidence`) and combined for every pair at once."""
    return _values_given(len(texts), _marked_evidence(texts, among))


def _values_given(n: int, found: tuple[Any, _Evidence] | None) -> np.ndarray:
    """:func:`_gives_values` of n texts from their :func:`_marked_evidence` `found`."""
    out = np.ones((n, n), dtype=bool)
    if found is None:
        return out
    at, (strict, generous, changed, same_text, apart, nouns) = found
    # gives_new_value: not the same text, and no old value or one of its kinds or a change
    ok = ~same_text & ((strict[:, None] == 0) | _kinds_given(strict, generous, apart, nouns) | changed[None, :])
    later = np.triu(np.ones(ok.shape, dtype=bool), k=1)  # (older, newer): the pairs checked
    out[at] = np.where(later, ok, True)
    return out


def _values_on_subject(texts: Sequence[str], shared: np.ndarray, among: Sequence[bool]) -> np.ndarray:
    """(n, n) bool: whether the later of one speaker's `texts` (oldest first) gives a value of
    the earlier's kind on a subject word they share (:func:`~mindpalace.retrieval.supersession.
    gives_value_on_subject`); only pairs marked in `among` are checked (the others: False).
    Each marked text's evidence is read once (:func:`_value_evidence`), the pairs combined at
    once."""
    return _values_on_shared_words(len(texts), shared, _marked_evidence(texts, among))


def _values_on_shared_words(n: int, shared: np.ndarray, found: tuple[Any, _Evidence] | None) -> np.ndarray:
    """:func:`_values_on_subject` of n texts from their :func:`_marked_evidence` `found`."""
    out = np.zeros((n, n), dtype=bool)
    if found is None:
        return out
    at, (strict, _, _, same_text, apart, nouns) = found
    ok = shared[at].astype(bool) & ~same_text & _kinds_given(strict, strict, apart, nouns)
    out[at] = np.triu(ok, k=1)  # (older, newer) pairs only
    return out


def _typed_values(n: int, found: tuple[Any, _Evidence] | None) -> np.ndarray:
    """(n, n) bool: whether the later of one speaker's texts gives a value of a kind the earlier
    gives other than a name, both read strictly (:func:`~mindpalace.retrieval.supersession.
    gives_typed_value`), from their :func:`_marked_evidence` `found` (pairs not marked: False)."""
    out = np.zeros((n, n), dtype=bool)
    if found is None:
        return out
    at, (strict, _, _, same_text, apart, nouns) = found
    typed = strict & ~_KIND_BITS[NAME]
    out[at] = np.triu(~same_text & _kinds_given(typed, typed, apart, nouns), k=1)
    return out


def _answer_links(texts: Sequence[str], shared: np.ndarray, among: Sequence[bool]) -> np.ndarray:
    """(n, n) bool, symmetric: :func:`~mindpalace.retrieval.supersession.answer_link` of each
    pair of one speaker's `texts` (oldest first; the earlier one as the older) marked in
    `among`, given which share a subject word (`shared`, :func:`_share_words`); the others
    are never the same subject: True, nothing to veto. Each marked text's evidence is read
    once (:func:`_value_evidence`), the pairs combined at once."""
    out = np.ones((len(texts), len(texts)), dtype=bool)
    if (found := _marked_evidence(texts, among)) is None:
        return out
    at, (strict, generous, changed, _, apart, nouns) = found
    link = shared[at].astype(bool) | _kinds_given(strict, generous, apart, nouns) | changed[None, :]
    later = np.triu(np.ones(link.shape, dtype=bool), k=1)
    # (i, j), i < j, read with texts[i] as the older; (j, i) holds the same answer
    out[at] = np.where(later, link, np.where(later.T, link.T, True))
    return out


_Evidence = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _marked_evidence(texts: Sequence[str], among: Sequence[bool]) -> tuple[Any, _Evidence] | None:
    """The (marked, marked) index grid of the texts marked in `among` and their
    :func:`_value_evidence`; None when fewer than two are marked (no pair to read)."""
    marked = [i for i, m in enumerate(among) if m]
    if len(marked) < 2:
        return None
    return np.ix_(marked, marked), _value_evidence([texts[i] for i in marked])


_KIND_BITS = {NUMBER: 1, NAME: 2, CALENDAR: 4, TRAVEL: 8, ROLE: 16}
_NOUN_BITS = _KIND_BITS[TRAVEL] | _KIND_BITS[ROLE]  # values only where they change


def _kind_bits(kinds: frozenset[str]) -> int:
    """`kinds` (:func:`~mindpalace.retrieval.supersession.value_kinds`) as a bit set."""
    bits = 0
    for kind in kinds:
        bits |= _KIND_BITS[kind]
    return bits


def _value_evidence(texts: Sequence[str]) -> _Evidence:
    """Per text of `texts` (n), what :func:`~mindpalace.retrieval.supersession.gives_new_value`,
    :func:`~mindpalace.retrieval.supersession.answer_link` and
    :func:`~mindpalace.retrieval.supersession.gives_value_on_subject` read of it: its value kinds
    read strictly and generously (int64 bit sets, :data:`_KIND_BITS`), whether it says that
    something changed (bool), the (n, n) bool of which texts are the same once
    whitespace-stripped, and the (n, n) bool of which texts' amounts are in different units
    (:func:`~mindpalace.retrieval.supersession.amount_units`, both known and no kind shared),
    and the (n, n) bool of which later texts give a common-noun value (a means of travel, a
    role) the earlier does not (:func:`~mindpalace.retrieval.supersession.new_noun_value`) (shapes (n,), (n,), (n,), (n, n),
    (n, n), (n, n))."""
    strict = np.array([_kind_bits(value_kinds(t)) for t in texts], dtype=np.int64)
    generous = np.array([_kind_bits(value_kinds(t, generous=True)) for t in texts], dtype=np.int64)
    changed = np.array([says_it_changed(t) for t in texts], dtype=bool)
    codes: dict[str, int] = {}
    code = np.array([codes.setdefault(t.strip(), len(codes)) for t in texts], dtype=np.int64)
    units = [amount_units(t) for t in texts]
    apart = np.zeros((len(texts), len(texts)), dtype=bool)
    known = [(i, u) for i, u in enumerate(units) if u is not None]
    for a, ua in known:  # only texts whose every amount has a unit: few
        for b, ub in known:
            apart[a, b] = not (ua & ub)
    return strict, generous, changed, code[:, None] == code[None, :], apart, _noun_value_changes(texts)


def _noun_value_changes(texts: Sequence[str]) -> np.ndarray:
    """(n, n) bool: whether text j gives a common-noun value text i does not
    (:func:`~mindpalace.retrieval.supersession.new_noun_value`); only texts giving one are read."""
    out = np.zeros((len(texts), len(texts)), dtype=bool)
    named = [(i, noun_values(t)) for i, t in enumerate(texts)]
    named = [(i, w) for i, w in named if w]
    for a, wa in named:
        for b, wb in named:
            out[a, b] = bool(wb - wa)
    return out


def _kinds_given(old: np.ndarray, new: np.ndarray, apart: np.ndarray, nouns: np.ndarray) -> np.ndarray:
    """(n, n) bool: whether text j gives a value of a kind text i gives (bit sets `old` for i,
    `new` for j), numbers counting only when their amounts are not in different units
    (`apart`), means of travel and roles only when j gives one i does not (`nouns`) — the kind test of
    :func:`~mindpalace.retrieval.supersession.gives_new_value`."""
    both = old[:, None] & new[None, :]
    both = np.where(nouns, both, both & ~_NOUN_BITS)
    only_numbers = both == _KIND_BITS[NUMBER]
    kinds: np.ndarray = (both != 0) & ~(only_numbers & apart)
    return kinds


def _share_words(texts: Sequence[str], doc: Document, among: Sequence[bool] | None = None) -> np.ndarray:
    """(n, n) bool: which of one speaker's `texts` share a subject word
    (:func:`~mindpalace.retrieval.supersession.subject_terms`), the words of the speaker's
    label (`doc`'s, the search text's ``user:`` prefix) not counted. `among`: only the texts
    marked True are compared (the others share nothing here); None = all. One product of the
    texts' (n, words) incidence matrix, not a set intersection per pair."""
    label = frozenset(stem_words(query_terms(_speaker(doc))))
    empty: frozenset[str] = frozenset()
    terms = [
        subject_terms(t) - label if among is None or among[i] else empty for i, t in enumerate(texts)
    ]
    vocabulary: dict[str, int] = {}
    rows = [[vocabulary.setdefault(w, len(vocabulary)) for w in t] for t in terms]
    incidence = np.zeros((len(texts), len(vocabulary)), dtype=np.float32)
    for i, columns in enumerate(rows):
        incidence[i, columns] = 1.0
    shared: np.ndarray = (incidence @ incidence.T) > 0
    return shared


def _speaker(doc: Document) -> str:
    """The speaker label of a message's search text (its ``name``, else its ``role``)."""
    return str(doc.meta.get("name") or doc.meta.get("role") or "")


def _speaker_key(doc: Document) -> tuple[object, ...]:
    scope = doc.scope
    return (scope.tenant, scope.user, scope.agent, doc.kind, _speaker(doc).lower())


def _time_key(c: _Candidate) -> tuple[str, int]:
    return _doc_time_key(c.doc)


def _doc_time_key(doc: Document) -> tuple[str, int]:
    stamp = doc.meta.get("timestamp")
    return (str(stamp) if stamp else doc.created_at.isoformat(), doc.id)


def _boost_named_dates(
    cands: dict[int, _Candidate], query: str, boost: float, slack_days: float,
    left_out: Sequence[tuple[DocFacts, float]] = (),
) -> bool:
    """Documents dated in a period the query names score × (1 + boost); "last month" etc. are
    resolved against the newest candidate's timestamp (the conversation's "now"), `left_out`'s
    included (candidates not built, see :func:`_cannot_reach`). Returns whether one of
    `left_out` would have been boosted (its final > 0: the speaker boost keeps the sign)."""
    dated = [(c, c.info.stamp) for c in cands.values()]  # parsed once per document
    stamps = [w for _, w in dated if w is not None]
    stamps += [info.stamp for info, _ in left_out if info.stamp is not None]
    if not stamps:
        return False
    periods = query_periods(query, max(stamps))
    if not periods:
        return False
    slack = timedelta(days=slack_days)
    for c, when in dated:
        if when is not None and c.final > 0 and any(p.contains(when, slack) for p in periods):
            c.final *= 1.0 + boost
            c.date = True
    return any(
        info.stamp is not None and final > 0 and any(p.contains(info.stamp, slack) for p in periods)
        for info, final in left_out
    )


def _cannot_reach(
    matched: Iterable[_Candidate], finals: Sequence[float], n: int, settings: FactSettings
) -> list[bool] | None:
    """Which fetched neighbours (their `finals` before the boosts) cannot rank among the best
    `n`: an exact bound, None when none can be left out.

    The boosts multiply by (1 + boost) ≥ 1 (``speaker_boost``, ``date_boost`` ≥ 0), so a
    matched candidate with final ≥ 0 never loses score and a neighbour gains at most
    × (1 + speaker_boost) × (1 + date_boost), rounded as the boosts round it (rounding is
    monotone). With T the `n`-th best final of the `matched` candidates, T > 0, a neighbour
    whose bound is below T has `n` candidates strictly above it after the boosts, whatever
    their ids: it is never read (supersession and the hits read the best `n` only). NaN
    anywhere orders nowhere: then nothing is left out.
    """
    scores = np.array([c.final for c in matched], dtype=np.float64)
    if len(scores) < n or n <= 0 or np.isnan(scores).any():
        return None
    cutoff = float(np.partition(scores, len(scores) - n)[len(scores) - n])  # n-th best
    if not cutoff > 0:
        return None
    own = np.array(finals, dtype=np.float64)
    if np.isnan(own).any():
        return None
    speaker = 1.0 + settings.speaker_boost if settings.speaker_boost else 1.0
    date = 1.0 + settings.date_boost if settings.date_boost else 1.0
    if speaker < 1.0 or date < 1.0:  # (settings forbid it) a boost that lowers: no bound
        return None
    bound = np.maximum(own, (own * speaker) * date)
    out = bound < cutoff
    return out.tolist() if out.any() else None


def _best_first(cands: Iterable[_Candidate], n: int) -> list[_Candidate]:
    """The best `n` of `cands` by final score, ties to the older document (lower id): exactly
    ``sorted(cands, key=(-final, id))[:n]``, through one ``lexsort`` of two arrays instead of
    a key tuple per candidate (a LoCoMo recall sorts ~390 to keep 30)."""
    pool = list(cands)
    finals = np.array([c.final for c in pool], dtype=np.float64)
    if np.isnan(finals).any():  # NaN does not order; keep sorted()'s own answer
        return sorted(pool, key=lambda c: (-c.final, c.doc.id))[:n]
    ids = np.array([c.doc.id for c in pool], dtype=np.int64)
    return [pool[i] for i in np.lexsort((ids, -finals))[:n].tolist()]


def _rerank(hits: list[SearchHit]) -> list[SearchHit]:
    """Hits from several scope queries merged into one list, best first, ranks renumbered."""
    if not hits:
        return hits
    if all(h.rank == i for i, h in enumerate(hits, start=1)) and all(
        a.score >= b.score for a, b in pairwise(hits)  # NaN fails it: sorted below
    ):
        return hits  # one scope's list, best first and numbered: the (stable) sort keeps it
    ordered = sorted(hits, key=lambda h: -h.score)
    return [SearchHit(h.doc, h.score, i, h.matched) for i, h in enumerate(ordered, start=1)]


def _rrf(hits: list[SearchHit], k: float) -> np.ndarray:
    return 1.0 / (k + np.arange(1, len(hits) + 1, dtype=np.float64))


def _above_floor(hits: list[SearchHit], basis: list[SearchHit] | None = None) -> np.ndarray:
    """(score − list minimum) / list std: non-negative, scale-free, 0 for the weakest hit.

    Using the list's own floor makes BM25 (unbounded) and cosine (≤ 1) comparable, and keeps
    fused scores non-negative so neighbour context only ever adds. `basis` (a subset of
    `hits`; None = all) gives the minimum and std; a hit below its minimum scores 0.
    """
    scores = np.array([h.score for h in hits], dtype=np.float64)
    base = scores if basis is None or basis is hits else np.array([h.score for h in basis], dtype=np.float64)
    std = float(base.std()) if len(base) > 1 else 0.0
    if not std > 0:  # (NaN included, as before)
        return np.ones_like(scores)
    return np.maximum(scores - base.min(), 0.0) / max(std, _FLOOR_STD)


def _standout(hits: list[SearchHit], top: int = 3) -> float:
    """How far the list's best `top` scores stand above the rest, in the list's own standard
    deviations (≥ 0): a flat list (nothing distinctive matched) says little about this query."""
    scores = np.array([h.score for h in hits], dtype=np.float64)
    if len(scores) <= top:
        return 1.0
    std = float(scores.std())
    if std <= 0:
        return 1.0
    return max(0.0, float(scores[:top].mean() - scores.mean()) / std)


def stems(terms: list[str]) -> dict[str, str]:
    """{stem: term} for English words (PyStemmer, like FTS5's porter tokenizer); others as-is.
    Stemmed through :func:`~mindpalace.retrieval.fetch.stem_words` (one stemmer, memoised)."""
    return {s: t for s, t in zip(stem_words(terms), terms, strict=True)}


class _ReadOnlyRetriever(HybridRetriever):
    """:meth:`HybridRetriever.read_only`: hybrid search that never writes vectors."""

    def sync_embeddings(self) -> int:
        return 0
