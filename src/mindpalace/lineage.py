"""Memory lineage: every memory event of a session as a structured, scoped event (seed 001 §5.3, §7).

Seed 001 asks that every memory write, archive and recall be logged so that a failed task can
be replayed: *when was it written, why was it kept, at which step was it recalled*. Lineage is
that log. Each event is appended through the store protocol (``Store.append_events``) to the
append-only stream :data:`STREAM` **of the session's own scope** (I10: a trace reads only the
streams of scopes it is allowed to read; another tenant's, user's or agent's events are never
listed). No backend-specific code: any store that implements the event log carries lineage.

An event (:class:`LineageEvent`) has

* ``type`` — one of :data:`EVENT_TYPES`: ``written`` (a fact or record was stored),
  ``promoted`` (a fact moved from working memory into the long-term store), ``archived``
  (left working memory / the live conversation for a durable tier), ``summarized`` (a summary
  was made; ``data["snapshot"]`` names the record or history entry it came from), ``superseded``
  (a newer value replaced it), ``tombstoned`` (forgotten for good), ``recalled`` (a recall
  returned it: ``query``, ``rank``, ``score``, ``why``), ``injected`` (one prompt built by
  ``Session.prepare``: the block table — block, tokens, why it was there — and what was
  recalled into it), ``edited`` (a knowledge file changed by hand or by a dream run);
* ``subjects`` — the ids it concerns: a fact key (``user:city``) *and* its version id
  (``user:city#2``), a record name (``step_12``), a reference (``message:7``, ``history:3``);
* ``step`` — the step-memory step the event belongs to (the step being decided for an
  ``injected`` prompt: the model call that follows the prompt begins that step), or None;
* ``task`` — the task id (the session's default task unless said otherwise);
* ``data`` — the rest (JSON).

Cost: one event append per memory write, one per recall call (all hits in one event) and one
per prepared prompt; see the notes for the measured cost in the step and recall benchmarks.
Turn it off with ``lineage.enabled = false``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from mindpalace.errors import ValidationError
from mindpalace.scope import ANY, Scope
from mindpalace.store import NewEvent, Store

STREAM: Final = "lineage"
"""The event stream of lineage events, one per session scope."""

EVENT_TYPES: Final = (
    "written", "promoted", "archived", "summarized", "superseded", "tombstoned",
    "recalled", "injected", "edited",
)

BLOCK_WHY: Final[Mapping[str, str]] = {
    "user corrections": "the user corrected the agent; corrections go on top, newest first (seed 004)",
    "system prompt": "the caller's instructions, sent on every call",
    "protected constraints": "task constraints a summary may never drop (seed 004, I7)",
    "working checkpoint": "the task's working checkpoint: key info and pending work (seed 003)",
    "knowledge": "the user's and agent's L0-L3 knowledge files (seeds 002, 003)",
    "memory index": "names of the stored records the model may read with read_files (seed 000)",
    "summarized memory": "compacted summary of older steps (seed 000 summary tier)",
    "recent steps": "the latest finished steps, verbatim (seed 000)",
    "pending steps": "steps begun and not yet evaluated (seed 000)",
    "summary lines": "the <summary> line of each earlier reply (seed 003)",
    "archived summary": "summary of the conversation consolidated into history.jsonl (seed 002)",
    "recalled memory": "recalled for the newest user message / the given queries (seeds 001, 004)",
    "message dates": "when the messages shown below were written",
    "tool schemas": "the tool definitions sent with the request (counted, I9)",
    "reply priming": "the tokens every chat request spends to start the reply",
}
"""Why each prompt block is in a prompt (``mindpalace why``); messages rows are the live
conversation kept after consolidation."""


@dataclass(frozen=True, slots=True)
class LineageEvent:
    """One lineage event (see the module docstring for the types and fields).

    ``position`` is the store-wide insertion order (sort key across sessions); ``at`` the
    store's timestamp (aware UTC); ``scope`` the session scope it was recorded in.
    """

    type: str
    subjects: tuple[str, ...]
    step: int | None
    task: str
    data: dict[str, Any]
    scope: Scope
    at: datetime
    position: int

    def concerns(self, subject: str) -> bool:
        """True when `subject` names one of this event's subjects (a ``fact:`` prefix and a
        fact key matching a version id ``key#n`` both count)."""
        wanted = subject.removeprefix("fact:")
        return any(s == wanted or s.split("#", 1)[0] == wanted for s in self.subjects)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "subjects": list(self.subjects), "step": self.step,
                "task": self.task, "data": self.data, "session": self.scope.session,
                "at": self.at.isoformat(), "position": self.position}


@dataclass(slots=True)
class PendingEvent:
    """An event to record: what :meth:`Lineage.record_many` takes."""

    type: str
    subjects: Sequence[str]
    step: int | None = None
    task: str = ""
    data: dict[str, Any] = field(default_factory=dict)


class Lineage:
    """The lineage log of one session scope: record events, read them back.

    Args:
        store: the store protocol (events are appended to stream :data:`STREAM`).
        scope: the concrete session scope events are recorded in (I10).
        enabled: False = :meth:`record` writes nothing (reads still work).
        task: the task id events default to (the session's default task = its id).

    Raises:
        ValidationError: `scope` is not concrete.
    """

    def __init__(self, store: Store, scope: Scope, *, enabled: bool = True, task: str = "") -> None:
        self.store = store
        self.scope = scope.require_concrete()
        self.enabled = enabled
        self.task = task or str(self.scope.session)

    # -- writes ----------------------------------------------------------------------------
    def record(
        self, type: str, subjects: Iterable[str], *, step: int | None = None, task: str = "",
        **data: Any,
    ) -> None:
        """Append one event (nothing when disabled). `data` must be JSON-serialisable.

        Raises:
            ValidationError: unknown `type`; StoreError: the store could not be written.
        """
        self.record_many([PendingEvent(type, tuple(subjects), step, task, data)])

    def record_many(self, events: Sequence[PendingEvent]) -> None:
        """Append `events` in one store call (one transaction); nothing when disabled or empty.

        Raises:
            ValidationError: an unknown event type (nothing appended).
        """
        if not self.enabled or not events:
            return
        new = []
        for e in events:
            if e.type not in EVENT_TYPES:
                raise ValidationError(f"unknown lineage event type {e.type!r}; one of {EVENT_TYPES}")
            new.append(NewEvent(e.type, {"subjects": [str(s) for s in e.subjects], "step": e.step,
                                         "task": e.task or self.task, **e.data}))
        self.store.append_events(self.scope, STREAM, new)

    # -- reads -----------------------------------------------------------------------------
    def events(self, *, sessions: str = "this") -> list[LineageEvent]:
        """Lineage events, oldest first.

        Args:
            sessions: ``"this"`` = this session only; ``"user"`` = every session of this
                tenant, user and agent (long-term facts outlive a session), and the edits of
                the user's and the agent's knowledge files.
        Raises:
            ValidationError: `sessions` is neither.
        """
        if sessions == "this":
            scopes = [self.scope]
        elif sessions == "user":
            t, user, agent = self.scope.tenant, str(self.scope.user), str(self.scope.agent)
            wide = [Scope(t, user, agent, ANY)]  # every session of this user and agent
            # the user's and the agent's knowledge files (edited by hand or by a dream run)
            wide += [k for k in (Scope(t, user, "", ""), Scope(t, "", agent, ""))
                     if k != Scope(t, user, agent, "")]
            scopes = list(dict.fromkeys(
                s for w in wide for s, name, _ in self.store.list_streams(w, prefix=STREAM)
                if name == STREAM))
        else:
            raise ValidationError(f"sessions must be 'this' or 'user', got {sessions!r}")
        out = [_event(e) for scope in scopes for e in self.store.read_events(scope, STREAM)]
        return sorted(out, key=lambda e: e.position)

    def trace(self, subject: str, *, sessions: str = "user") -> list[LineageEvent]:
        """The chain of `subject` — a fact key, fact id (``key#n``), record name or reference:
        every event naming it, oldest first (written, kept, recalled, injected …).

        Raises:
            ValidationError: `subject` is empty.
        """
        if not isinstance(subject, str) or not subject.strip():
            raise ValidationError("trace needs a fact key, fact id, record name or reference")
        wanted = subject.strip()
        return [e for e in self.events(sessions=sessions) if e.concerns(wanted)]

    def prompts(self) -> list[LineageEvent]:
        """The ``injected`` events of this session (one per ``Session.prepare``), oldest first."""
        return [e for e in self.events() if e.type == "injected"]

    def prompt_recalls(self, prompt: LineageEvent) -> list[dict[str, Any]]:
        """The recalled-memory items of `prompt` (an ``injected`` event), best first: each
        ``{"subjects", "tier", "rank", "score", "why", "tokens"}`` — from the ``recalled``
        event the same ``Session.prepare`` recorded just before it ([] when none)."""
        before = [e for e in self.events() if e.position < prompt.position]
        last = before[-1] if before else None
        if last is not None and last.type == "recalled" and last.data.get("via") == "prompt":
            return list(last.data.get("hits", []))
        return []

    def prompt_at(self, step: int) -> LineageEvent | None:
        """The last prompt prepared for step `step` of this session (None when there was none)."""
        found = [e for e in self.prompts() if e.step == step]
        return found[-1] if found else None


def _event(e: Any) -> LineageEvent:
    data = dict(e.data)
    subjects = tuple(data.pop("subjects", ()))
    step = data.pop("step", None)
    task = str(data.pop("task", ""))
    return LineageEvent(e.type, subjects, step, task, data, e.scope, e.created_at, e.position)


def block_table(blocks: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """The report's ``(name, tokens)`` rows as ``{"block", "tokens", "why"}`` rows (compact:
    the why is looked up at read time by :func:`why_of`, only the name and tokens are stored)."""
    return [{"block": name, "tokens": tokens} for name, tokens in blocks]


def why_of(block: str) -> str:
    """Why a block of this name is in a prompt (``messages (n)`` = the live conversation)."""
    if block.startswith("messages"):
        return "the live conversation (what consolidation kept verbatim)"
    return BLOCK_WHY.get(block, "")


# -- what the facade records: events from the results of memory calls ---------------------
def fact_subjects(fact: Any) -> tuple[str, ...]:
    """A fact's subjects: its key and, once stored long-term, its version id ``key#n``."""
    return (fact.key, fact.id) if fact.id else (fact.key,)


def remember_events(remembered: Any, *, step: int | None, threshold: float) -> list[PendingEvent]:
    """Events of one ``remember`` (a :class:`~mindpalace.facts.working.Remembered`): the fact
    ``written`` (with why it was kept where it was), the previous version ``superseded``, and
    what left working memory ``archived`` (kept long-term) or ``tombstoned`` (not kept)."""
    fact = remembered.fact
    long_term = [f for f in remembered.archived if f.key == fact.key and f.id == fact.id and f.id]
    why = (f"importance {fact.importance:g} >= threshold {threshold:g}: kept long-term"
           if long_term and fact.importance >= threshold else
           "corrects a long-term value: kept long-term" if long_term else
           f"importance {fact.importance:g} < threshold {threshold:g}: working memory only")
    out = [PendingEvent("written", fact_subjects(fact), step,
                        data={"where": "long-term" if long_term else "working",
                              "why": why, "importance": fact.importance, "source": fact.source})]
    if long_term:
        out.append(PendingEvent("promoted", fact_subjects(fact), step, data={"why": why}))
    key, _, n = fact.id.partition("#")
    if n.isdigit() and int(n) > 1:
        out.append(PendingEvent("superseded", (key, f"{key}#{int(n) - 1}"), step,
                                data={"by": fact.id}))
    for f in remembered.archived:
        if f.key != fact.key:
            out.append(PendingEvent("archived", fact_subjects(f), step, data={
                "why": f"importance {f.importance:g} >= threshold {threshold:g}: "
                       "archived long-term before eviction from working memory"}))
    for f in remembered.evicted:
        if f.id:
            out.append(PendingEvent("archived", fact_subjects(f), step, data={
                "why": "evicted from working memory; stays recallable long-term"}))
        else:
            out.append(PendingEvent("tombstoned", fact_subjects(f), step, data={
                "why": f"evicted from working memory below the importance threshold {threshold:g}; not kept"}))
    return out


def hit_subjects(tier: str, ref: str, fact: Any = None) -> tuple[str, ...]:
    """The subjects of one recall hit / recalled item: fact key and id, a record name, or a
    ``tier:ref`` reference (``message:7``, ``history:3``)."""
    if fact is not None:
        return fact_subjects(fact)
    ref = str(ref)
    if ref.startswith("fact:"):
        return (ref.removeprefix("fact:"),)
    if tier in ("fact", "working"):
        return (ref,)
    if ":" in ref or tier in ("step", "info", "snapshot"):
        return (ref,)
    return (f"{tier}:{ref}",)


def recall_event(query: str, hits: Sequence[Any], *, step: int | None) -> PendingEvent:
    """One ``recalled`` event for a ``Session.recall`` call: query, and per hit its subjects,
    tier, rank (1-based), score and why it matched."""
    rows = []
    subjects: list[str] = []
    for rank, h in enumerate(hits, 1):
        subj = hit_subjects(h.tier, h.ref, getattr(h, "fact", None))
        subjects.extend(subj)
        rows.append({"subjects": list(subj), "tier": h.tier, "rank": rank,
                     "score": round(float(h.score), 6), "why": str(h.why)})
    return PendingEvent("recalled", tuple(dict.fromkeys(subjects)), step,
                        data={"query": query, "hits": rows, "via": "recall"})


def consolidation_events(c: Any, *, step: int | None, why: str = "") -> list[PendingEvent]:
    """A ``summarized`` event for a consolidation that archived messages into history.jsonl
    (a :class:`~mindpalace.session.consolidator.ConsolidationResult`; [] for None / nothing):
    the messages it came from (``snapshot``: ``message:a-b``), why, and the summary's spend."""
    if c is None or not c.entries:
        return []
    first = c.last_consolidated - c.archived_messages + 1
    return [PendingEvent("summarized", ("history",), step, data={
        "archived_messages": c.archived_messages, "entries": c.entries,
        "snapshot": f"message:{first}-{c.last_consolidated}",
        "why": why or (f"prompt {c.prompt_tokens_before} tokens over budget {c.budget_tokens}: "
                       f"consolidated to {c.prompt_tokens_after}"),
        "summary_tokens": c.summary_tokens_spent, "raw_fallbacks": c.raw_fallbacks})]


def prompt_events(
    report: Any, *, step: int | None, messages: int,
    fact_id: Callable[[str], str] | None = None,
) -> list[PendingEvent]:
    """Events of one prepared prompt (a :class:`~mindpalace.context.ContextReport`): what was
    archived by consolidation (``summarized``), what the recalled-memory block recalled
    (``recalled``, rank and score per item) and the prompt itself (``injected``: the compact
    block table — name and tokens per block —, budget, total, queries, degradations).
    `fact_id` maps a recalled fact's key to its current version id (so a trace by id finds
    the prompts that version went into)."""
    out = consolidation_events(report.consolidation, step=step)
    items = []
    subjects: list[str] = []
    for rank, item in enumerate(report.recalled, 1):
        subj = hit_subjects(item.tier, item.ref)
        if fact_id is not None and item.tier in ("fact", "working") and len(subj) == 1:
            version = fact_id(subj[0])
            subj = (subj[0], version) if version else subj
        subjects.extend(subj)
        items.append({"subjects": list(subj), "tier": item.tier, "rank": rank,
                      "score": round(float(item.score), 6), "why": str(item.why),
                      "tokens": item.tokens})
    if items:
        out.append(PendingEvent("recalled", tuple(dict.fromkeys(subjects)), step, data={
            "query": " | ".join(report.queries), "hits": items, "via": "prompt"}))
    out.append(PendingEvent("injected", tuple(dict.fromkeys(subjects)), step, data={
        "blocks": block_table(report.blocks), "total_tokens": report.total_tokens,
        "budget_tokens": report.budget_tokens, "queries": list(report.queries),
        "recalled": [{"subjects": i["subjects"], "tokens": i["tokens"]} for i in items],
        "degradations": list(report.degradations), "messages": messages,
        "knowledge": list(report.knowledge)}))
    return out


def knowledge_subjects(kind: str, files: Iterable[str]) -> tuple[str, ...]:
    """``knowledge:<user|agent>/<file>`` references (the read_files grammar) of edited files."""
    return tuple(f"knowledge:{kind}/{f}" for f in files)


def activity(store: Store, tenant: str) -> dict[str, float]:
    """Totals over every lineage stream of `tenant` (``mindpalace status``): prompts prepared,
    their mean and peak tokens and peak ratio to the budget, compactions (``summarized``),
    recalls, facts written / tombstoned, knowledge edits. Durable, unlike the in-process
    metrics: it counts what every process recorded."""
    counts = {t: 0 for t in EVENT_TYPES}
    tokens: list[int] = []
    ratio = 0.0
    for scope, name, _ in store.list_streams(Scope(tenant, ANY, ANY, ANY), prefix=STREAM):
        if name != STREAM:
            continue
        for e in store.read_events(scope, STREAM):
            counts[e.type] = counts.get(e.type, 0) + 1
            if e.type == "injected":
                total, budget = int(e.data.get("total_tokens", 0)), int(e.data.get("budget_tokens", 0))
                tokens.append(total)
                ratio = max(ratio, total / budget if budget else 0.0)
    return {"prompts": len(tokens), "prompt_tokens_mean": sum(tokens) / len(tokens) if tokens else 0.0,
            "prompt_tokens_max": max(tokens, default=0), "prompt_budget_ratio_max": round(ratio, 4),
            "compactions": counts["summarized"], "recalls": counts["recalled"],
            "written": counts["written"], "tombstoned": counts["tombstoned"],
            "knowledge_edits": counts["edited"]}
