"""Session recall: working memory first, then hybrid retrieval over every tier (seed 001 §2.3).

Working-memory items are returned first when the query names their key or shares at least half
of its terms with them; one sharing fewer (but some) is ranked among the other hits by that
share, before any hit that holds a smaller share of the query's terms; the rest of the top-k comes from :class:`HybridRetriever` over the
long-term facts, session messages, step records, snapshots and history entries of the recall
scope. Fact hits are promoted into working memory (access count +1); other tiers are not facts
and are not promoted. Every ``working`` and ``fact`` hit is the current value of its key
(``meta["current"] = True``): a working copy corrected in another session of the user comes
back as the newer value, never the old one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace

from mindpalace.checks import require_int
from mindpalace.errors import ValidationError
from mindpalace.facts.dual import FactMemory
from mindpalace.facts.longterm import KIND as FACT_KIND
from mindpalace.facts.model import Fact, normalize_key
from mindpalace.retrieval.fetch import stem_words
from mindpalace.retrieval.hybrid import HybridRetriever, MatchReason, RetrievalHit, stems
from mindpalace.scope import ANY, Scope, add_scopes
from mindpalace.settings import FactSettings
from mindpalace.store.textindex import query_terms
from mindpalace.textsafe import require_text

WORKING_MIN_TERM_SHARE = 0.5  # a working item holding half the query's terms comes first


@dataclass(frozen=True, slots=True)
class RecallHit(RetrievalHit):
    """One recall result: a :class:`~mindpalace.retrieval.hybrid.RetrievalHit` (tier, ref, text,
    score, scope, why, meta) whose tier may also be ``working`` (a working-memory item), with
    the :class:`Fact` for ``working`` and ``fact`` hits (None for other tiers)."""

    fact: Fact | None = None

    @classmethod
    def of(cls, hit: RetrievalHit, fact: Fact | None = None) -> RecallHit:
        return cls(hit.tier, hit.ref, hit.text, hit.score, hit.scope, hit.why, hit.meta, fact)


class Recall:
    """``Session.recall``: the dual-memory recall path of one session.

    Args:
        facts: the session's :class:`FactMemory` (working memory + long-term facts).
        retriever: the hybrid retriever.
        settings: ``facts`` settings (``recall_scope``, ``recall_top_k``).
        extra_scopes: more scopes searched beside the session's, e.g. the user's and the
            agent's knowledge files (:attr:`KnowledgeScope.store_scope`).
    """

    def __init__(
        self, facts: FactMemory, retriever: HybridRetriever, settings: FactSettings | None = None,
        *, extra_scopes: Sequence[Scope] = (),
    ) -> None:
        self.facts = facts
        self.retriever = retriever
        self.settings = settings or FactSettings()
        self.extra_scopes = list(extra_scopes)

    def scopes(self) -> list[Scope]:
        """The scopes searched: the user's every session (``recall_scope = "user"``), or this
        session plus the user-level facts (``"session"``). Never another user's."""
        scope = self.facts.scope
        if self.settings.recall_scope == "user":
            return add_scopes([scope.with_(session=ANY)], self.extra_scopes)
        return add_scopes([scope, self.facts.fact_scope], self.extra_scopes)

    def __call__(
        self, query: str, k: int | None = None, *, record: Callable[[list[RecallHit]], None] | None = None,
    ) -> list[RecallHit]:
        """Top-k hits for `query`, working memory first.

        Args:
            query: free text, or an ``entity:attribute`` key.
            k: hits wanted (default ``facts.recall_top_k``), ≥ 1.
            record: called with the hits before they are returned, inside the transaction
                that counts the working and fact hits (one commit for the recall's writes;
                ``Session.recall`` writes its ``recalled`` lineage event there): what it writes
                commits with them, and an error it raises undoes them.
        Raises:
            ValidationError: k is not an int ≥ 1; InvalidTextError: `query` is not storable
                text, or is empty / blank (a query that asks nothing is a caller's bug — an
                unset variable — not a search that found nothing).
            ProviderError: the embedder failed.
        """
        require_text("query", query, allow_empty=False)
        k = self.settings.recall_top_k if k is None else require_int("recall k", k)
        wanted = stems(query_terms(query))
        strong, weak = self._working_matches(query, wanted)
        strong = strong[:k]
        seen = {fact.key for _, fact, _ in strong + weak}
        found = self.retriever.search(self.scopes(), query, k=k + len(seen))
        others: list[RetrievalHit] = []
        for hit in found:
            key = str(hit.meta.get("key", "")) if hit.tier == FACT_KIND else ""
            if not (key and key in seen):
                others.append(hit)
        chosen = _merge_weak(strong, weak, others, len(wanted), k)
        working = [m for m in chosen if isinstance(m, tuple)]
        picked = [h for h in chosen if not isinstance(h, tuple)]
        fact_hits = [h for h in picked if h.tier == FACT_KIND]
        stored = [self.facts.longterm.get(h.ref) for h in fact_hits]
        current = [f for f in stored if f is not None and f.current]
        # Working hits counted, fact hits promoted and `record` written: one transaction, one
        # commit per recall (none to open when nothing is counted: `record` writes alone).
        with self.facts.together() if record is not None and (working or current) else nullcontext():
            out = self._hits(chosen, self._working_hits(working), self.facts.promote_many(current))
            if record is not None:
                record(out)
        return out

    def _hits(
        self, chosen: list[_Match | RetrievalHit], hits: dict[str, RecallHit], promoted: list[Fact | None],
    ) -> list[RecallHit]:
        """The chosen items as hits: each working match as counted (`hits`, by key), each fact
        hit as its `promoted` copy (a fact no longer current is left out)."""
        by_id = {f.id: f for f in promoted if f is not None}
        out: list[RecallHit] = []
        for item in chosen:
            if isinstance(item, tuple):
                got = hits.get(item[1].key)
                if got is not None:
                    out.append(got)
                continue
            fact = by_id.get(item.ref) if item.tier == FACT_KIND else None
            if item.tier == FACT_KIND and fact is None:
                continue  # corrected or forgotten meanwhile: never return a stale value
            if fact is not None:
                item = replace(item, meta={**item.meta, "current": True})
            out.append(RecallHit.of(item, fact))
        return out

    def _working_matches(self, query: str, wanted: dict[str, str]) -> tuple[list[_Match], list[_Match]]:
        """Working items matching `query`, read-only: (strong, weak), best first. Strong: the
        query names the item's key or it holds at least half of the query's terms; weak: it
        holds some of them (ranked among the retriever's hits by the same share)."""
        try:
            as_key = normalize_key(query) if ":" in query else None
        except ValidationError:
            as_key = None
        strong: list[_Match] = []
        weak: list[_Match] = []
        for fact in self.facts.working_items():  # as stored now, each its current value
            if as_key is not None and fact.key == as_key:
                strong.append((2.0, fact, ()))
                continue
            if not wanted:
                continue
            # each distinct word stemmed once per process (memo), not once per item and query
            have = set(stem_words(query_terms(f"{fact.key} {fact.content}", drop_stop_words=False)))
            terms = tuple(t for s, t in wanted.items() if s in have)
            share = len(terms) / len(wanted)
            if share >= WORKING_MIN_TERM_SHARE:
                strong.append((share, fact, terms))
            elif terms:
                weak.append((share, fact, terms))
        # Ties go to the more important item, importance decayed by age when configured.
        for matches in (strong, weak):
            matches.sort(key=lambda x: (-x[0], -self.facts.longterm.effective_importance(x[1])))
        return strong, weak

    def _working_hits(self, matches: list[_Match]) -> dict[str, RecallHit]:
        """The chosen working matches as hits, by key: counts the accesses and replaces copies
        made stale by another session (one transaction)."""
        if not matches:
            return {}
        currents = self.facts.hit_working([fact.key for _, fact, _ in matches])
        hits: dict[str, RecallHit] = {}
        for (score, fact, terms), current in zip(matches, currents, strict=True):
            if current is None:
                continue
            hits[fact.key] = RecallHit(
                "working", current.id or current.key, f"{current.key}: {current.content}",
                score, self.facts.scope, MatchReason(terms=terms, working=True),
                {"key": current.key, "current": True}, current,
            )
        return hits


_Match = tuple[float, Fact, tuple[str, ...]]
"""A working-memory match: (share of the query's terms or 2.0 for a named key, fact, terms)."""


def _merge_weak(
    strong: list[_Match], weak: list[_Match], others: list[RetrievalHit], n_terms: int, k: int,
) -> list[_Match | RetrievalHit]:
    """The top k: strong working matches first, then the retriever's hits with each weak
    working match placed before the first hit that holds a smaller share of the query's terms
    (the same measure for both, so a working item sharing few terms still outranks hits
    sharing fewer, e.g. vector-only ones)."""
    out: list[_Match | RetrievalHit] = list(strong)
    pending = list(weak)
    for hit in others:
        share = len(hit.why.terms) / n_terms if n_terms else 0.0
        while pending and pending[0][0] > share:
            out.append(pending.pop(0))
        out.append(hit)
    out.extend(pending)
    return out[:k]
