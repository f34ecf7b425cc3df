"""`StepMemory`: the step-memory component of one session (seeds 000 and 003), its public API."""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from mindpalace.checks import require_int
from mindpalace.errors import NotFoundError, ValidationError
from mindpalace.lineage import Lineage
from mindpalace.scope import Scope
from mindpalace.settings import StepSettings
from mindpalace.steps.checkpoint import SUMMARY_STREAM, extract_summary
from mindpalace.steps.compaction import CompactionResult, Compactor
from mindpalace.steps.index import render_index
from mindpalace.steps.records import (
    OUTPUT,
    STEP,
    ReadResult,
    RecordBook,
    output_record_name,
    step_record_name,
)
from mindpalace.steps.tiers import (
    PENDING,
    UNKNOWN,
    Checkpoint,
    PendingStep,
    RecentLine,
    SummaryBlock,
    TierState,
    TierStore,
    Transition,
    one_line,
    step_line,
)
from mindpalace.store import NewEvent, Record, Store
from mindpalace.summary import Summarizer
from mindpalace.textsafe import clean_text, require_text
from mindpalace.timeutil import to_iso, utcnow
from mindpalace.tokens import TokenCounter

log = logging.getLogger("mindpalace.steps")
# A library logs, the application decides where it goes: no stderr spam via logging.lastResort.
log.addHandler(logging.NullHandler())

StepRef = int
SUCCESS = "success"  # an evaluation starting with it is not an error: never folded as a repeat


class StepMemory:
    """Pending → recent → summary step tiers, step/info/snapshot records, the memory index, the
    working checkpoint and the ``<summary>`` lines of one session.

    Example:
        >>> step = s.steps.begin("search Senso-ji opening hours", action="web_search(...)")  # doctest: +SKIP
        >>> s.steps.evaluate(step, "success", analysis="free entry, 6:00-17:00")          # doctest: +SKIP
        >>> s.steps.index()[0]                                                             # doctest: +SKIP
        '- step_1 (step, step 1): Step 1 (success): search Senso-ji opening hours'

    Tiers (seed 000): ``begin`` adds ``Step N | Eval: pending | Goal: …`` to *pending* (at most
    ``pending_max_lines``, not counted against B; the oldest is swept as an orphan when full).
    ``evaluate`` moves it to *recent* with its result and saves the record ``step_N``. Recent
    over ``warn_ratio``·B logs a warning; over ``hard_ratio``·B it is compacted (snapshot first,
    gated summary); the summary tier over ``summary_budget_multiplier``·B is compacted again.
    All of it survives restarts exactly (one kv entry per transition, see ``tiers``).

    Args:
        store: the store protocol (tiers, records, ``<summary>`` lines).
        scope: the session scope; every read and write is filtered by it (I10).
        counter: the token counter (tier budgets, I9).
        summarizer: the LLM behind the one summary gate, used by compaction (I3).
        settings: ``[steps]`` (budget B, ratios, pending size, index size …).
    """

    def __init__(
        self,
        store: Store,
        scope: Scope,
        *,
        counter: TokenCounter,
        summarizer: Summarizer,
        settings: StepSettings | None = None,
        lineage: Lineage | None = None,
    ) -> None:
        self.store = store
        self.lineage = lineage  # step records written and tiers summarized (seed 001 §5.3)
        self.scope = scope.require_concrete()
        self.settings = settings or StepSettings()
        self.counter = counter
        self.book = RecordBook(store, self.scope)
        self.tiers = TierStore(store, self.scope)
        self._lock = threading.RLock()
        self.compactor = Compactor(self.book, counter, self.settings, summarizer)

    # -- state views ---------------------------------------------------------------------
    @property
    def state(self) -> TierState:
        """The current tier state (immutable)."""
        return self.tiers.state

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.state.counters)

    @property
    def records(self) -> RecordBook:
        """The session's named records (step / info / snapshot)."""
        return self.book

    def reload(self) -> TierState:
        """Drop the cached state and read it again from the store."""
        with self._lock:
            return self.tiers.reload()

    def clear(self) -> dict[str, int]:
        """End of a task (seed 004 checklist items 7 and 10): empty the tiers and delete every
        step / info / snapshot record of the session with the search documents they were
        indexed as, in one store transaction. Step numbers go on (the next step is not
        ``step_1`` again, so kept logs never name two different steps alike) while the
        counters start afresh; ``<summary>`` lines and the tier journal are event logs and stay.

        Returns:
            ``{"records": n, "step_state": 0 or 1}`` — what was removed.
        """
        with self._lock, self.store.transaction():
            names = [r.name for r in self.store.list_records(self.scope)]
            removed = self.store.delete_records(self.scope, names)
            had_state = self.tiers.state != TierState(next_step=self.tiers.state.next_step)
            self.tiers.apply(lambda s: Transition(TierState(next_step=s.next_step), "clear",
                                                  {"records": removed}))
        return {"records": removed, "step_state": int(had_state)}

    def refresh(self) -> TierState:
        """The latest committed state: reloaded only when another writer (thread or process)
        committed a transition since this object last saw the state."""
        with self._lock:
            return self.tiers.refresh()

    # -- steps ---------------------------------------------------------------------------
    def begin(self, goal: str, *, action: str = "") -> StepRef:
        """Start a step: a pending line ``Step N | Eval: pending | Goal: <goal>``; returns N.

        Raises:
            InvalidTextError: `goal` is empty or not storable text.
        """
        goal = clean_text(require_text("goal", goal, allow_empty=False))
        action = clean_text(require_text("action", action))
        cap = self.settings.line_max_chars

        def fn(state: TierState) -> Transition:
            step_id = state.next_step
            pending = state.pending
            orphans: list[PendingStep] = []
            while len(pending) >= self.settings.pending_max_lines:
                orphans.append(pending[0])
                pending = pending[1:]
            line = step_line(step_id, PENDING, goal, cap)
            new = replace(
                state, next_step=step_id + 1,
                pending=(*pending, PendingStep(step_id, goal, action, line)),
            ).bump(steps_begun=1)
            new, writes = self._sweep(new, orphans, "pending buffer full")
            return Transition(new, "begin", {"step": step_id, "orphans": [o.step for o in orphans]}, writes)

        with self._lock:
            result = self.tiers.apply(fn)
            self._maybe_compact(result.data["step"])
            return int(result.data["step"])

    def evaluate(
        self,
        step: StepRef,
        evaluation: str,
        *,
        analysis: str = "",
        tool_outputs: Sequence[str] = (),
    ) -> Record:
        """Evaluate a pending step: its line moves to recent and the record ``step_N`` is saved.

        Args:
            step: the id `begin` returned.
            evaluation: ``"success"``, ``"failed"`` or free text (kept on one line in the tier,
                in full in the record).
            analysis: what was learned (record only).
            tool_outputs: raw tool results (record only, each cut to
                ``record_tool_output_max_chars`` characters in ``step_N``; a longer one is also
                kept whole, byte for byte, in the record ``step_N.output_I`` (1-based I) that
                the cut names; NUL and lone surrogates escaped).

        A failed attempt that repeats one still in the recent tier — same action (tool and
        arguments; the goal when there is no action), evaluation, analysis and tool outputs —
        is stored once with a count (seed 004 checklist item 8: the same error in a loop is not
        written to memory once per attempt): the earlier line moves to the end of recent as
        ``Step N | Eval: failed (×3, last step M) | …`` and its record ``step_N`` says how many
        attempts it stands for; no line or record is added for step M.

        Returns:
            The saved step record (for a folded repeat, the updated record of the first attempt).

        Raises:
            NotFoundError: `step` is not pending (never begun, already evaluated or swept).
            InvalidTextError: `evaluation` is empty, or any text is not storable.
            ValidationError: `tool_outputs` is not a text or a list of texts.
        """
        step_id = _step_id(step)
        evaluation = clean_text(require_text("evaluation", evaluation, allow_empty=False))
        analysis = clean_text(require_text("analysis", analysis))
        if isinstance(tool_outputs, str):  # one output, not one per character
            tool_outputs = [tool_outputs]
        elif not isinstance(tool_outputs, list | tuple):
            raise ValidationError("tool_outputs must be a list of texts (or one text), got "
                                  f"{type(tool_outputs).__name__}")
        # Tool output is untrusted bulk text: NUL / lone surrogates are escaped, not refused
        # (textsafe.clean_text), so a binary result never loses the step's evaluation.
        outputs = [
            require_text(f"tool_outputs[{i}]", clean_text(o) if isinstance(o, str) else o)
            for i, o in enumerate(tool_outputs)
        ]
        saved: list[Record] = []

        def fn(state: TierState) -> Transition:
            found = next((p for p in state.pending if p.step == step_id), None)
            if found is None:
                raise NotFoundError("pending step", step_id, self.scope)
            key = repeat_key(found, evaluation, analysis, outputs)
            first = next((r for r in reversed(state.recent) if key and r.repeat_key == key), None)
            if first is not None:
                return self._fold_repeat(state, found, first, evaluation, analysis, outputs, saved)
            new = self._promote(state, found, evaluation, key).bump(steps_evaluated=1)
            new = self._warn(new, step_id)

            def writes() -> None:
                saved.append(self._put_step_record(found, evaluation, analysis, outputs))
                if self.lineage is not None:
                    self.lineage.record("written", [saved[-1].name], step=step_id,
                                        why=f"step {step_id} evaluated: {one_line(evaluation, 80)}")

            return Transition(new, "evaluate", {"step": step_id}, writes)

        with self._lock:
            self.tiers.apply(fn)
            self._maybe_compact(step_id)
        return saved[0]

    def sweep_orphans(self, reason: str = "model call failed") -> list[int]:
        """Mark every pending line ``Eval: unknown``, move it to recent and save its record.

        Call it when the model call that would have evaluated them failed (seed 000
        ``_sweep_orphaned_pending``). Returns the swept step ids (oldest first).
        """
        reason = one_line(require_text("reason", reason), 200)

        def fn(state: TierState) -> Transition:
            orphans = list(state.pending)
            new, writes = self._sweep(replace(state, pending=()), orphans, reason)
            new = self._warn(new, orphans[-1].step if orphans else 0)
            return Transition(new, "sweep", {"steps": [o.step for o in orphans]}, writes)

        with self._lock:
            result = self.tiers.apply(fn)
            swept = list(result.data["steps"])
            if swept:
                self._maybe_compact(swept[-1])
        return swept

    def _promote(self, state: TierState, p: PendingStep, evaluation: str, key: str = "") -> TierState:
        line = step_line(p.step, evaluation, p.goal, self.settings.line_max_chars)
        return replace(
            state,
            pending=tuple(x for x in state.pending if x.step != p.step),
            recent=(*state.recent, RecentLine(p.step, line, key)),
        )

    def _fold_repeat(
        self, state: TierState, p: PendingStep, first: RecentLine, evaluation: str, analysis: str,
        outputs: list[str], saved: list[Record],
    ) -> Transition:
        """Evaluate `p` as one more attempt of the failed step `first` (same repeat key)."""
        count = first.count + 1
        shown = f"{evaluation} (×{count}, last step {p.step})"
        line = step_line(first.step, shown, p.goal, self.settings.line_max_chars)
        folded = RecentLine(first.step, line, first.repeat_key, count)
        new = replace(
            state,
            pending=tuple(x for x in state.pending if x.step != p.step),
            recent=(*(r for r in state.recent if r != first), folded),
        ).bump(steps_evaluated=1, repeats_folded=1)
        new = self._warn(new, p.step)
        repeated = f"Repeated: {count} attempts with the same action and outcome (steps {first.step}–{p.step})"

        def writes() -> None:
            saved.append(self._put_step_record(
                replace(p, step=first.step), evaluation, analysis, outputs, repeated=(count, repeated),
            ))

        return Transition(new, "evaluate", {"step": p.step, "repeat_of": first.step, "count": count}, writes)

    def _sweep(
        self, state: TierState, orphans: list[PendingStep], reason: str
    ) -> tuple[TierState, Callable[[], None] | None]:
        if not orphans:
            return state, None
        for p in orphans:
            state = self._promote(replace(state, pending=(*state.pending, p)), p, UNKNOWN)
        state = state.bump(orphans_swept=len(orphans))

        def writes() -> None:
            for p in orphans:
                self._put_step_record(p, UNKNOWN, f"orphaned pending step: {reason}", [])

        return state, writes

    def _put_step_record(
        self, p: PendingStep, evaluation: str, analysis: str, outputs: list[str],
        repeated: tuple[int, str] | None = None,
    ) -> Record:
        cap = self.settings.record_tool_output_max_chars
        parts = [f"Goal: {p.goal}"]
        if p.action:
            parts.append(f"Action: {p.action}")
        parts.append(f"Evaluation: {evaluation}")
        if repeated is not None:
            parts.append(repeated[1])
        if analysis:
            parts.append(f"Analysis: {analysis}")
        if outputs:
            parts.append("Tool outputs:")
            for i, out in enumerate(outputs, 1):
                if len(out) <= cap:
                    parts.append(f"[{i}] {out}")
                    continue
                # Kept whole once, in its own record (indexed in bounded parts by the store);
                # the step record keeps the head and names it, so nothing is lost (I2).
                name = output_record_name(p.step, i)
                self.book.put(name, OUTPUT, out, step_id=p.step,
                              description=f"Step {p.step}: tool output {i} ({len(out):,} characters)")
                parts.append(f"[{i}] {out[:cap]}\n…[{len(out) - cap:,} more characters: "
                             f"the whole output is record {name}]")
        times = f" ×{repeated[0]}" if repeated is not None else ""
        description = f"Step {p.step} ({one_line(evaluation, 40)}{times}): {one_line(p.goal, 160)}"
        return self.book.put(
            step_record_name(p.step), STEP, "\n".join(parts), description=description,
            step_id=p.step,
        )

    def _warn(self, state: TierState, step_id: int) -> TierState:
        budget = self.settings.budget_tokens
        tokens = state.recent_tokens(self.counter)
        if self.settings.warn_ratio * budget < tokens <= self.settings.hard_ratio * budget:
            log.warning("steps: recent memory at %d of %d tokens after step %d", tokens, budget, step_id)
            return state.bump(warnings=1)
        return state

    # -- compaction ----------------------------------------------------------------------
    def _maybe_compact(self, step_id: int) -> None:
        state = self.state
        budget = self.settings.budget_tokens
        over = state.recent and state.recent_tokens(self.counter) > self.settings.hard_ratio * budget
        if over and self._compact_recent(step_id).ok:
            state = self.state
            limit = self.settings.summary_budget_multiplier * budget
            if len(state.summary) > 1 and state.summary_tokens(self.counter) > limit:
                self._compact_summary(step_id)

    def compact(self, step_id: int | None = None) -> CompactionResult | None:
        """Compact the recent tier now, whatever its size (None when it is empty); the
        result says whether the summary passed the gate."""
        with self._lock:
            if not self.tiers.refresh().recent:
                return None
            return self._compact_recent(step_id or self.state.next_step - 1)

    def _compact_recent(self, step_id: int) -> CompactionResult:
        lines = self.tiers.refresh().recent  # never summarize lines another handle compacted
        if not lines:
            return CompactionResult("recent", None, None, 0, ("nothing left to compact",))
        covers = list(dict.fromkeys(step_record_name(r.step) for r in lines if r.step))
        result = self.compactor.compact(
            "recent", "\n".join(r.line for r in lines), step_id=step_id,
            budget_tokens=self.settings.budget_tokens, covers=covers,
        )
        steps = [r.step for r in lines if r.step] or [step_id]
        if not result.ok:
            self._count_failure(result, "compaction_failures")
            return result
        block = SummaryBlock(str(result.summary), min(steps), max(steps), str(result.snapshot))
        gone = set(lines)

        def fn(state: TierState) -> Transition:
            if not gone <= set(state.recent):
                raise _Superseded  # another handle compacted (or folded) them meanwhile
            # Remove exactly the compacted lines: anything promoted meanwhile stays in recent.
            recent = tuple(r for r in state.recent if r not in gone)
            new = replace(state, recent=recent, summary=(*state.summary, block)).bump(compactions=1)
            return Transition(new, "compact", {"tier": "recent", "snapshot": result.snapshot,
                                               "attempts": result.attempts})

        self._apply_compaction(fn)
        self._summarized(result, covers, step_id)
        return result

    def _summarized(self, result: CompactionResult, covers: Sequence[str], step_id: int) -> None:
        """Lineage: the tier was summarized into `result.snapshot` from the records `covers`."""
        if self.lineage is not None:
            self.lineage.record("summarized", [*covers, str(result.snapshot)], step=step_id,
                                tier=result.tier, snapshot=str(result.snapshot),
                                why=f"{result.tier} tier over its token budget")

    def _apply_compaction(self, fn: Callable[[TierState], Transition]) -> None:
        """Commit a compaction, unless what it summarized left the tier while the summary was
        being written (a second writer compacted it): then its block is dropped, so no range
        is summarized twice, and whatever it did not cover stays in place. Its snapshot record
        stays (a durable copy, harmless)."""
        try:
            self.tiers.apply(fn)
        except _Superseded:
            log.info("steps: a compaction of %s was superseded by another writer", self.scope)

    def _compact_summary(self, step_id: int) -> CompactionResult:
        blocks = self.tiers.refresh().summary
        result = self.compactor.compact(
            "summary", "\n".join(b.render() for b in blocks), step_id=step_id,
            budget_tokens=int(self.settings.summary_budget_multiplier * self.settings.budget_tokens),
            covers=list(dict.fromkeys(b.raw for b in blocks)),
        )
        if not result.ok:
            self._count_failure(result, "summary_compaction_failures")
            return result
        block = SummaryBlock(
            str(result.summary), min(b.first_step for b in blocks), max(b.last_step for b in blocks),
            str(result.snapshot),
        )
        gone = set(blocks)

        def fn(state: TierState) -> Transition:
            if not gone <= set(state.summary):
                raise _Superseded
            kept = tuple(b for b in state.summary if b not in gone)
            new = replace(state, summary=(block, *kept)).bump(summary_compactions=1)
            return Transition(new, "compact", {"tier": "summary", "snapshot": result.snapshot,
                                               "attempts": result.attempts})

        self._apply_compaction(fn)
        self._summarized(result, [str(b.raw) for b in blocks], step_id)
        return result

    def _count_failure(self, result: CompactionResult, counter: str) -> None:
        name = counter if result.attempts else "compaction_skipped"
        self.tiers.apply(lambda s: Transition(
            s.bump(**{name: 1}), "compaction_failed",
            {"tier": result.tier, "snapshot": result.snapshot, "verdicts": list(result.verdicts)},
        ))

    # -- records, index --------------------------------------------------------------------
    def read_records(self, names: Iterable[str]) -> ReadResult:
        """Records by name (the read_files protocol); unknown names come back in ``missing``."""
        return self.book.read(names)

    def add_info(self, name: str, body: str, *, description: str) -> Record:
        """Save a user-provided fact (e.g. ``user_profile``) as an ``info`` record.

        Raises:
            InvalidNameError: bad record name. InvalidTextError: unstorable text.
        """
        last = self.state.next_step - 1
        return self.book.put_info(name, body, description=description, step_id=last or None)

    def index(self) -> list[str]:
        """The memory index: ``- name (type, step N): description``, newest first, ≤ 50 lines."""
        limit = self.settings.index_max_entries
        return render_index(self.book.list(limit=limit), limit)

    # -- checkpoint & <summary> lines (seed 003) -------------------------------------------
    def checkpoint(self, *, key_info: str | None = None, related_sop: str | None = None) -> Checkpoint:
        """Update the working checkpoint (None leaves a field unchanged); returns it.

        Raises:
            InvalidTextError: unstorable text.
        """
        if key_info is None and related_sop is None:
            return self.state.checkpoint
        ki = None if key_info is None else clean_text(require_text("key_info", key_info))
        sop = None if related_sop is None else clean_text(require_text("related_sop", related_sop))

        def fn(state: TierState) -> Transition:
            old = state.checkpoint
            cp = Checkpoint(
                old.key_info if ki is None else ki,
                old.related_sop if sop is None else sop,
                to_iso(utcnow()),
            )
            return Transition(replace(state, checkpoint=cp), "checkpoint", {})

        with self._lock:
            return self.tiers.apply(fn).state.checkpoint

    def note_reply(self, content: Any, tool_calls: list[dict[str, Any]] | None = None) -> str:
        """Append the reply's ``<summary>`` line (or the tool-call fallback) to the history.

        Returns:
            The line appended.
        """
        line = clean_text(extract_summary(
            content, tool_calls, args_max_chars=self.settings.fallback_args_max_chars
        ))
        self.store.append_events(self.scope, SUMMARY_STREAM, [NewEvent("summary", {"line": line})])
        return line

    @property
    def summary_lines(self) -> list[str]:
        """The last ``summary_lines_injected`` (40) ``<summary>`` lines, oldest first."""
        n = self.settings.summary_lines_injected
        if n == 0:
            return []
        version = self.store.stream_version(self.scope, SUMMARY_STREAM)
        events = self.store.read_events(self.scope, SUMMARY_STREAM, from_version=max(1, version - n + 1))
        return [str(e.data.get("line", "")) for e in events]

    # -- rendered blocks for the context builder ------------------------------------------
    def render_summary(self) -> str | None:
        text = self.state.summary_text()
        return f"Summarized memory (compressed from earlier steps):\n{text}" if text else None

    def render_recent(self) -> str | None:
        text = self.state.recent_text()
        return f"Recent steps:\n{text}" if text else None

    def render_pending(self) -> str | None:
        text = self.state.pending_text()
        return f"Pending steps (not yet evaluated):\n{text}" if text else None


class _Superseded(Exception):
    """A compaction's input left its tier before the compaction committed (another writer)."""


def repeat_key(p: PendingStep, evaluation: str, analysis: str, outputs: Sequence[str]) -> str:
    """The de-duplication key of a failed step: a digest of its action (tool and arguments;
    the goal when there is none), evaluation, analysis and tool outputs; ``""`` for a success
    (only errors are folded).

    Each part is compared in a canonical form (:func:`canonical_action`,
    :func:`canonical_text`): the same call with its arguments in another key order, or the
    same error with other spacing, is the same attempt repeated."""
    if evaluation.strip().lower().startswith(SUCCESS):
        return ""
    what = canonical_action(p.action) if p.action else canonical_text(p.goal)
    parts = [what, canonical_text(evaluation), canonical_text(analysis), [canonical_text(o) for o in outputs]]
    text = json.dumps(parts, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


_CALL_TEXT = re.compile(r"\A\s*([^\s()]+)\s*\((.*)\)\s*\Z", re.DOTALL)
_MAX_PARSED_CHARS = 20_000  # longer arguments are compared as text (parsing them costs more than it saves)


def canonical_text(text: str) -> str:
    """`text` as compared for a repeat: a JSON object or array as sorted compact JSON, any
    other text with its whitespace runs collapsed to single spaces (and stripped)."""
    return _json_arguments(text.strip()) or " ".join(text.split())


def canonical_action(action: str) -> str:
    """A step's action as compared for a repeat: ``name(arguments)`` with the arguments in a
    canonical form — JSON (``{"b": 1, "a": 2}``) as sorted compact JSON, Python call
    arguments (``a=2, b=1`` or a dict literal) as their sorted values — else
    :func:`canonical_text`."""
    m = _CALL_TEXT.match(action)
    if m is None:
        return canonical_text(action)
    name, args = m.group(1), m.group(2).strip()
    return f"{name}({_json_arguments(args) or _python_arguments(args)})"


def _json_arguments(args: str) -> str | None:
    """JSON arguments as sorted compact JSON; None when `args` is not JSON."""
    if args[:1] not in ("{", "[") or len(args) > _MAX_PARSED_CHARS:
        return None
    try:
        return json.dumps(json.loads(args), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return None


def _python_arguments(args: str) -> str:
    """Literal Python call arguments (``'x', n=1``) as sorted compact JSON of
    ``[positional, keywords]`` (one dict alone is the keywords); anything else (names, expressions, a long text) as
    :func:`canonical_text`."""
    if len(args) > _MAX_PARSED_CHARS:
        return canonical_text(args)
    try:
        call = ast.parse(f"f({args})", mode="eval").body
        if not isinstance(call, ast.Call):  # "1) or (2" parses as f(1) or (2)
            return canonical_text(args)
        positional = [ast.literal_eval(a) for a in call.args]
        keywords = {str(k.arg): ast.literal_eval(k.value) for k in call.keywords}
        if not keywords and len(positional) == 1 and isinstance(positional[0], dict):
            positional, keywords = [], positional[0]  # f({'a': 1}) is the call f(a=1)
        return json.dumps([positional, keywords], ensure_ascii=False, sort_keys=True,
                          separators=(",", ":"), default=repr)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return canonical_text(args)


def _step_id(step: Any) -> int:
    return require_int("step (the id begin() returned)", step)
