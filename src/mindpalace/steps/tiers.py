"""Step tiers of one session (seed 000, TuriX): pending → recent → summary, in ONE kv entry.

The whole tier state — pending lines, recent lines, summary blocks, the working checkpoint
(seed 003) and the counters — is one JSON value at kv ``("steps", "tiers")``. Every transition
(begin, evaluate, compaction, sweep, checkpoint, migration) replaces it in one store
transaction together with a small journal event on the session stream ``steps`` whose version
is the state's version. The transition runs on the state re-read inside that transaction, and
the append uses ``expected_version``, so a second writer on the same session never overwrites
(I6), and a kill -9 between any two writes leaves either the old or the new state, never half
of one.

The state objects are immutable (tuples, frozen dataclasses); a transition builds a new state
that is swapped in only after its transaction committed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from mindpalace.errors import ConcurrencyError
from mindpalace.scope import Scope
from mindpalace.store import NewEvent, Store
from mindpalace.tokens import TokenCounter

KV_NAMESPACE: Final = "steps"
KV_KEY: Final = "tiers"
JOURNAL_STREAM: Final = "steps"
FORMAT: Final = 2  # 1 (and TuriX's memory.jsonl) kept pending lines inside recent

PENDING: Final = "pending"
UNKNOWN: Final = "unknown"

COUNTER_NAMES: Final = (
    "steps_begun",
    "steps_evaluated",
    "orphans_swept",
    "warnings",
    "compactions",
    "compaction_failures",
    "summary_compactions",
    "summary_compaction_failures",
    "compaction_skipped",
    "migrations",
    "repeats_folded",
)

_LINE = re.compile(r"^Step (\d+) \| Eval: (.*?) \| Goal: (.*)$", re.DOTALL)


def one_line(text: str, max_chars: int) -> str:
    """`text` with whitespace runs collapsed to single spaces, cut to `max_chars` with "…"."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= max_chars else flat[: max_chars - 1] + "…"


def step_line(step_id: int, evaluation: str, goal: str, max_chars: int) -> str:
    """``Step N | Eval: <evaluation> | Goal: <goal>`` on one line of at most `max_chars`."""
    head = f"Step {step_id} | Eval: {one_line(evaluation, 80)} | Goal: "
    return head + one_line(goal, max(10, max_chars - len(head)))


def parse_step_line(line: str) -> tuple[int, str, str] | None:
    """(step id, evaluation, goal) of a tier line, None for anything else."""
    m = _LINE.match(line.strip())
    return (int(m.group(1)), m.group(2), m.group(3)) if m else None


@dataclass(frozen=True, slots=True)
class PendingStep:
    """A begun, not yet evaluated step; its line is not counted against the budget B."""

    step: int
    goal: str
    action: str
    line: str


@dataclass(frozen=True, slots=True)
class RecentLine:
    """An evaluated step line in the recent tier.

    ``repeat_key`` identifies a failed step (its action — tool and arguments —, evaluation,
    analysis and tool outputs); later attempts with the same key are folded into this line,
    ``count`` says how many attempts it stands for (seed 004 checklist item 8)."""

    step: int
    line: str
    repeat_key: str = ""
    count: int = 1


@dataclass(frozen=True, slots=True)
class SummaryBlock:
    """One summary in the summary tier and where its raw text is (``raw`` = snapshot record)."""

    text: str
    first_step: int
    last_step: int
    raw: str

    def render(self) -> str:
        return f"[steps {self.first_step}-{self.last_step} · raw: {self.raw}] {self.text}"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The working checkpoint of seed 003: what the agent must not lose mid-task."""

    key_info: str = ""
    related_sop: str = ""
    updated_at: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.key_info or self.related_sop)


@dataclass(frozen=True, slots=True)
class TierState:
    """The full step-memory state of one session. Immutable; transitions return new states."""

    next_step: int = 1
    pending: tuple[PendingStep, ...] = ()
    recent: tuple[RecentLine, ...] = ()
    summary: tuple[SummaryBlock, ...] = ()
    checkpoint: Checkpoint = Checkpoint()
    counters: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_NAMES, 0))

    # -- derived views -------------------------------------------------------------------
    def recent_text(self) -> str:
        return "\n".join(r.line for r in self.recent)

    def summary_text(self) -> str:
        return "\n".join(b.render() for b in self.summary)

    def pending_text(self) -> str:
        return "\n".join(p.line for p in self.pending)

    def recent_tokens(self, counter: TokenCounter) -> int:
        """Tokens of the recent tier: per line (cached) plus one per newline — errs high (I9)."""
        return lines_tokens((r.line for r in self.recent), counter)

    def summary_tokens(self, counter: TokenCounter) -> int:
        return lines_tokens((b.render() for b in self.summary), counter)

    def bump(self, **deltas: int) -> TierState:
        counters = dict(self.counters)
        for name, delta in deltas.items():
            counters[name] = counters.get(name, 0) + delta
        return replace(self, counters=counters)

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "next_step": self.next_step,
            "pending": [[p.step, p.goal, p.action, p.line] for p in self.pending],
            "recent": [[r.step, r.line, r.repeat_key, r.count] if r.repeat_key else [r.step, r.line]
                       for r in self.recent],
            "summary": [[b.text, b.first_step, b.last_step, b.raw] for b in self.summary],
            "checkpoint": {
                "key_info": self.checkpoint.key_info,
                "related_sop": self.checkpoint.related_sop,
                "updated_at": self.checkpoint.updated_at,
            },
            "counters": dict(self.counters),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TierState:
        counters = dict.fromkeys(COUNTER_NAMES, 0)
        counters.update({str(k): int(v) for k, v in (data.get("counters") or {}).items()})
        cp = data.get("checkpoint") or {}
        return cls(
            next_step=int(data.get("next_step", 1)),
            pending=tuple(PendingStep(int(s), g, a, ln) for s, g, a, ln in data.get("pending", [])),
            recent=tuple(
                RecentLine(int(r[0]), r[1], *((str(r[2]), int(r[3])) if len(r) == 4 else ()))
                for r in data.get("recent", [])
            ),
            summary=tuple(SummaryBlock(t, int(a), int(b), r) for t, a, b, r in data.get("summary", [])),
            checkpoint=Checkpoint(cp.get("key_info", ""), cp.get("related_sop", ""), cp.get("updated_at")),
            counters=counters,
        )


def lines_tokens(lines: Iterable[str], counter: TokenCounter) -> int:
    total = n = 0
    for line in lines:
        total += counter.count(line)
        n += 1
    return total + max(0, n - 1)


# -- legacy migration --------------------------------------------------------------------
def is_legacy(data: Mapping[str, Any]) -> bool:
    """True for a state written before format 2 (or in TuriX's memory.jsonl shape)."""
    return data.get("format") != FORMAT


def _as_lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [ln for ln in value.splitlines() if ln.strip()]
    out: list[str] = []
    for item in value:
        if isinstance(item, list | tuple):  # format-1 [step, line] pairs
            out.append(str(item[-1]))
        elif isinstance(item, dict):
            out.append(str(item.get("line", "")))
        else:
            out.append(str(item))
    return [ln for ln in out if ln.strip()]


def migrate_legacy(data: Mapping[str, Any]) -> TierState:
    """Build a format-2 state from a legacy layout.

    Accepted shapes: format 1 (``recent`` as lines or [step, line] pairs, pending lines mixed
    into it, ``summary`` as text or a list) and TuriX's keys (``pending_recent_memory``,
    ``recent_memory``, ``summary_memory``). Lines of recent that still say ``Eval: pending``
    move to pending; nothing is dropped: an unparseable recent line stays in recent under the
    step number of the line before it.
    """
    recent_src = _as_lines(data.get("recent", data.get("recent_memory")))
    pending_src = _as_lines(data.get("pending", data.get("pending_recent_memory")))
    summary_src = data.get("summary", data.get("summary_memory"))
    pending: list[PendingStep] = []
    recent: list[RecentLine] = []
    last = 0
    for line in pending_src + recent_src:
        parsed = parse_step_line(line)
        if parsed is None:
            recent.append(RecentLine(last, line))
            continue
        step, evaluation, goal = parsed
        last = max(last, step)
        if evaluation.strip().lower() == PENDING:
            if all(p.step != step for p in pending):
                pending.append(PendingStep(step, goal, "", line))
        else:
            recent.append(RecentLine(step, line))
    blocks: list[SummaryBlock] = []
    if isinstance(summary_src, str) and summary_src.strip():
        blocks.append(SummaryBlock(summary_src.strip(), 1, last, "legacy"))
    elif isinstance(summary_src, list):
        for item in summary_src:
            if isinstance(item, list | tuple) and len(item) == 4:
                blocks.append(SummaryBlock(str(item[0]), int(item[1]), int(item[2]), str(item[3])))
            elif str(item).strip():
                blocks.append(SummaryBlock(str(item).strip(), 1, last, "legacy"))
    steps_seen = [p.step for p in pending] + [r.step for r in recent] + [b.last_step for b in blocks]
    next_step = max(int(data.get("next_step", 1)), max(steps_seen, default=0) + 1)
    base = TierState.from_json({"checkpoint": data.get("checkpoint"), "counters": data.get("counters")})
    state = replace(
        base, next_step=next_step, pending=tuple(sorted(pending, key=lambda p: p.step)),
        recent=tuple(recent), summary=tuple(blocks),
    )
    return state.bump(migrations=1)


# -- persistence ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Transition:
    """What a transition function returns: the new state, a journal entry and extra writes
    (e.g. a step record) that must commit in the same transaction."""

    state: TierState
    op: str
    data: dict[str, Any] = field(default_factory=dict)
    writes: Callable[[], None] | None = None


class TierStore:
    """Loads and atomically replaces the tier state of one session scope."""

    def __init__(self, store: Store, scope: Scope) -> None:
        self.store = store
        self.scope = scope.require_concrete()
        self._state: TierState | None = None
        self._version = 0

    @property
    def state(self) -> TierState:
        if self._state is None:
            self.reload()
        assert self._state is not None
        return self._state

    @property
    def version(self) -> int:
        """Journal version of the cached state (0 = never written)."""
        self.state  # noqa: B018 - loads on first use
        return self._version

    def reload(self) -> TierState:
        """Re-read the state from the store, migrating a legacy layout (committed at once)."""
        with self.store.transaction():
            raw = self.store.kv_get(self.scope, KV_NAMESPACE, KV_KEY)
            self._version = self.store.stream_version(self.scope, JOURNAL_STREAM)
        if raw is None:
            self._state = TierState()
        elif is_legacy(raw):
            self._state = TierState()  # placeholder until the migration commits
            self.apply(lambda _s: Transition(migrate_legacy(raw), "migrate", {"from": raw.get("format")}))
        else:
            self._state = TierState.from_json(raw)
        return self._state

    def refresh(self) -> TierState:
        """Reload only if another writer moved the journal since the cached state (one read)."""
        if self._state is None or self.store.stream_version(self.scope, JOURNAL_STREAM) != self._version:
            return self.reload()
        return self._state

    def apply(self, fn: Callable[[TierState], Transition]) -> Transition:
        """Run transition `fn` on the current state and commit it atomically.

        The state is re-read (when another writer moved the journal) inside the write
        transaction, so `fn` always runs on the latest committed state: with a store whose
        transactions serialize writers (SQLite's BEGIN IMMEDIATE) concurrent writers never
        conflict. The journal append still checks the version; on a conflict (a store with
        weaker isolation) the state is reloaded and `fn` runs once more; a second conflict
        raises ConcurrencyError. `fn` must be pure apart from its ``writes``.
        """
        for attempt in range(2):
            try:
                with self.store.transaction():
                    current = self.refresh()
                    result = fn(current)
                    self.store.append_events(
                        self.scope, JOURNAL_STREAM, [NewEvent(result.op, result.data)],
                        expected_version=self._version,
                    )
                    if result.writes is not None:
                        result.writes()
                    self.store.kv_put(self.scope, KV_NAMESPACE, KV_KEY, result.state.to_json())
            except ConcurrencyError:
                if attempt:
                    raise
                self._state = None  # reloaded on the next attempt
                continue
            self._state = result.state
            self._version += 1
            return result
        raise AssertionError("unreachable")  # pragma: no cover
