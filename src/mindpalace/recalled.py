"""Recalled memory: what the memory holds about the current question, packed into the prompt.

Seed 001 §2.3 (recall top-k into the working context) with seed 004's hybrid search. On each
build the context builder asks :class:`MemoryRecaller` for

1. :meth:`~MemoryRecaller.candidates` — hybrid recall (BM25 + vectors, fused, with message
   context; :class:`~mindpalace.retrieval.hybrid.HybridRetriever`) for each query over every
   tier of the session's recall scope (I10: this session, or every session of this user and
   agent per ``facts.recall_scope``; never another user's): messages, history entries, step /
   info / snapshot records, long-term facts, plus the working-memory items that share half
   the query's terms. Everything is read-only: no fact is promoted, no access counted, no
   vector written (documents without a vector yet are found by keyword only; ``prepare``
   syncs vectors before it builds). A fact hit that is no longer current (corrected or
   forgotten) is never shown: the newest value wins.
2. :meth:`~MemoryRecaller.pack` — the best items that are not in the prompt verbatim (messages
   of this session shown in the conversation are left out), packed greedily by score under a
   token cap (a long item shows its best-matching excerpt; once the block is
   ``recall_excerpt_after`` full, every long item does), then listed oldest first so a
   question and its reply read in order. A message that only asks is shown beside a
   neighbouring message (its answer), never alone. Items are attributed envelopes;
   consecutive recalled messages of one session share one — a quoted excerpt of the
   conversation in which each day opens with one line giving its date and references, ``…``
   marks messages left out, the envelope's ``speakers`` says once in which role each speaker
   spoke (a name seen in two roles says it on each of its lines instead), and each line says
   who spoke and ends with a note resolving its relative dates (:mod:`mindpalace.datenotes`;
   the quote is never rewritten)::

       <memory source="conversation" speakers="Caroline (user), Melanie (assistant)">[8 May 2023 · message:11–12,15]
       Caroline: I went to a support group yesterday. [dates: yesterday = 7 May 2023]
       Melanie: …
       …
       Caroline: …
       [25 May 2023 · message:30]
       Caroline: …</memory>
       <memory source="fact" date="9 May 2023, 10:02" ref="fact:user:hotel">Hotel Hoshino</memory>

   with references in the grammar of read_files (``message:<N>``, ``message:<N>@<session>``
   — a date line lists its numbers, ``message:11–12,15@older`` —, ``history:<cursor>``,
   ``fact:<entity:attribute>``, ``archive:<hash>`` for an L4 exchange, record names) so the
   model can read an item whole.
3. :meth:`~MemoryRecaller.message_dates` — when the conversation messages shown were written,
   as a short note (the messages' own content is never rewritten).

In a small prompt (``compact=True``, below ``context.compact_framing_below_tokens``) the block
is headed :data:`COMPACT_RECALLED_HEADER`, date lines read ``[8 May 2023 message:11–12,15]``,
no ``…`` line marks messages left out (the date line's references show where), relative-date
notes drop their label (``[yesterday = 7 May 2023]``) and the dates note names references only
(:data:`COMPACT_DATES_HEADER`; one run is one line, ``message:81 sent 8 May 2023, 13:56 UTC``);
the items, quotes, attribution, dates and references are the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import groupby

from mindpalace.archive import DOC_KIND as ARCHIVE_KIND
from mindpalace.blocks import memory_envelope, quoted_lines
from mindpalace.datenotes import date_note
from mindpalace.facts.dual import FactMemory
from mindpalace.facts.longterm import KIND as FACT_KIND
from mindpalace.facts.longterm import LongTermStore
from mindpalace.facts.recall import WORKING_MIN_TERM_SHARE
from mindpalace.knowledge.index import KIND as KNOWLEDGE_KIND
from mindpalace.knowledge.index import file_of_ref
from mindpalace.retrieval.hybrid import MESSAGE_KIND, HybridRetriever, RetrievalHit, asks, stems
from mindpalace.retrieval.supersession import (
    new_noun_value,
    noun_values,
    says_it_changed,
    sentences,
    value_words,
)
from mindpalace.scope import ANY, Scope, add_scopes
from mindpalace.settings import ContextSettings, FactSettings
from mindpalace.store import Store
from mindpalace.store.base import Document
from mindpalace.store.inputs import PART_SEPARATOR
from mindpalace.store.textindex import query_terms
from mindpalace.timeutil import from_iso
from mindpalace.tokens import TokenCounter

HISTORY_KIND = "history"
MESSAGE_STREAM = "messages"
RECALLED_HEADER = "Recalled memory (quoted, oldest first, UTC; read_files(ref) reads one whole):"
DATES_HEADER = "Message dates (UTC), #1 = the first message below:"
COMPACT_RECALLED_HEADER = "Recalled memory (quoted, UTC; read_files(ref)):"
"""The header of the compact form (a small prompt, ``context.compact_framing_below_tokens``)."""
COMPACT_DATES_HEADER = "Sent (UTC):"
"""The message-dates note's compact header: runs name their references only (no positions);
one run is one line without it (``message:81 sent 8 May 2023, 13:56 UTC``)."""
_SENTENCE = re.compile(r"(?<=[.!?\n])\s+")
_EXCERPT_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")  # where an excerpt may start: a sentence or a line
_GAP = "… "  # marks text left out before what follows
_RRF_K = 60.0  # merging the ranked lists of several queries


def human_date(when: datetime) -> str:
    """``8 May 2023, 13:56`` (the stored UTC time, minutes)."""
    return f"{when.day} {when:%B %Y, %H:%M}"


def day_date(when: datetime) -> str:
    """``8 May 2023`` (the stored UTC day): what a recalled day of the conversation is dated
    with — the time of day costs ~5 tokens on every date line and the model reads it, like
    the rest of the message, with read_files(ref)."""
    return f"{when.day} {when:%B %Y}"


@dataclass(frozen=True, slots=True)
class RecalledItem:
    """One recalled memory as the prompt shows it.

    Attributes:
        ref: where the model reads it whole (read_files grammar, see module doc).
        tier: ``message``, ``fact``, ``working``, ``history``, ``step``, ``info``, ``snapshot`` ….
        source: who or what it comes from: the message role (``user`` / ``assistant`` /
            ``tool`` / ``system``), ``fact``, or the tier.
        speaker: the message's ``name`` ('' when none); for history entries its kind.
        date: when it was written (message timestamp, fact version time, record created_at;
            for a history entry when the first message it summarizes was written, else the
            entry's own time); None when unknown.
        text: the full text (an excerpt of it is shown when it is long).
        score: the fused retrieval score (comparable within one build only).
        why: why it matched (query terms, BM25 / cosine ranks, neighbour).
        tokens: tokens of its envelope in the block (0 until packed).
        session: the session it belongs to ('' for user-level facts).
        index: message index inside its session (0 for other tiers).
        terms: the query terms it contains (picks the excerpt of a long item).
        superseded_by: the reference of a later statement on the same subject that corrects
            this one (shown beside it, so the model takes the newer value), or "".
        part: which bounded part of a long document `text` starts with (1 = its head; the
            store indexes a text over 16 KiB in parts, and hits on several parts of one
            document are one item whose text joins them in order).
        until: for a range (a history entry): when its last message was written, `date`
            being when its first was; None otherwise.
    """

    ref: str
    tier: str
    source: str
    speaker: str
    date: datetime | None
    text: str
    score: float
    why: str
    tokens: int = 0
    session: str = ""
    index: int = 0
    terms: tuple[str, ...] = ()
    superseded_by: str = ""
    part: int = 1
    until: datetime | None = None


_QUESTION_WEIGHT = 0.5  # score factor of a recalled message that ends by asking (see candidates)


class MemoryRecaller:
    """Recall for the prompt's recalled-memory block of one session. Read-only.

    Args:
        store: the store protocol (read only).
        scope: the session scope (concrete).
        counter: the token counter (I9).
        retriever: the hybrid retriever whose store, embedder and settings the read-only
            search reuses (its vectors are never synced from here).
        settings: ``context`` settings (candidates, item cap).
        fact_settings: ``facts`` settings (``recall_scope``).
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        counter: TokenCounter,
        retriever: HybridRetriever,
        *,
        settings: ContextSettings | None = None,
        fact_settings: FactSettings | None = None,
        facts: FactMemory | None = None,
        extra_scopes: Sequence[Scope] = (),
    ) -> None:
        self.extra_scopes = list(extra_scopes)
        self.store = store
        self.scope = scope.require_concrete()
        self.counter = counter
        self.settings = settings or ContextSettings()
        self.fact_settings = fact_settings or retriever.settings
        # working memory and long-term facts, read through their read-only views only
        self.facts = facts or FactMemory(store, self.scope, settings=self.fact_settings)
        # never computes a vector (``prepare`` syncs them; a build stays a pure read), and reads
        # stored ones with the retriever's embedding layout
        self.search = retriever.read_only()
        self._memo: dict[tuple[object, ...], tuple[str, int]] = {}  # item → (shown text, tokens)
        self._shell: int | None = None
        self._stamps: dict[tuple[Scope, int], datetime | None] = {}  # (scope, message) → written

    def scopes(self) -> list[Scope]:
        """The scopes searched (I10): every session of this user and agent
        (``facts.recall_scope = "user"``) or this session plus the user-level facts."""
        if self.fact_settings.recall_scope == "user":
            return add_scopes([self.scope.with_(session=ANY)], self.extra_scopes)
        return add_scopes([self.scope, self.scope.with_(session="")], self.extra_scopes)

    # -- 1. candidates -----------------------------------------------------------------------
    def candidates(self, queries: Sequence[str], *, asked_in: frozenset[int] = frozenset()) -> list[RecalledItem]:
        """Ranked recalled items for `queries` (several lists are merged by each item's best
        reciprocal rank, so every query's top hits lead),
        best first, current facts only, each item once. Read-only.

        The search puts each ranked list on the scale of its statements (``statement_scale``
        of :meth:`~mindpalace.retrieval.hybrid.HybridRetriever.search`): the conversation's
        earlier questions, worded like this one, would otherwise set the scale and push the
        statements that answer it down the list; they still lend neighbour credit to their
        replies. `asked_in`: indexes of this session's messages the queries were taken from
        (the request, shown in the prompt verbatim) — left out of the search, where each would
        match itself best.

        Raises:
            InvalidTextError: a query is not storable text. ProviderError: the embedder failed.
        """
        ranked: dict[tuple[str, str, str], tuple[float, RecalledItem]] = {}
        k = self.settings.recall_candidates
        skip = self._asked_in(asked_in) if asked_in else None
        for query in [q for q in queries if q.strip()]:
            hits = self.search.search(self.scopes(), query, k=k, skip=skip, statement_scale=True)
            created = self._record_dates(hits)
            entries = _plausible_marks([e for e in (self._from_hit(h, created) for h in hits) if e is not None], hits)
            # a message that ends by asking yields to statements (its answer ranks through
            # neighbour credit), so earlier questions do not crowd the block. Measured: halving
            # only messages that *only* ask (only_asks) won dev and lost held-out LoCoMo at 2k
            # and 4k (sessions 14 and 15), so a statement that closes with a question yields too.
            # Keeping the rank of one whose matched query terms are all in what it states before
            # the question (or in its speaker's name) moved dev evidence +0.9 / −0.3 / +0.3 points
            # at 1k / 2k / 4k (gap10q): churn, not kept; matching on the statement's terms
            # alone (without the speaker's name) changed nothing at 1k and lost 0.5 at 4k
            entries = sorted((replace(e, score=e.score * _QUESTION_WEIGHT) if e.tier == MESSAGE_KIND and asks(e.text) else e
                              for e in entries), key=lambda e: -e.score)
            top = max((e.score for e in entries), default=0.0)  # working memory ranks first
            entries = [replace(w, score=top + w.score) for w in self._working(query)] + entries
            for rank, entry in enumerate(entries, start=1):
                tier = FACT_KIND if entry.tier == "working" else entry.tier
                key = (entry.session if tier == MESSAGE_KIND else "", tier, entry.ref)
                merged = 1.0 / (_RRF_K + rank) if len(queries) > 1 else entry.score
                if key in ranked:  # found twice (two queries, working + long-term, two parts)
                    old_score, old = ranked[key]
                    ranked[key] = (max(old_score, merged), _with_part(old, entry))
                else:
                    ranked[key] = (merged, entry)
        order = sorted(ranked.values(), key=lambda x: -x[0])
        return [replace(entry, score=score) for score, entry in order]

    def _asked_in(self, indexes: frozenset[int]) -> Callable[[Document], bool]:
        """True for this session's messages `indexes` (search documents)."""
        refs = {str(i) for i in indexes}
        return lambda doc: doc.kind == MESSAGE_KIND and doc.ref in refs and doc.scope == self.scope

    def _record_dates(self, hits: Sequence[RetrievalHit]) -> dict[tuple[Scope, str], datetime | None]:
        """created_at of the record hits (step / info / snapshot …), one read per scope."""
        names: dict[Scope, list[str]] = {}
        for h in hits:
            if h.tier not in (MESSAGE_KIND, FACT_KIND, HISTORY_KIND, ARCHIVE_KIND, KNOWLEDGE_KIND):
                part = _part_of(h.ref)
                names.setdefault(h.scope, []).append(h.ref if part is None else part[0])
        out: dict[tuple[Scope, str], datetime | None] = {}
        for scope, refs in names.items():
            for name, record in self.store.get_records(scope, refs).items():
                out[(scope, name)] = record.created_at
        return out

    def _message_ref(self, where: str | None) -> str:
        """``<session>/<index>`` (how retrieval names a superseding message) as a reference."""
        if not where or "/" not in where:
            return ""
        session, _, index = where.rpartition("/")
        return f"message:{index}" if session == str(self.scope.session) else f"message:{index}@{session}"

    def _from_hit(self, hit: RetrievalHit, created: dict[tuple[Scope, str], datetime | None]) -> RecalledItem | None:
        # a part of a long document (``<ref>#part<i>``, i ≥ 2, store.inputs.document_parts)
        # is its document under the document's own reference, showing the part's text: the
        # tail of a huge tool output answers questions its head does not
        ref_part = _part_of(hit.ref)
        if ref_part is not None:
            hit = replace(hit, ref=ref_part[0])
        meta = hit.meta
        session = str(hit.scope.session)
        why = str(hit.why)
        if hit.tier == MESSAGE_KIND:
            if not hit.ref.isdigit():
                return None
            role = str(meta.get("role") or "")
            name = str(meta.get("name") or "")
            ref = f"message:{hit.ref}" if hit.scope == self.scope else f"message:{hit.ref}@{session}"
            text = hit.text
            prefix = f"{name or role}: "
            if text.startswith(prefix):
                text = text[len(prefix):]
            item = RecalledItem(ref, MESSAGE_KIND, role or "message", name, _date(meta.get("timestamp")),
                                text, hit.score, why, session=session, index=int(hit.ref), terms=hit.why.terms,
                                superseded_by=self._message_ref(hit.why.superseded_by))
        elif hit.tier == FACT_KIND:
            fact = LongTermStore(self.store, hit.scope).get(hit.ref)
            if fact is None or not fact.current:
                return None  # newest wins: a corrected or forgotten value is never shown
            item = RecalledItem(f"fact:{fact.key}", FACT_KIND, "fact", "", fact.created_at,
                                fact.content, hit.score, why, session=session, terms=hit.why.terms)
        elif hit.tier == KNOWLEDGE_KIND:
            if meta.get("injected"):
                return None  # SOUL / USER / MEMORY / L0 / L1 are in the knowledge block already
            whose = "user" if hit.scope.user else "agent"
            item = RecalledItem(f"knowledge:{whose}/{meta.get('file') or file_of_ref(hit.ref)}", KNOWLEDGE_KIND,
                                "knowledge", "", None, hit.text, hit.score, why, session=session,
                                terms=hit.why.terms)
        elif hit.tier == HISTORY_KIND:
            if meta.get("kind") == "raw" and meta.get("messages"):
                return None  # a raw archive of messages that are themselves recallable, one by one
            # dated by the messages it summarizes, not by when consolidation wrote it
            first, last = self._range_dates(hit.scope, meta.get("messages"))
            item = RecalledItem(f"history:{hit.ref}", HISTORY_KIND, HISTORY_KIND, str(meta.get("kind") or ""),
                                first or _date(meta.get("timestamp")), hit.text, hit.score, why, session=session,
                                terms=hit.why.terms, until=last if first else None)
        elif hit.tier == ARCHIVE_KIND:  # an archived exchange: user and agent turns, verbatim
            item = RecalledItem(f"archive:{hit.ref}", ARCHIVE_KIND, ARCHIVE_KIND, "",
                                _date(meta.get("timestamp")), hit.text, hit.score, why,
                                session=session, terms=hit.why.terms)
        else:  # step / info / snapshot records (any record type a component indexes)
            item = RecalledItem(hit.ref, hit.tier, hit.tier, "", created.get((hit.scope, hit.ref)), hit.text,
                                hit.score, why, session=session, terms=hit.why.terms)
        if ref_part is None:
            return item
        return replace(item, part=ref_part[1], text=f"{_GAP}{item.text}")  # it starts mid-document

    def _range_dates(self, scope: Scope, messages: object) -> tuple[datetime | None, datetime | None]:
        """When the first and the last message of a history entry's range (``[lo, hi]`` in its
        meta) were written — (None, None) when unknown. Messages are append-only, so their
        times are remembered across builds."""
        if not (isinstance(messages, list | tuple) and len(messages) == 2
                and all(isinstance(i, int) and not isinstance(i, bool) for i in messages)):
            return None, None
        out: list[datetime | None] = []
        for index in messages:
            key = (scope, index)
            if key not in self._stamps:
                if len(self._stamps) >= _MEMO_ITEMS:
                    self._stamps.clear()
                events = self.store.read_events(scope, MESSAGE_STREAM, from_version=index, to_version=index)
                self._stamps[key] = from_iso(events[0].data["timestamp"]) if events else None
            out.append(self._stamps[key])
        return out[0], out[1]

    def _working(self, query: str) -> list[RecalledItem]:
        """Working-memory items sharing half the query's terms — read from the stored working
        memory without counting an access; a copy made stale elsewhere is shown at its current
        long-term value, a forgotten one not at all."""
        wanted = stems(query_terms(query))
        if not wanted:
            return []
        out: list[tuple[float, RecalledItem]] = []
        for fact in self.facts.working_items():  # current values; forgotten ones left out
            have = set(stems(query_terms(f"{fact.key} {fact.content}", drop_stop_words=False)))
            terms = tuple(t for s, t in wanted.items() if s in have)
            share = len(terms) / len(wanted)
            if share >= WORKING_MIN_TERM_SHARE:
                why = "working memory; terms " + ", ".join(terms)
                item = RecalledItem(f"fact:{fact.key}", "working", "fact", "", fact.created_at,
                                    fact.content, share, why, session=str(self.scope.session), terms=terms)
                out.append((share, item))
        out.sort(key=lambda x: -x[0])
        return [r for _, r in out]

    # -- 2. packing --------------------------------------------------------------------------
    def item_cap(self, block_tokens: int) -> int:
        """Tokens one item may show in a block of `block_tokens` tokens:
        ``min(recall_item_max_tokens, block_tokens // recall_min_items)``, so a small block
        still shows ``recall_min_items`` records when they are long (a long reply shows its
        best-matching excerpt and its reference) instead of two or three whole ones; never below
        the smallest item that fits (12 tokens)."""
        share = block_tokens // max(1, self.settings.recall_min_items)
        return max(_MIN_ITEM_TOKENS, min(self.settings.recall_item_max_tokens, share))

    def pack(
        self, items: Sequence[RecalledItem], cap_tokens: int, *, exclude_messages: frozenset[int] = frozenset(),
        item_cap: int | None = None, compact: bool = False,
    ) -> tuple[str, list[RecalledItem]]:
        """The block text holding the best `items` under `cap_tokens` (tokens of the text),
        and the items shown (with their ``tokens``: what each added), best first.

        Items are taken best first; one that does not fit is skipped and smaller ones after it
        may still fill the room. What each item adds is estimated (its line, and a date line,
        a gap mark or a reference number); when the exact count of the block comes out below
        the estimate, one more pass with the difference added fills that room (kept when it
        shows more), and the exact count always has the last word. Messages of this session whose index is in `exclude_messages`
        (shown verbatim in the prompt) and items with the same text as one already taken are
        left out; a message that only asks waits until a neighbouring message is taken (the
        answer it got) and is left out otherwise. Consecutive messages of one session share one
        envelope, each day opened by one date line (``[8 May 2023 · message:12–14]``),
        one ``Speaker: text`` line each (the envelope's ``speakers`` gives each speaker's role
        once), so a hit and the turns around it cost little more than their text. Once ``recall_excerpt_after`` of the cap is used, items longer
        than ``recall_excerpt_tokens`` show their best-matching excerpt. `item_cap` (tokens) caps
        what one item may show (its best-matching excerpt when longer, with its reference to read
        it whole); None = ``recall_item_max_tokens`` (see :meth:`item_cap`). `compact` (a
        small prompt): the block is headed :data:`COMPACT_RECALLED_HEADER`, its date lines
        drop the separator (``[8 May 2023 message:12–14,17]``), no ``…`` line marks a gap (the
        references show it) and relative-date notes drop their label; items, quotes,
        attribution, dates and references are the same. Returns ``("", [])`` when nothing fits.
        """
        if cap_tokens <= self.counter.count(_header(compact)) + 1:
            return "", []
        item_cap = self.settings.recall_item_max_tokens if item_cap is None else max(_MIN_ITEM_TOKENS, item_cap)
        chosen, used = self._choose(items, cap_tokens, cap_tokens, exclude_messages, item_cap, compact)
        text, shown = self._fit(chosen, cap_tokens, compact)
        if text and used > (exact := self.counter.count(text)):
            # the per-item estimates (a date line, a gap mark, a reference each) came out above
            # the exact count: one more pass with that difference added fills the room they
            # held; kept when it shows more
            more, _ = self._choose(items, cap_tokens + used - exact, cap_tokens, exclude_messages, item_cap, compact)
            fuller, fuller_shown = self._fit(more, cap_tokens, compact)
            if self.counter.count(fuller) > exact:
                return fuller, fuller_shown
        return text, shown

    def _fit(
        self, chosen: list[tuple[RecalledItem, str]], cap_tokens: int, compact: bool = False
    ) -> tuple[str, list[RecalledItem]]:
        """The rendered block of `chosen` under `cap_tokens` (exact count), the last-chosen
        items left out until it fits; ``("", [])`` when nothing does."""
        chosen = list(chosen)
        while chosen:
            text = self._render(chosen, compact)
            if self.counter.count(text) <= cap_tokens:  # estimates were per item; this is exact
                return text, [i for i, _ in chosen]
            chosen.pop()
        return "", []

    def _choose(
        self, items: Sequence[RecalledItem], limit: int, cap_tokens: int, exclude_messages: frozenset[int],
        item_cap: int, compact: bool = False,
    ) -> tuple[list[tuple[RecalledItem, str]], int]:
        """The greedy pass of :meth:`pack`: (items taken best first with their shown text,
        their estimated tokens) under `limit` estimated tokens; `cap_tokens` is the block's
        cap (``recall_excerpt_after`` is a share of it)."""
        used, seen = self.counter.count(_header(compact)) + 1, set()
        chosen: list[tuple[RecalledItem, str]] = []
        days: set[tuple[str, object]] = set()  # (session, day) of the messages taken
        speakers: set[tuple[str, str, str]] = set()  # (session, name, role) in the envelope legend
        taken: set[tuple[str, int]] = set()  # (session, index) of the statements taken
        waiting: dict[tuple[str, int], RecalledItem] = {}  # questions waiting for a neighbour
        session = str(self.scope.session)

        def take(item: RecalledItem) -> bool:
            nonlocal used
            norm = " ".join(item.text.split()).lower()
            if norm in seen:
                return False
            # each item as shown at most item_cap tokens (an excerpt when longer), made once;
            # once the block is recall_excerpt_after full, long items show excerpts only
            late = used >= self.settings.recall_excerpt_after * cap_tokens
            body, tokens = self._shown(item, min(item_cap, self.settings.recall_excerpt_tokens) if late else item_cap,
                                       compact)
            if item.tier == MESSAGE_KIND:
                # a message joins its day of the conversation (a line, a gap mark, a ref) or
                # opens it (its date line; the first one also the envelope around them all)
                if _day(item) in days:
                    tokens += _COMPACT_JOIN_TOKENS if compact else _JOIN_TOKENS
                else:
                    tokens += self.counter.count(self._day_line([item], compact)) + 1
                    tokens += 0 if days else self._shell_tokens()
                if item.speaker and (item.session, item.speaker, item.source) not in speakers:
                    # the envelope's legend names it once: speakers="Caroline (user), …"
                    tokens += self.counter.count(f' {item.speaker} ({item.source}),') + (0 if speakers else 3)
            if not body or used + tokens > limit:
                return False
            seen.add(norm)
            used += tokens
            chosen.append((replace(item, tokens=tokens), body))
            if item.tier == MESSAGE_KIND:
                days.add(_day(item))
                if item.speaker:
                    speakers.add((item.session, item.speaker, item.source))
            if item.tier == MESSAGE_KIND and not only_asks(item.text):  # it states something
                taken.add((item.session, item.index))
                for near in ((item.session, item.index - 1), (item.session, item.index + 1)):
                    if near in waiting:  # the question this message answers, or its follow-up
                        take(waiting.pop(near))
            return True

        for item in items:
            if limit - used < _MIN_ITEM_TOKENS:
                break
            if item.tier == MESSAGE_KIND and item.session == session and item.index in exclude_messages:
                continue
            if item.tier == MESSAGE_KIND and only_asks(item.text):
                # a message that only asks states nothing on its own: it is shown beside a
                # neighbouring statement (the answer it got), never alone or beside questions
                near = {(item.session, item.index - 1), (item.session, item.index + 1)}
                if not near & taken:
                    waiting[(item.session, item.index)] = item
                    continue
            take(item)
        return chosen, used

    def _render(self, chosen: list[tuple[RecalledItem, str]], compact: bool = False) -> str:
        """Oldest first; consecutive messages of one session in one envelope, a date line
        opening each day, in their order, with ``…`` where messages in between were left out."""
        ordered = sorted(chosen, key=_chronological)
        blocks: list[str] = []
        run: list[tuple[RecalledItem, str]] = []

        def flush() -> None:
            if run:
                blocks.append(self._message_envelope(run, compact))
                run.clear()

        for item, body in ordered:
            if item.tier != MESSAGE_KIND:
                flush()
                blocks.append(body)
                continue
            if run and run[-1][0].session != item.session:
                flush()
            run.append((item, body))
        flush()
        return "\n".join([_header(compact), *blocks])

    def _message_envelope(self, run: Sequence[tuple[RecalledItem, str]], compact: bool = False) -> str:
        """One envelope for consecutive recalled messages of a session: each day opens with
        its date line (:meth:`_day_line`), ``…`` marks messages left out in between."""
        roles: dict[str, list[str]] = {}  # speaker → the roles they spoke in, first seen first
        for item, _ in run:
            if item.speaker and item.source not in roles.setdefault(item.speaker, []):
                roles[item.speaker].append(item.source)
        lines: list[str] = []
        for _, group in groupby(run, key=lambda entry: _day(entry[0])):
            day = list(group)
            lines.append(self._day_line([item for item, _ in day], compact))
            for k, (item, text) in enumerate(day):
                if k and item.index != day[k - 1][0].index + 1 and not compact:
                    lines.append("…")  # compact: the date line's references show the gap
                if item.speaker and len(roles[item.speaker]) > 1:  # a name in two roles: per line
                    text = f"{item.speaker} ({item.source}): " + text.removeprefix(_who(item))
                lines.append(text)
        speakers = ", ".join(f"{name} ({said[0]})" for name, said in roles.items() if len(said) == 1)
        return memory_envelope("\n".join(lines), source="conversation", speakers=speakers)

    def _day_line(self, day: Sequence[RecalledItem], compact: bool = False) -> str:
        """``[8 May 2023 · message:7–8,12]``: the day the messages shown were written
        (:func:`day_date`) and their reference (``@session`` for another session);
        ``[8 May 2023 message:7–8,12]`` when `compact`."""
        first = day[0]
        spans: list[list[int]] = []
        for item in day:
            if spans and item.index == spans[-1][1] + 1:
                spans[-1][1] = item.index
            else:
                spans.append([item.index, item.index])
        at = f"@{first.session}" if first.session != str(self.scope.session) else ""
        ref = "message:" + ",".join(f"{a}" if a == b else f"{a}–{b}" for a, b in spans) + at
        if first.date is None:
            return f"[{ref}]"
        return f"[{day_date(first.date)}{' ' if compact else ' · '}{ref}]"

    def _shown(self, item: RecalledItem, item_cap: int, compact: bool = False) -> tuple[str, int]:
        """(text shown, its tokens + 1 for the newline): a message's line, or another item's
        whole envelope, cut to an excerpt when over `item_cap`; memoised per item."""
        key = (item.tier, item.session, item.ref, item.text, item.date, item_cap, compact)
        found = self._memo.get(key)
        if found is None:
            if item.tier == MESSAGE_KIND:
                body = self._message_line(item, item_cap - self._shell_tokens(), compact)
            else:
                body = self._envelope(item, item_cap) or ""
            found = (body, self.counter.count(body) + 1 if body else 0)
            if len(self._memo) >= _MEMO_ITEMS:
                self._memo.clear()
            self._memo[key] = found
        return found

    def _message_line(self, item: RecalledItem, room: int, compact: bool = False) -> str:
        """``Speaker: text [dates: …]`` under `room` tokens: the text verbatim (its
        best-matching excerpt when long), then the note resolving its relative dates against
        the message's time (:func:`~mindpalace.datenotes.date_note`, of the text shown;
        unlabelled when `compact`: ``[yesterday = 7 May 2023]``). A line break inside the text
        that opens a line which could read as another speaker's (a tool output's
        ``⏎user: from now on you must …``) is written ``⏎`` (:func:`~mindpalace.blocks.quoted_lines`)."""
        shown = quoted_lines(item.text)
        if shown != item.text:
            item = replace(item, text=shown)
        whole = _line(item)
        note = date_note(item.text, item.date, compact=compact)
        if self.counter.count(f"{whole} {note}") <= room:
            return f"{whole} {note}" if note else whole
        who, later = _who(item), _later(item)
        text = self._fit_text(item.text, item, room - self.counter.count(f"{who}{later} {note}") - 1)
        if not text:
            return ""
        shown_note = date_note(text, item.date, compact=compact)
        return f"{who}{text}{later} {shown_note}" if shown_note else f"{who}{text}{later}"

    def _shell_tokens(self) -> int:
        if self._shell is None:
            self._shell = self.counter.count(memory_envelope("", source="conversation"))
        return self._shell

    def _fit_text(self, text: str, item: RecalledItem, room: int) -> str:
        if room < 8:
            return ""
        return text if self.counter.count(text) <= room else self._excerpt(text, item, room)

    def _envelope(self, item: RecalledItem, max_tokens: int) -> str | None:
        attrs = {"source": item.source, "speaker": item.speaker, "date": _span(item), "ref": item.ref}
        shell = self.counter.count(memory_envelope("", **attrs))
        # relative dates in it, resolved (after the text) — not in a range of several days,
        # where nothing says which day each was written on
        anchor = item.date if item.until is None or item.date is None or item.until.date() == item.date.date() else None
        note = date_note(item.text, anchor)
        text = self._fit_text(item.text, item, max_tokens - shell - (self.counter.count(note) + 1 if note else 0))
        if not text:
            return None
        shown_note = date_note(text, anchor)
        return memory_envelope(f"{text} {shown_note}" if shown_note else text, **attrs)

    def _excerpt(self, text: str, item: RecalledItem, room: int) -> str:
        """The part of a long text that best matches (the sentence or line with most matched
        query terms and what follows, as written), cut to `room` tokens, marked with … where
        it was cut."""
        terms = list(item.terms)
        starts = [0] + [m.end() for m in _EXCERPT_BREAK.finditer(text) if m.end() < len(text)]
        start = 0
        if terms and len(starts) > 1:
            wanted = set(stems(terms))
            best = -1
            for begin, end in zip(starts, [*starts[1:], len(text)], strict=True):
                have = set(stems(query_terms(text[begin:end], drop_stop_words=False)))
                score = len(wanted & have)
                if score > best:
                    best, start = score, begin
        body = text[start:].strip()
        lead = "… " if start > 0 else ""
        cut = self.counter.truncate(body, max(0, room - self.counter.count(lead) - 2))
        if not cut.strip():
            return ""
        return lead + cut + (" …" if cut != body else "")

    # -- 3. dates of the verbatim conversation -------------------------------------------------
    def message_stamps(self, lo: int, hi: int) -> dict[int, datetime]:
        """When the session's messages `lo`…`hi` (inclusive) were written: message index →
        timestamp (aware), read in one query; messages without a stored event are absent."""
        return {ev.version: from_iso(ev.data["timestamp"]) for ev in
                self.store.read_events(self.scope, MESSAGE_STREAM, from_version=lo, to_version=hi)}

    def message_dates(
        self, indexes: Sequence[int], stamps: Mapping[int, datetime] | None = None, *, compact: bool = False
    ) -> str | None:
        """A note saying when the messages `indexes` (this session, shown in this order as
        the conversation) were written: runs of consecutive messages with the same date,
        e.g. ``#1–18 = message:601–618: 8 May 2023, 13:56``. None when there are none.
        `stamps` (from :meth:`message_stamps`, covering `indexes`) saves the read when the
        caller asks for several notes over one range. `compact` (a small prompt): headed
        :data:`COMPACT_DATES_HEADER`, each run named by its references only
        (``message:601–618: 8 May 2023, 13:56``); one run is one line,
        ``message:601–618 sent 8 May 2023, 13:56 UTC``."""
        if not indexes:
            return None
        if stamps is None:
            stamps = self.message_stamps(min(indexes), max(indexes))
        runs: list[list[tuple[int, int, datetime]]] = []  # (position, index, time)
        for pos, index in enumerate(indexes, start=1):
            when = stamps.get(index)
            if when is None:
                continue
            last = runs[-1][-1] if runs else None
            if last is not None and last[1] == index - 1 and last[2].date() == when.date():
                runs[-1].append((pos, index, when))
            else:
                runs.append([(pos, index, when)])
        if not runs:
            return None
        lines = [COMPACT_DATES_HEADER if compact else DATES_HEADER]
        if compact and len(runs) == 1:
            (_, i0, t0), (_, i1, t1) = runs[0][0], runs[0][-1]
            return f"message:{i0}{'' if i0 == i1 else f'–{i1}'} sent {_time_span(t0, t1)} UTC"
        for run in runs:
            (p0, i0, t0), (p1, i1, t1) = run[0], run[-1]
            if compact:
                where = f"message:{i0}" if p0 == p1 else f"message:{i0}–{i1}"
            else:
                where = f"#{p0} = message:{i0}" if p0 == p1 else f"#{p0}–{p1} = message:{i0}–{i1}"
            lines.append(f"{where}: {_time_span(t0, t1)}")
        return "\n".join(lines)


def _time_span(first: datetime, last: datetime) -> str:
    """``8 May 2023, 13:56`` or ``8 May 2023, 13:56 – 14:02`` (one day's run of messages)."""
    same = first.replace(second=0, microsecond=0) == last.replace(second=0, microsecond=0)
    return human_date(first) if same else f"{human_date(first)} – {last:%H:%M}"


def _part_of(ref: str) -> tuple[str, int] | None:
    """(the document's ref, part number) of a part's ref ``<ref>#part<i>``; None otherwise."""
    whole, sep, number = ref.partition(PART_SEPARATOR)
    return (whole, int(number)) if sep and whole and number.isdigit() else None


def _with_part(kept: RecalledItem, other: RecalledItem) -> RecalledItem:
    """`kept` (the better-ranked hit of one record) with `other`'s text too when `other` is
    another part of the same long document: their texts joined with ``…`` between them and
    their matched terms merged, so the excerpt shown is the part that matches best."""
    if other.tier != kept.tier or other.text == kept.text or other.text in kept.text:
        return kept
    first, second = (kept, other) if kept.part <= other.part else (other, kept)
    joined = f"{first.text} {second.text}" if second.text.startswith(_GAP) else f"{first.text}{' ' + _GAP}{second.text}"
    return replace(kept, text=joined,
                   terms=tuple(dict.fromkeys(kept.terms + other.terms)), part=first.part)


_MEMO_ITEMS = 4_096  # shown texts remembered across builds (cleared when full)
_MIN_ITEM_TOKENS = 12  # below this much room no item fits (an envelope alone is more)
_JOIN_TOKENS = 4  # a message joining an open envelope: its "…" gap line and its ref number
_COMPACT_JOIN_TOKENS = 2  # the same in the compact form (no gap line): its ref number


def _header(compact: bool) -> str:
    return COMPACT_RECALLED_HEADER if compact else RECALLED_HEADER


def only_asks(text: str) -> bool:
    """True when every sentence of `text` is a question (it states nothing)."""
    sentences = [x for x in _SENTENCE.split(text.strip()) if x.strip()]
    return bool(sentences) and all(asks(x) for x in sentences)


def _day(item: RecalledItem) -> tuple[str, object]:
    """(session, calendar day): the messages one envelope holds."""
    return item.session, item.date.date() if item.date else None


def _chronological(entry: tuple[RecalledItem, str]) -> tuple[object, ...]:
    """Day first; within a day a session's messages in their order, then other items by time."""
    item = entry[0]
    day = item.date.date() if item.date else None
    return (day is None, day or datetime.min.date(), item.tier != MESSAGE_KIND, item.session, item.index,
            item.date or datetime.min, item.ref)


def _who(item: RecalledItem) -> str:
    """``Caroline: `` — who said it (the envelope's ``speakers`` names each speaker's role);
    ``user: `` without a name."""
    return f"{item.speaker}: " if item.speaker else f"{item.source}: "


def _line(item: RecalledItem) -> str:
    """``Caroline: text`` (:func:`_who`), and the reference of its correction if any."""
    return f"{_who(item)}{item.text}{_later(item)}"


def marks_a_correction(older: str, newer: str | None, speakers: frozenset[str]) -> bool:
    """Whether a statement the retriever found corrected by a later one is shown as corrected
    (``[corrected later: …]``): only where a value can be outdated. `older` gives a value (a
    number, a date, a name — :func:`~mindpalace.retrieval.supersession.value_words`, sentence
    by sentence) other than the name of one of `speakers` or a short form of it ("Mel" for
    Melanie: a greeting or thanks addresses them, it states nothing) and, for a means of travel
    or a role (:func:`~mindpalace.retrieval.supersession.noun_values`), one `newer` gives another
    of (:func:`~mindpalace.retrieval.supersession.new_noun_value`), or `newer` (None when
    its text is not at hand) says that something changed ("… now", "no longer …").

    The retriever's link also orders the ranking (the newer first) and stays; this only keeps
    the prompt from telling the model that a thank-you was outdated by a later thank-you.
    """
    addressed = [name.casefold() for name in speakers if name]

    def names_a_speaker(word: str) -> bool:
        return len(word) >= 3 and any(name.startswith(word) for name in addressed)

    def outdated_by_newer(part: str, word: str) -> bool:
        # a means of travel or a role is outdated only by another one ("Sounds fun, enjoy the ride!"
        # names none after "I take the bus to work"); unknown when the newer text is not at hand
        return word not in noun_values(part) or newer is None or new_noun_value(part, newer)

    if any(not names_a_speaker(w) and outdated_by_newer(part, w)
           for part in sentences(older) for w in value_words(part)):
        return True
    return newer is not None and any(says_it_changed(part) for part in sentences(newer))


def _plausible_marks(entries: list[RecalledItem], hits: Sequence[RetrievalHit]) -> list[RecalledItem]:
    """`entries` with each ``superseded_by`` mark :func:`marks_a_correction` does not support
    cleared; the speakers are the names on the message hits of the same search."""
    if not any(e.superseded_by for e in entries):
        return entries
    speakers = frozenset(str(h.meta.get("name") or "") for h in hits if h.tier == MESSAGE_KIND)
    by_ref = {e.ref: e.text for e in entries if e.tier == MESSAGE_KIND}
    return [e if not e.superseded_by or marks_a_correction(e.text, by_ref.get(e.superseded_by), speakers)
            else replace(e, superseded_by="") for e in entries]


def _later(item: RecalledItem) -> str:
    return f" [corrected later: {item.superseded_by}]" if item.superseded_by else ""


def _span(item: RecalledItem) -> str:
    """An item's date attribute: its date, or the span of a range (``8 May 2023, 13:56 – 17:02``,
    ``8 May 2023, 13:56 – 25 May 2023, 09:10``); '' when unknown."""
    if item.date is None:
        return ""
    start, end = item.date, item.until
    if end is None or end.replace(second=0, microsecond=0) <= start.replace(second=0, microsecond=0):
        return human_date(start)
    return _time_span(start, end) if end.date() == start.date() else f"{human_date(start)} – {human_date(end)}"


def _date(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return from_iso(value)
    except ValueError:
        return None
