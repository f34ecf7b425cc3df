"""The one summary gate (I3) and the Summarizer every summarizing component goes through."""

from __future__ import annotations

from typing import Any

import pytest

from mindpalace.errors import CircuitOpenError, ProviderResponseError
from mindpalace.providers.llm import Completion, Usage
from mindpalace.settings import LLMSettings, SummarySettings
from mindpalace.summary import GateVerdict, Summarizer, strip_reasoning, summary_gate
from mindpalace.testing.fakes import FakeLLM
from mindpalace.tokens import get_counter

COUNTER = get_counter("o200k_base")
GOOD = "Reservations R0001 and R0002 were found for passengers one and two; both are confirmed."
SOURCE_TOKENS = 200
SOURCE = " ".join(f"Reservation R{i:04d} was confirmed for passenger {i} on flight HAT{i:03d}." for i in range(30))


def gate(output: Any, finish: str = "stop", source: int = SOURCE_TOKENS, min_tokens: int = 10) -> GateVerdict:
    return summary_gate(output, source_tokens=source, counter=COUNTER, min_tokens=min_tokens,
                        finish_reason=finish)


def completion(text: Any, finish: str = "stop") -> Completion:
    return Completion(text=text, finish_reason=finish, usage=Usage.of(7, 5), model="fake")


class TestSummaryGate:
    def test_a_real_summary_passes(self) -> None:
        assert gate(GOOD) is GateVerdict.PASSED

    @pytest.mark.parametrize(
        ("output", "finish", "verdict"),
        [
            (None, "stop", GateVerdict.NOT_A_STRING),
            (42, "stop", GateVerdict.NOT_A_STRING),
            (["a"], "stop", GateVerdict.NOT_A_STRING),
            ("", "stop", GateVerdict.EMPTY),
            (" \n\t ", "stop", GateVerdict.WHITESPACE),
            (GOOD, "error", GateVerdict.ERROR_FINISH),
            (GOOD, "error_rate_limit", GateVerdict.ERROR_FINISH),
            (GOOD, "content_filter", GateVerdict.ERROR_FINISH),
            (GOOD, "timeout", GateVerdict.ERROR_FINISH),
            (GOOD, "cancelled", GateVerdict.ERROR_FINISH),
            ("(nothing)", "stop", GateVerdict.PLACEHOLDER),
            ("N/A", "stop", GateVerdict.PLACEHOLDER),
            ("Summary:", "stop", GateVerdict.PLACEHOLDER),
            ("No summary.", "stop", GateVerdict.PLACEHOLDER),
            ("Nothing to summarize", "stop", GateVerdict.PLACEHOLDER),
            ("...", "stop", GateVerdict.PLACEHOLDER),
            ("TODO", "stop", GateVerdict.PLACEHOLDER),
            ("暂无。", "stop", GateVerdict.PLACEHOLDER),
            ("Found two reservations.", "stop", GateVerdict.TOO_SHORT),
        ],
    )
    def test_each_bad_kind_is_rejected_with_its_reason(self, output: Any, finish: str, verdict: GateVerdict) -> None:
        assert gate(output, finish) is verdict

    def test_a_summary_not_shorter_than_its_source_is_rejected(self) -> None:
        assert gate(GOOD, source=COUNTER.count(GOOD)) is GateVerdict.NOT_SHORTER
        assert gate(GOOD, source=COUNTER.count(GOOD) + 1) is GateVerdict.PASSED

    def test_length_finish_is_not_an_error(self) -> None:
        assert gate(GOOD, "length") is GateVerdict.PASSED

    def test_the_minimum_is_the_callers(self) -> None:
        assert gate("Found two reservations.", min_tokens=1) is GateVerdict.PASSED


class TestStripReasoning:
    @pytest.mark.parametrize(
        ("raw", "clean"),
        [
            ("<thinking>x\ny</thinking> kept", "kept"),
            ("kept <reasoning>unfinished", "kept"),
            ("leaked tail</think>answer", "answer"),
            ("<THINK a=1>x</THINK>A <analysis>b</analysis>B", "A B"),
            ("no tags at all", "no tags at all"),
        ],
    )
    def test_variants(self, raw: str, clean: str) -> None:
        assert strip_reasoning(raw) == clean


def summarizer(*replies: Any, **kw: Any) -> tuple[Summarizer, FakeLLM]:
    llm = FakeLLM(list(replies), settings=LLMSettings(max_retries=0), **kw)
    return Summarizer(llm, COUNTER, settings=SummarySettings()), llm


class TestSummarizer:
    def test_an_accepted_summary_comes_back_stripped_with_its_cost(self) -> None:
        s, _ = summarizer(completion(f"  <think>draft</think>{GOOD}  "))
        out = s.summarize(SOURCE, max_tokens=100)
        assert out.ok and out.text == GOOD and out.verdict is GateVerdict.PASSED
        assert out.tokens_spent == 12 and out.reason == ""

    def test_the_output_is_cut_to_max_tokens(self) -> None:
        s, _ = summarizer(completion(GOOD * 3))
        out = s.summarize(SOURCE, max_tokens=20)
        assert out.ok and COUNTER.count(str(out.text)) <= 20

    def test_a_rejected_output_says_why(self) -> None:
        s, _ = summarizer(completion("N/A"))
        out = s.summarize(SOURCE, max_tokens=100)
        assert not out.ok and out.verdict is GateVerdict.PLACEHOLDER
        assert out.reason == "summary rejected: placeholder"

    def test_a_length_verdict_carries_its_numbers(self) -> None:
        s, _ = summarizer(completion(SOURCE))
        out = s.summarize(SOURCE, max_tokens=100)
        n = COUNTER.count(SOURCE)
        assert out.reason == f"summary rejected: not shorter than its source ({n} ≥ {n} tokens)"

    def test_the_minimum_comes_from_summary_settings(self) -> None:
        llm = FakeLLM([completion("Found two reservations.")] * 2, settings=LLMSettings(max_retries=0))
        strict = Summarizer(llm, COUNTER, settings=SummarySettings(min_tokens=10))
        lenient = Summarizer(llm, COUNTER, settings=SummarySettings(min_tokens=1))
        assert strict.summarize(SOURCE, max_tokens=100).verdict is GateVerdict.TOO_SHORT
        assert lenient.summarize(SOURCE, max_tokens=100).ok

    def test_a_provider_failure_is_returned_not_raised(self) -> None:
        s, _ = summarizer(fail_times=5, error=ProviderResponseError("down", retryable=True))
        out = s.summarize(SOURCE, max_tokens=100)
        assert not out.ok and out.verdict is None and not out.breaker_open
        assert out.reason.startswith("provider error:") and "down" in out.reason

    def test_an_open_breaker_is_flagged(self) -> None:
        s, _ = summarizer(CircuitOpenError("breaker open"))
        out = s.summarize(SOURCE, max_tokens=100)
        assert out.breaker_open and not out.ok
