"""The summary gate (I3) and the summarizer behind it: one rule for every job that summarizes.

Step compaction (seed 000), session consolidation (seed 002) and every later summarizing job
(dream, archiving) call a model through :class:`Summarizer` and accept its output only when
:func:`summary_gate` passes it. Rejected: a non-string, empty or whitespace output, an error
finish reason, a placeholder ("none", "N/A", "无" …), fewer than ``summary.min_tokens`` tokens,
or a text not shorter than its source. On rejection the caller keeps its previous state and
the raw snapshot it wrote before calling stands (I2, I3).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from mindpalace.errors import CircuitOpenError, ProviderError
from mindpalace.settings import SummarySettings
from mindpalace.tokens import TokenCounter

if TYPE_CHECKING:
    from mindpalace.providers.llm.base import Completion, TokenBudget

_NOT_WORD = re.compile(r"[\W_]+")


def _normal(text: str) -> str:
    """Case-folded with punctuation, brackets, spaces and underscores removed."""
    return _NOT_WORD.sub("", text.casefold())


PLACEHOLDERS: Final = frozenset(_normal(p) for p in (
    "", "nothing", "none", "null", "nil", "n/a", "empty", "summary", "no summary", "todo", "tbd",
    "placeholder", "no content", "not available", "nothing to summarize", "无", "没有", "暂无",
))
"""Outputs that mean "I had nothing to say", compared after :func:`_normal` ("(None.)" is
"none"); a summary equal to one of them would replace real memory with nothing."""

ERROR_FINISH_REASONS: Final = frozenset({
    "error", "content_filter", "failed", "cancelled", "canceled", "timeout",
})
"""Finish reasons that mean the reply is not a complete answer (also anything ``error…``)."""

# Reasoning a model leaks into its answer: closed blocks are removed, an unclosed opening tag
# drops everything after it (the answer before the tag is kept) — nanobot's strip_think.
_THINK_TAGS = ("think", "thinking", "reasoning", "reflection", "analysis")
_THINK_CLOSED = re.compile(
    r"<(" + "|".join(_THINK_TAGS) + r")\b[^>]*>.*?</\1\s*>", re.IGNORECASE | re.DOTALL
)
_THINK_OPEN = re.compile(r"<(" + "|".join(_THINK_TAGS) + r")\b[^>]*>.*\Z", re.IGNORECASE | re.DOTALL)
_THINK_STRAY_CLOSE = re.compile(r"\A.*?</(" + "|".join(_THINK_TAGS) + r")\s*>", re.IGNORECASE | re.DOTALL)


def strip_reasoning(text: str) -> str:
    """Remove ``<think>…</think>`` (and thinking / reasoning / reflection / analysis) blocks.

    A block whose opening tag was cut off (text starting inside it, ending with ``</think>``)
    loses everything up to the closing tag; an unclosed opening tag loses everything after it.
    """
    text = _THINK_CLOSED.sub("", text)
    text = _THINK_STRAY_CLOSE.sub("", text)
    text = _THINK_OPEN.sub("", text)
    return text.strip()


class GateVerdict(enum.Enum):
    """Why a summary passed or was rejected by the I3 gate."""

    PASSED = "passed"
    NOT_A_STRING = "not a string"
    EMPTY = "empty"
    WHITESPACE = "whitespace only"
    ERROR_FINISH = "error finish_reason"
    PLACEHOLDER = "placeholder"
    TOO_SHORT = "fewer tokens than summary.min_tokens"
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
        counter: the token counter (I9).
        min_tokens: ``summary.min_tokens`` (10).
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
    if _normal(output) in PLACEHOLDERS:
        return GateVerdict.PLACEHOLDER
    tokens = counter.count(output.strip())
    if tokens < min_tokens:
        return GateVerdict.TOO_SHORT
    if tokens >= source_tokens:
        return GateVerdict.NOT_SHORTER
    return GateVerdict.PASSED


class SummaryModel(Protocol):
    """What a summarizer needs of an LLM provider (:class:`~mindpalace.providers.llm.LLMProvider`
    has it): one summarize call returning a completion."""

    def summarize(
        self, text: str, *, max_tokens: int, instructions: str | None = None,
        budget: TokenBudget | None = None,
    ) -> Completion: ...


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """One summarizer call.

    Attributes:
        text: the accepted summary (stripped, cut to the asked ``max_tokens``), None when the
            provider failed or the gate rejected the output.
        verdict: the gate's verdict, None when the provider failed before answering.
        error: the provider's error ("" when it answered).
        tokens_spent: prompt + reply tokens of the call (as reported, else counted).
        breaker_open: the provider's circuit breaker is open: stop calling it for now.
        detail: the numbers behind a length verdict, e.g. ``17 ≥ 17 tokens``.
    """

    text: str | None
    verdict: GateVerdict | None
    error: str = ""
    tokens_spent: int = 0
    breaker_open: bool = False
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.text is not None

    @property
    def reason(self) -> str:
        """Why it failed, for logs and breadcrumbs ("" when it passed)."""
        if self.error:
            return self.error
        if self.verdict is None or self.verdict is GateVerdict.PASSED:
            return ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"summary rejected: {self.verdict.value}{detail}"


class Summarizer:
    """The LLM provider behind the one summary gate (I3).

    Example:
        >>> s = Summarizer(llm, get_counter("o200k_base"))          # doctest: +SKIP
        >>> out = s.summarize(old_turns, max_tokens=256)            # doctest: +SKIP
        >>> out.text if out.ok else out.reason                      # doctest: +SKIP

    Args:
        model: anything with ``summarize(text, *, max_tokens, budget) -> Completion`` — the
            configured LLM provider, or the offline extractive one.
        counter: the token counter (gate and truncation, I9).
        settings: ``[summary]`` (``min_tokens``).
    """

    def __init__(
        self, model: SummaryModel, counter: TokenCounter, *, settings: SummarySettings | None = None
    ) -> None:
        self.model = model
        self.counter = counter
        self.settings = settings or SummarySettings()

    def request_overhead_tokens(self, max_tokens: int) -> int:
        """Tokens a summarize request adds around its text (the instructions and message
        framing of :func:`~mindpalace.providers.llm.base.summarize_messages`), so a caller can
        keep whole requests under a size."""
        from mindpalace.providers.llm.base import summarize_messages  # services → providers

        return self.counter.count_messages(summarize_messages("", max_tokens=max_tokens))

    def summarize(
        self, text: str, *, max_tokens: int, budget: TokenBudget | None = None
    ) -> SummaryOutcome:
        """Summarize `text` in at most `max_tokens` tokens and gate the result.

        Reasoning blocks are stripped before the gate; an accepted output is then cut to
        `max_tokens`.
        Provider failures are returned (``error``), never raised, so the caller can keep its
        state and fall back to the raw text.

        Raises:
            InvalidTextError / ValidationError: `text` is empty or not storable, or
                `max_tokens` < 1 (a caller bug, not a provider failure).
        """
        try:
            completion = self.model.summarize(text, max_tokens=max_tokens, budget=budget)
        except CircuitOpenError as exc:
            return SummaryOutcome(None, None, f"provider breaker open: {exc}", breaker_open=True)
        except ProviderError as exc:
            return SummaryOutcome(None, None, f"provider error: {exc}")
        output: Any = getattr(completion, "text", completion)
        usage = getattr(completion, "usage", None)
        source_tokens = self.counter.count(text)
        spent = int(getattr(usage, "total_tokens", 0) or 0) or (
            source_tokens + (self.counter.count(output) if isinstance(output, str) else 0))
        if isinstance(output, str):
            output = strip_reasoning(output)
        verdict = summary_gate(
            output, source_tokens=source_tokens, counter=self.counter,
            min_tokens=self.settings.min_tokens,
            finish_reason=str(getattr(completion, "finish_reason", "stop")),
        )
        if verdict is not GateVerdict.PASSED:
            return SummaryOutcome(None, verdict, tokens_spent=spent,
                                  detail=self._detail(verdict, output, source_tokens))
        # Gated as the model wrote it (an echo of the source is no summary, however cut), then
        # held to the length the caller budgeted for.
        return SummaryOutcome(self.counter.truncate(output.strip(), max_tokens).strip(), verdict,
                              tokens_spent=spent)

    def _detail(self, verdict: GateVerdict, output: Any, source_tokens: int) -> str:
        if verdict is GateVerdict.TOO_SHORT:
            return f"{self.counter.count(output.strip())} < {self.settings.min_tokens} tokens"
        if verdict is GateVerdict.NOT_SHORTER:
            return f"{self.counter.count(output.strip())} ≥ {source_tokens} tokens"
        return ""
