"""Compaction of a tier (seed 000 ``_summarise_recent_memory``): snapshot first, summarize, gate.

1. The exact text being compacted is saved as a snapshot record FIRST — before the model is
   called, whatever happens next — so every compacted line stays recoverable by name (I2).
2. The configured LLM summarizes it (offline: the deterministic extractive provider).
3. The output passes :func:`summary_gate` (I3) or the attempt fails; attempts are bounded
   (``steps.compaction_max_attempts``, each asking for half the tokens of the previous one)
   and a circuit breaker stops compacting while the provider keeps failing (I4).

The caller (:class:`~mindpalace.steps.memory.StepMemory`) applies the outcome to the tiers:
passed → the compacted lines leave recent and the summary is appended; failed → recent and
summary are left exactly as they were and the failure is counted.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pybreaker

from mindpalace.errors import CircuitOpenError, ProviderError
from mindpalace.settings import StepSettings
from mindpalace.steps.records import (
    SNAPSHOT,
    SNAPSHOT_DESCRIPTION,
    SUMMARY_SNAPSHOT_DESCRIPTION,
    RecordBook,
    snapshot_record_name,
)
from mindpalace.store import Record
from mindpalace.tokens import TokenCounter

log = logging.getLogger("mindpalace.steps")

# Outputs that mean "I had nothing to say" (compared after stripping brackets / punctuation,
# case-folded); a summary equal to one of them would replace real memory with nothing.
PLACEHOLDERS: Final = frozenset({
    "", "nothing", "none", "null", "nil", "n/a", "na", "empty", "summary", "no summary",
    "todo", "tbd", "placeholder", "...", "…", "-", "no content", "not available", "无", "没有",
})
ERROR_FINISH_REASONS: Final = frozenset({"error", "content_filter", "failed", "cancelled", "timeout"})
_STRIP = re.compile(r"^[\s\(\)\[\]\{\}<>\"'`*_.:;,!?]+|[\s\(\)\[\]\{\}<>\"'`*_:;,!?]+$")


class GateVerdict(enum.Enum):
    """Why a summary passed or was rejected by the I3 gate."""

    PASSED = "passed"
    NOT_A_STRING = "not a string"
    EMPTY = "empty"
    WHITESPACE = "whitespace only"
    ERROR_FINISH = "error finish_reason"
    PLACEHOLDER = "placeholder"
    TOO_SHORT = "fewer tokens than steps.min_summary_tokens"
    NOT_SHORTER = "not shorter than its source"


def summary_gate(
    output: Any,
    *,
    source_tokens: int,
    counter: TokenCounter,
    min_tokens: int,
    finish_reason: str | None = "stop",
) -> GateVerdict:
    """Judge a summarizer output (I3). Pure: no state is read or written.

    Args:
        output: what the provider returned as text (anything — a non-string is rejected).
        source_tokens: tokens of the text that was summarized.
        min_tokens: ``steps.min_summary_tokens`` (10).
        finish_reason: the completion's finish reason; error-like values are rejected.

    Returns:
        ``GateVerdict.PASSED`` or the first reason for rejection, checked in this order:
        not a string, empty, whitespace, error finish, placeholder, too short, not shorter.
    """
    if not isinstance(output, str):
        return GateVerdict.NOT_A_STRING
    if output == "":
        return GateVerdict.EMPTY
    if not output.strip():
        return GateVerdict.WHITESPACE
    reason = (finish_reason or "").strip().lower()
    if reason in ERROR_FINISH_REASONS or reason.startswith("error"):
        return GateVerdict.ERROR_FINISH
    if _STRIP.sub("", output.strip()).casefold() in PLACEHOLDERS or output.strip() in PLACEHOLDERS:
        return GateVerdict.PLACEHOLDER
    tokens = counter.count(output)
    if tokens < min_tokens:
        return GateVerdict.TOO_SHORT
    if tokens >= source_tokens:
        return GateVerdict.NOT_SHORTER
    return GateVerdict.PASSED


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """Outcome of one compaction run.

    Attributes:
        tier: ``"recent"`` or ``"summary"``.
        snapshot: name of the snapshot record holding the exact source text (None only when
            the breaker was open and nothing was attempted).
        summary: the accepted summary text, None on failure.
        attempts: summarizer calls made (0 when the breaker was open).
        verdicts: one verdict (or provider error text) per attempt.
    """

    tier: str
    snapshot: str | None
    summary: str | None
    attempts: int
    verdicts: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.summary is not None


class _Rejected(Exception):
    """All attempts of one compaction failed (counted by the breaker)."""


SummarizeFn = Callable[..., Any]  # (text, *, max_tokens) -> Completion-like (text, finish_reason)


class Compactor:
    """Snapshot + bounded, gated summarization behind a circuit breaker.

    Args:
        book: the session's records (snapshots are written here).
        counter: the token counter (I9).
        settings: ``[steps]`` settings (attempts, breaker, target ratio, min tokens).
        summarize: ``summarize(text, max_tokens=…) -> Completion`` — the LLM provider's
            ``summarize`` (looked up lazily so no provider is built until a compaction runs).
    """

    def __init__(
        self,
        book: RecordBook,
        counter: TokenCounter,
        settings: StepSettings,
        summarize: Callable[[], SummarizeFn],
    ) -> None:
        self.book = book
        self.counter = counter
        self.settings = settings
        self._summarize = summarize
        self.breaker = pybreaker.CircuitBreaker(
            fail_max=settings.compaction_breaker_fail_max,
            reset_timeout=settings.compaction_breaker_reset_seconds,
            name="steps-compaction",
            throw_new_error_on_trip=False,
        )
        self.calls = 0  # summarizer calls made by this compactor (for I4 accounting)

    def compact(
        self, tier: str, text: str, *, step_id: int, budget_tokens: int, covers: list[str]
    ) -> CompactionResult:
        """Snapshot `text` as ``memory_snapshot_<tier>_step_<step_id>``, then summarize it.

        Args:
            tier: ``"recent"`` or ``"summary"``.
            text: the exact text leaving the tier.
            step_id: the step at which compaction runs (names the snapshot).
            budget_tokens: the tier's budget; a summary asks for ``summary_target_ratio`` of it.
            covers: record names the text refers to (kept in the snapshot's front matter).
        """
        verdicts: list[str] = []
        snapshot: list[str] = []

        def run() -> str:
            snapshot.append(self._snapshot(tier, text, step_id, covers).name)
            return self._attempts(text, budget_tokens, verdicts)

        try:
            summary = self.breaker.call(run)
        except pybreaker.CircuitBreakerError:
            verdicts.append("breaker open")
            log.warning("steps: %s compaction skipped at step %d: breaker open", tier, step_id)
            return CompactionResult(tier, snapshot[0] if snapshot else None, None, 0, tuple(verdicts))
        except _Rejected:
            log.warning("steps: %s compaction failed at step %d: %s", tier, step_id, verdicts)
            return CompactionResult(tier, snapshot[0], None, len(verdicts), tuple(verdicts))
        return CompactionResult(tier, snapshot[0], summary, len(verdicts), tuple(verdicts))

    def _snapshot(self, tier: str, text: str, step_id: int, covers: list[str]) -> Record:
        """Write the snapshot; a retry at the same step with the same text reuses it, a
        different text gets a numbered name so no earlier snapshot is ever overwritten."""
        base = snapshot_record_name(tier, step_id)
        template = SNAPSHOT_DESCRIPTION if tier == "recent" else SUMMARY_SNAPSHOT_DESCRIPTION
        name, n = base, 1
        while True:
            found = self.book.read([name]).found.get(name)
            if found is None:
                break
            if found.body == text:
                return found
            n += 1
            name = f"{base}_{n}"
        return self.book.put(
            name, SNAPSHOT, text, description=template.format(step=step_id), step_id=step_id,
            meta={"tier": tier, "covers": covers}, overwrite=False,
        )

    def _attempts(self, text: str, budget_tokens: int, verdicts: list[str]) -> str:
        source_tokens = self.counter.count(text)
        target = max(self.settings.min_summary_tokens, int(budget_tokens * self.settings.summary_target_ratio))
        target = min(target, max(self.settings.min_summary_tokens, source_tokens - 1))
        summarize = self._summarize()
        for attempt in range(self.settings.compaction_max_attempts):
            max_tokens = max(self.settings.min_summary_tokens, target >> attempt)
            self.calls += 1
            try:
                completion = summarize(text, max_tokens=max_tokens)
            except CircuitOpenError as exc:  # the provider's own breaker: stop at once
                verdicts.append(f"provider breaker open: {exc}")
                break
            except ProviderError as exc:
                verdicts.append(f"provider error: {exc}")
                continue
            output = getattr(completion, "text", completion)
            verdict = summary_gate(
                output, source_tokens=source_tokens, counter=self.counter,
                min_tokens=self.settings.min_summary_tokens,
                finish_reason=getattr(completion, "finish_reason", "stop"),
            )
            verdicts.append(verdict.value)
            if verdict is GateVerdict.PASSED:
                return str(output).strip()
        raise _Rejected()
