"""Compaction of a tier (seed 000 ``_summarise_recent_memory``): snapshot first, summarize, gate.

1. The exact text being compacted is saved as a snapshot record FIRST — before the model is
   called, whatever happens next — so every compacted line stays recoverable by name (I2).
2. The session's :class:`~mindpalace.summary.Summarizer` (the configured LLM behind the one
   summary gate, I3; offline: the deterministic extractive provider) summarizes it.
3. The output passes :func:`~mindpalace.summary.summary_gate` or the attempt fails; attempts are bounded
   (``steps.compaction_max_attempts``, each asking for half the tokens of the previous one)
   and a circuit breaker stops compacting while the provider keeps failing (I4).

The caller (:class:`~mindpalace.steps.memory.StepMemory`) applies the outcome to the tiers:
passed → the compacted lines leave recent and the summary is appended; failed → recent and
summary are left exactly as they were and the failure is counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pybreaker

from mindpalace.settings import StepSettings
from mindpalace.steps.records import (
    SNAPSHOT,
    SNAPSHOT_DESCRIPTION,
    SUMMARY_SNAPSHOT_DESCRIPTION,
    RecordBook,
    snapshot_record_name,
)
from mindpalace.store import Record
from mindpalace.summary import Summarizer
from mindpalace.tokens import TokenCounter

log = logging.getLogger("mindpalace.steps")

@dataclass(frozen=True, slots=True)
class CompactionResult:
    """Outcome of one compaction run.

    Attributes:
        tier: ``"recent"`` or ``"summary"``.
        snapshot: name of the snapshot record holding the exact source text (None only when
            the breaker was open and nothing was attempted, or another writer had already
            compacted the whole tier).
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


class Compactor:
    """Snapshot + bounded, gated summarization behind a circuit breaker.

    Args:
        book: the session's records (snapshots are written here).
        counter: the token counter (I9).
        settings: ``[steps]`` settings (attempts, breaker, target ratio).
        summarizer: the LLM behind the one summary gate (I3).
    """

    def __init__(
        self,
        book: RecordBook,
        counter: TokenCounter,
        settings: StepSettings,
        summarizer: Summarizer,
    ) -> None:
        self.book = book
        self.counter = counter
        self.settings = settings
        self.summarizer = summarizer
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
        floor = self.summarizer.settings.min_tokens
        target = max(floor, int(budget_tokens * self.settings.summary_target_ratio))
        target = min(target, max(floor, source_tokens - 1))
        for attempt in range(self.settings.compaction_max_attempts):
            self.calls += 1
            out = self.summarizer.summarize(text, max_tokens=max(floor, target >> attempt))
            if out.verdict is None:  # the provider failed; its own breaker open: stop at once
                verdicts.append(out.error)
                if out.breaker_open:
                    break
                continue
            verdicts.append(out.verdict.value)
            if out.text is not None:
                return out.text
        raise _Rejected()
