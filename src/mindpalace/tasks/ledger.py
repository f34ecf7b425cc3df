"""Idempotency ledger: exactly-once side effects across crashes (seed 004's triple booking).

A side-effecting tool call is written to the ledger as ``started`` **before** it runs and, after
it, as ``completed`` (with its result), ``failed`` (the tool said the effect did NOT happen: it
raised :class:`~mindpalace.errors.EffectNotApplied` or returned :data:`NOT_RUN`) or ``unknown``
(it raised anything else after dispatch — a reset connection does not prove the e-mail was not
sent) (I8). Each row is a kv entry
(namespace ``task_ledger``, key ``<task>/<ledger key>``) written in the same transaction as the
matching task event (``tool_call_recorded`` / ``tool_call_completed``), so ledger and task log
never disagree. On a repeat of the same call:

* ``completed`` → the recorded result is returned; the tool is not run again;
* ``failed`` → the tool may run again (a new attempt);
* ``started`` while its owner still runs it (another thread, another live process — see
  :mod:`~mindpalace.tasks.owner`) → :class:`~mindpalace.errors.ToolCallInFlightError` for a
  non-idempotent tool: its outcome is not known *yet*; no reconcile hook is asked and
  :meth:`Ledger.resolve` refuses (either could run the side effect twice);
* ``unknown``, or ``started`` with no outcome and its owner gone (the process died mid-call)
  → for a non-idempotent tool it is **never** re-run automatically: a registered reconcile
  hook is asked, else :class:`~mindpalace.errors.OutcomeUnknownError` is raised (settle it with
  :meth:`Ledger.resolve` / ``mindpalace task resolve``); idempotent / read-only tools
  (``idempotent=True`` or :meth:`Ledger.mark_safe`) simply run again.

The ledger key is the tool name + a hash of the canonical JSON of the arguments (sorted keys,
no whitespace), or an explicit idempotency key.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mindpalace.errors import (
    ConcurrencyError,
    EffectNotApplied,
    NotFoundError,
    OutcomeUnknownError,
    ToolCallInFlightError,
    ValidationError,
)
from mindpalace.tasks.eventstore import LEDGER_NS, EventLike, PreparedEvent, TaskEventStore
from mindpalace.tasks.owner import CallOwner, claim, owner_liveness
from mindpalace.textsafe import clean_json, require_name, require_text

Status = Literal["started", "completed", "failed", "unknown"]
UNSETTLED: tuple[Status, ...] = ("started", "unknown")
"""Statuses whose side effect may or may not have happened (never re-run blindly, I8)."""


class _NotRun:
    """Sentinel a reconcile hook — or the tool itself — returns to say the side effect did NOT
    happen (the call is then recorded ``failed`` and may run again)."""

    def __repr__(self) -> str:
        return "NOT_RUN"


NOT_RUN = _NotRun()
Reconciler = Callable[["LedgerEntry"], Any]
"""``hook(entry)`` → the call's result if it happened, :data:`NOT_RUN` if it did not, None if
it cannot tell (the call stays unknown)."""


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Built once: ``json.dumps`` with options builds an encoder per call (several per tool call)."""


def canonical_json(value: Any) -> str:
    """Normalized JSON: sorted keys, no whitespace, UTF-8 text (equal args ⇒ equal text).

    Raises:
        ValidationError: the value is not JSON-serialisable.
    """
    try:
        return _CANONICAL.encode(clean_json(value))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"tool arguments must be JSON-serialisable: {exc}") from exc


def ledger_key(tool: str, args: dict[str, Any], key: str | None = None) -> str:
    """``<tool>:<explicit key>`` or ``<tool>:<sha256 of canonical args, 32 hex>``.

    Raises:
        InvalidNameError: bad tool name. ValidationError: `args` is not a dict of JSON values.
    """
    require_name(tool, field="tool name")
    if not isinstance(args, dict):
        raise ValidationError(f"tool arguments must be a dict of named JSON values, got {type(args).__name__}")
    if key is not None:
        return f"{tool}:{require_text('idempotency key', key, allow_empty=False)}"
    return f"{tool}:{hashlib.sha256(canonical_json(args).encode()).hexdigest()[:32]}"


def _keyed(tool: str, args: dict[str, Any], key: str | None) -> tuple[str, dict[str, Any]]:
    """(:func:`ledger_key`, the args as the ledger stores them: their canonical JSON parsed
    back) from one serialisation of the args.

    Raises:
        InvalidNameError: bad tool name. ValidationError: `args` is not a dict of JSON values.
    """
    if key is not None:
        return ledger_key(tool, args, key), json.loads(canonical_json(args))
    require_name(tool, field="tool name")
    if not isinstance(args, dict):
        raise ValidationError(f"tool arguments must be a dict of named JSON values, got {type(args).__name__}")
    text = canonical_json(args)
    return f"{tool}:{hashlib.sha256(text.encode()).hexdigest()[:32]}", json.loads(text)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One ledger row: the latest attempt of a keyed tool call."""

    task: str
    key: str
    tool: str
    args: dict[str, Any]
    status: Status
    attempt: int
    idempotent: bool
    result: Any = None
    error: str | None = None
    reconciled: bool = False
    version: int = 0
    """Task version of the event that wrote this row."""
    owner: dict[str, Any] | None = None
    """Who runs (ran) this attempt: :meth:`CallOwner.to_json`; None when not recorded."""

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task, "key": self.key, "tool": self.tool, "args": self.args,
            "status": self.status, "attempt": self.attempt, "idempotent": self.idempotent,
            "result": self.result, "error": self.error, "reconciled": self.reconciled,
            "version": self.version, "owner": self.owner,
        }


def _unknown(task: str, entry: LedgerEntry) -> OutcomeUnknownError:
    return OutcomeUnknownError(task, entry.key, entry.tool, entry.attempt, entry.error or "")


def _normalize_result(result: Any) -> Any:
    """The JSON form stored and returned (a replay returns exactly what the first run did)."""
    try:
        return json.loads(canonical_json(result))
    except ValidationError:
        return {"unserializable_result": repr(result)}


class Ledger:
    """The idempotency ledger of one session scope's tasks.

    Args:
        events: the task event store the ledger events go to (same scope and store).
    """

    def __init__(self, events: TaskEventStore) -> None:
        self.events = events
        self.store = events.store
        self.scope = events.scope
        self._safe: set[str] = set()
        self._reconcilers: dict[str, Reconciler] = {}
        self._lock = threading.Lock()

    # -- configuration ---------------------------------------------------------------------
    def mark_safe(self, *tools: str) -> None:
        """Mark read-only tools as safe to repeat (an unknown outcome simply runs again)."""
        with self._lock:
            self._safe.update(require_name(t, field="tool name") for t in tools)

    def is_safe(self, tool: str) -> bool:
        return tool in self._safe

    def reconciler(self, tool: str, hook: Reconciler) -> None:
        """Register `hook` to settle unknown outcomes of `tool` (e.g. look the booking up by its
        client reference in the external system)."""
        with self._lock:
            self._reconcilers[require_name(tool, field="tool name")] = hook

    # -- rows ------------------------------------------------------------------------------
    def get(self, task: str, key: str) -> LedgerEntry | None:
        raw = self.store.kv_get(self.scope, LEDGER_NS, f"{task}/{key}")
        return None if raw is None else LedgerEntry(**raw)

    def entries(self, task: str) -> list[LedgerEntry]:
        """Every row of `task`, ordered by the task version of each row's latest event."""
        rows = [LedgerEntry(**v) for _, _, v in self.store.kv_list(self.scope, LEDGER_NS, prefix=f"{task}/")]
        return sorted(rows, key=lambda e: e.version)

    def _put(self, entry: LedgerEntry) -> None:
        self.store.kv_put(self.scope, LEDGER_NS, f"{entry.task}/{entry.key}", entry.to_json())

    # -- the protocol ----------------------------------------------------------------------
    def start(
        self, task: str, tool: str, args: dict[str, Any], *, idempotent: bool = False, key: str | None = None,
        owner: CallOwner | None = None,
    ) -> LedgerEntry:
        """Record ``started`` for a call about to run (one transaction with its event).

        Args:
            owner: from :func:`mindpalace.tasks.owner.claim`, held until :meth:`finish` has
                returned: other callers then see the call as in flight. Without one the row
                names no owner, and a repeat treats it as a call whose process died.
        Raises:
            ValidationError: the call is already ``completed`` (use :meth:`prepare` / the result).
            ToolCallInFlightError: a previous attempt of a non-idempotent call is still running.
            OutcomeUnknownError: a previous attempt of a non-idempotent call has no outcome.
        """
        entry = self.begin(task, tool, args, idempotent=idempotent, key=key, owner=owner)
        if entry.status == "completed":
            raise ValidationError(f"tool call {entry.key!r} of task {task!r} already completed; use its recorded result")
        return entry

    def begin(
        self, task: str, tool: str, args: dict[str, Any], *, idempotent: bool = False, key: str | None = None,
        owner: CallOwner | None = None,
    ) -> LedgerEntry:
        """:meth:`start`, except that a call another process completed since this one looked
        (:meth:`prepare`) returns that ``completed`` entry instead of raising: the read and the
        ``started`` row are one write transaction, so two processes never both run it.

        Raises:
            ToolCallInFlightError: a previous attempt of a non-idempotent call is still running.
            OutcomeUnknownError: a previous attempt of a non-idempotent call has no outcome.
        """
        k, clean_args = _keyed(tool, args, key)
        return self._begin(task, tool, k, clean_args, idempotent=idempotent, owner=owner)

    def _begin(
        self, task: str, tool: str, k: str, clean_args: dict[str, Any], *, idempotent: bool,
        owner: CallOwner | None,
    ) -> LedgerEntry:
        """:meth:`begin` with the key and stored args already computed (:func:`_keyed`)."""
        safe = idempotent or self.is_safe(tool)
        with self.events._transaction():  # the task's fold cache follows these appends
            prev = self.get(task, k)
            if prev is not None and prev.status in UNSETTLED and not safe:
                prev = self._unless_running(task, prev)  # re-read if its owner just finished
            if prev is not None and prev.status == "completed":
                return prev
            if prev is not None and prev.status in UNSETTLED and not safe:
                raise _unknown(task, prev)
            attempt = 1 if prev is None else prev.attempt + 1
            data: dict[str, Any] = {"key": k, "tool": tool, "args": clean_args, "idempotent": safe, "attempt": attempt}
            who = None if owner is None else owner.to_json()
            if who is not None:
                data["owner"] = who
            # validated once, by the append (a model would be twice)
            [rec] = self.events.append(task, [("tool_call_recorded", data)])
            entry = LedgerEntry(task, k, tool, clean_args, "started", attempt, safe, version=rec.version, owner=who)
            self._put(entry)
        return entry

    def _unless_running(self, task: str, entry: LedgerEntry, *, force: bool = False) -> LedgerEntry | None:
        """`entry` when it is not a ``started`` row whose owner still runs it; when the owner is
        gone, the row as it is now (an owner writes its outcome before it lets go of the call,
        so a row that changed since `entry` was read is re-judged; None: it was removed).

        Args:
            force: treat an owner on another host (``"unchecked"``) as gone — a person's word.
        Raises:
            ToolCallInFlightError: the owner runs it (or cannot be checked, without `force`).
        """
        while entry.status == "started":
            owner = CallOwner.from_json(entry.owner)
            liveness = owner_liveness(owner)
            if owner is not None and (liveness == "alive" or (liveness == "unchecked" and not force)):
                raise ToolCallInFlightError(task, entry.key, entry.tool, entry.attempt, owner.describe(),
                                            checked=liveness == "alive")
            now = self.get(task, entry.key)
            if now is None or (now.attempt, now.status, now.version) == (entry.attempt, entry.status, entry.version):
                return now
            entry = now
        return entry

    def finish(
        self,
        entry: LedgerEntry,
        *,
        result: Any = None,
        error: str | None = None,
        unknown: bool = False,
        reconciled: bool = False,
        also: Sequence[EventLike] = (),
    ) -> LedgerEntry:
        """Record the outcome of a started call: ``completed`` with `result`; ``failed`` when
        `error` is given (the effect did not happen); ``unknown`` when `unknown` (the call raised
        `error` after dispatch: it may have happened). `also`: task events appended after the
        outcome in the same append (one commit — e.g. the step's checkpoint); not written when
        the row was settled meanwhile.

        The row is re-read inside the write transaction: when it was settled meanwhile (a
        ``task resolve`` by hand, or another attempt), the first outcome stands and is returned
        — a late writer never overwrites it."""
        status: Status = "unknown" if unknown else "failed" if error is not None else "completed"
        value = None if error is not None or unknown else _normalize_result(result)
        events: list[EventLike] = [
            ("tool_call_completed", {"key": entry.key, "tool": entry.tool, "status": status, "result": value,
                                     "error": error, "reconciled": reconciled}), *also]
        with self.events._transaction():  # the task's fold cache follows these appends
            rec = None
            if entry.version:
                # Every write of a ledger row appends an event to its task in the same
                # transaction: when the task is still at the version `entry` was written at,
                # the row is still `entry` — no need to read it back. Otherwise (another event
                # came first) the append writes nothing and the row is read below.
                try:
                    rec, *_ = self.events.append(entry.task, events, expected_version=entry.version)
                except ConcurrencyError:
                    rec = None
            if rec is None:
                current = self.get(entry.task, entry.key)
                if current is not None and (current.attempt != entry.attempt or current.status not in UNSETTLED
                                            or (current.status == "unknown" and not reconciled)):
                    return current
                rec, *_ = self.events.append(entry.task, events)
            done = LedgerEntry(
                entry.task, entry.key, entry.tool, entry.args, status, entry.attempt, entry.idempotent,
                result=value, error=error, reconciled=reconciled, version=rec.version,
            )
            self._put(done)
        return done

    def resolve(
        self, task: str, key: str, *, result: Any = None, error: str | None = None, force: bool = False
    ) -> LedgerEntry:
        """Settle an unknown outcome by hand (after checking the external system): `result` if
        it happened, `error` if it did not (the call may then run again). Returns the settled
        entry: if the live call settled it first (between this check and the write), that
        outcome stands and is returned.

        A ``started`` call whose owner still runs it is refused (its outcome is not known yet).
        `force` settles one whose owner is on another host and cannot be checked from here —
        only when you know that process is gone; it never overrides a provably live owner.

        Raises:
            NotFoundError: no such ledger row. ValidationError: the row is not ``started`` or
                ``unknown``, or `result` is not JSON (NaN, Infinity, a set, nested over 64
                levels) — nothing is recorded.
            ToolCallInFlightError: the call is running now (nothing is recorded).
        """
        try:  # a person's answer is input: refused, not wrapped like a tool's odd return value
            json.dumps(clean_json(result), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"ledger entry {key!r}: the result must be JSON: {exc}") from exc
        entry = self.get(task, key)
        if entry is not None:
            entry = self._unless_running(task, entry, force=force)
        if entry is None:
            raise NotFoundError("ledger entry", key, self.scope)
        if entry.status not in UNSETTLED:
            raise ValidationError(f"ledger entry {key!r} is already {entry.status}; nothing to resolve")
        return self.finish(entry, result=result, error=error, reconciled=True)

    def prepare(
        self, task: str, tool: str, args: dict[str, Any], *, idempotent: bool = False, key: str | None = None
    ) -> LedgerEntry | None:
        """What a repeat of this call must do: the ``completed`` entry to reuse, or None to run.

        An unknown outcome of a non-idempotent call is handed to the tool's reconcile hook:
        a result → recorded as completed (reconciled) and returned; :data:`NOT_RUN` → recorded as
        failed and the call may run. With no hook, or a hook that cannot tell:

        Raises:
            OutcomeUnknownError: never re-run automatically (I8).
            ToolCallInFlightError: the call is running now (the hook is not asked).
        """
        return self._prepare(task, tool, ledger_key(tool, args, key), idempotent=idempotent)

    def _prepare(self, task: str, tool: str, k: str, *, idempotent: bool) -> LedgerEntry | None:
        """:meth:`prepare` with the ledger key already computed."""
        entry = self.get(task, k)
        if entry is None or entry.status == "failed":
            return None
        if entry.status == "completed":
            return entry
        if idempotent or entry.idempotent or self.is_safe(tool):
            return None
        entry = self._unless_running(task, entry)  # never ask a hook about a running call
        if entry is None or entry.status == "failed":
            return None
        if entry.status == "completed":
            return entry
        hook = self._reconcilers.get(tool)
        verdict = hook(entry) if hook is not None else None
        if verdict is None:
            raise _unknown(task, entry)
        if verdict is NOT_RUN:
            self.finish(entry, error="reconciled: the side effect did not happen", reconciled=True)
            return None
        return self.finish(entry, result=verdict, reconciled=True)


@dataclass
class ToolCall:
    """One keyed tool call, exactly once: ``result = call.result if call.done else call.run(fn)``.

    ``run(fn)`` calls ``fn(**args)`` between the ``started`` row and its outcome: its result is
    recorded ``completed``; :class:`~mindpalace.errors.EffectNotApplied` raised by `fn` (or
    :data:`NOT_RUN` returned) is recorded ``failed`` (the call may run again); any other
    exception is recorded ``unknown`` — it was raised after dispatch, so the effect may have
    happened and a non-idempotent call is not re-run until a reconcile hook or
    ``Task.resolve`` settles it. The tool's exception is re-raised either way. `before_run` (guards) runs
    before ``started`` is written and may refuse; `after_run` sees the result (constraint
    screening). Both are optional hooks the task facade supplies.

    A completed call returns its recorded result even for idempotent / read-only tools (a
    resumed agent sees exactly what the first run saw); pass a different ``key`` to fetch
    fresh data. ``idempotent`` only changes what happens to a call with an unknown outcome:
    it simply runs again.
    """

    ledger: Ledger
    task: str
    tool: str
    args: dict[str, Any]
    idempotent: bool = False
    key: str | None = None
    before_run: Callable[[str, dict[str, Any]], None] | None = None
    after_run: Callable[[str, Any], Any] | None = None
    entry: LedgerEntry | None = None
    notes: list[Any] = field(default_factory=list)
    _key_args: tuple[str, dict[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)

    def _key_and_args(self) -> tuple[str, dict[str, Any]]:
        """(ledger key, stored args), computed once per call (one canonical serialisation)."""
        if self._key_args is None:
            self._key_args = _keyed(self.tool, self.args, self.key)
        return self._key_args

    def __enter__(self) -> ToolCall:
        if self.key is not None:  # the args are not needed (nor checked) to look the key up
            k = ledger_key(self.tool, self.args, self.key)
        else:
            k, _ = self._key_and_args()
        self.entry = self.ledger._prepare(self.task, self.tool, k, idempotent=self.idempotent)
        return self

    def __exit__(self, *exc: object) -> None:
        # Nothing to do: a call started but not finished stays `started` — the honest record
        # of a side effect whose outcome nobody knows.
        return None

    @property
    def done(self) -> bool:
        """True when the call already completed (now or in an earlier run / process)."""
        return self.entry is not None and self.entry.status == "completed"

    @property
    def result(self) -> Any:
        """The recorded result. Raises ValidationError when the call has not completed."""
        if not self.done:
            raise ValidationError(f"tool call {self.tool!r} has no recorded result yet; call run(fn)")
        return self.entry.result  # type: ignore[union-attr]

    def run(self, fn: Callable[..., Any], *, checkpoint: Mapping[str, Any] | None = None) -> Any:
        """Run the tool once (or return the recorded result); returns its JSON-normalized result.

        Args:
            checkpoint: ``step`` / ``artifacts`` / ``pending`` of a task checkpoint (as
                :meth:`mindpalace.tasks.Task.checkpoint`) written with the ``completed`` outcome
                in ONE commit — a durable tool step costs two commits (``started`` before the
                tool runs, outcome + checkpoint after) instead of three. Written only by the run
                that completes the call; a replay of a completed call writes nothing.
        Raises:
            ValidationError: `checkpoint` does not fit a checkpoint event (before anything runs).
            ToolCallInFlightError: the same call is running now in another thread or process.
            OutcomeUnknownError: an earlier attempt of this non-idempotent call has no outcome.
        """
        if self.done:
            return self.result
        also = [] if checkpoint is None else [self._checkpoint_event(checkpoint)]
        if self.before_run is not None:
            self.before_run(self.tool, self.args)
        k, clean_args = self._key_and_args()
        # The claim marks the call running in this process until its outcome is written: a
        # repeat meanwhile (another thread or process) is told it is in flight, not unknown.
        with claim() as owner:
            started = self.ledger._begin(self.task, self.tool, k, clean_args, idempotent=self.idempotent,
                                         owner=owner)
            if started.status == "completed":  # another process ran it since __enter__ looked
                self.entry = started
                return started.result
            self.entry, not_run = self._outcome(started, fn, also)
        if not_run:
            return NOT_RUN
        if self.after_run is not None:
            self.notes.extend(self.after_run(self.tool, self.entry.result) or [])
        return self.entry.result

    def _outcome(
        self, started: LedgerEntry, fn: Callable[..., Any], also: Sequence[EventLike]
    ) -> tuple[LedgerEntry, bool]:
        """Run `fn` and record its outcome: (the row after it, True when `fn` returned
        :data:`NOT_RUN`). The tool's exception is re-raised once its outcome is recorded."""
        try:
            value = fn(**self.args)
        except EffectNotApplied as exc:
            self.entry = self.ledger.finish(started, error=f"{type(exc).__name__}: {exc}")
            raise
        except BaseException as exc:  # also KeyboardInterrupt / SystemExit: it may have happened
            self.entry = self.ledger.finish(started, error=f"{type(exc).__name__}: {exc}", unknown=True)
            raise
        if value is NOT_RUN:
            return self.ledger.finish(started, error="the tool returned NOT_RUN: the side effect did not happen"), True
        return self.ledger.finish(started, result=value, also=also), False

    def _checkpoint_event(self, checkpoint: Mapping[str, Any]) -> PreparedEvent:
        if not isinstance(checkpoint, Mapping):
            raise ValidationError(f"checkpoint must be a mapping (step, artifacts, pending), got {type(checkpoint).__name__}")
        data = dict(checkpoint)
        data["artifacts"] = clean_json(data.get("artifacts") or {})
        # Validated and encoded now, once, and written as is with the outcome: refused after
        # the tool ran, the side effect would have happened with no outcome recorded (every
        # retry: OutcomeUnknownError).
        return self.ledger.events.prepare(("checkpoint", data))
