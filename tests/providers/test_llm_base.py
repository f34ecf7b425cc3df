"""LLMProvider base: TokenBudget, message validation, retries/breaker/budget via FakeLLM."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mindpalace.errors import (
    CircuitOpenError,
    ProviderError,
    ProviderResponseError,
    TokenBudgetExceededError,
    ValidationError,
)
from mindpalace.providers.llm import Completion, TokenBudget, Usage, validate_messages
from mindpalace.providers.llm.base import load_prompt, summarize_messages
from mindpalace.settings import LLMSettings
from mindpalace.testing.fakes import FakeLLM

HELLO = [{"role": "user", "content": "hello"}]


class TestTokenBudget:
    def test_charges_accumulate_and_remaining_never_goes_negative(self):
        budget = TokenBudget("job", 100)
        budget.charge(Usage.of(60, 10))
        assert (budget.spent, budget.remaining, budget.exhausted) == (70, 30, False)
        budget.charge(50)
        assert (budget.spent, budget.remaining, budget.exhausted) == (120, 0, True)

    def test_check_raises_once_spent_or_when_the_need_exceeds_what_is_left(self):
        budget = TokenBudget("dream", 100)
        budget.check(100)
        with pytest.raises(TokenBudgetExceededError, match="needs at least 101"):
            budget.check(101)
        budget.charge(100)
        with pytest.raises(TokenBudgetExceededError) as err:
            budget.check()
        assert (err.value.job, err.value.budget, err.value.spent) == ("dream", 100, 100)

    def test_from_settings_uses_the_configured_job_budget(self):
        budget = TokenBudget.from_settings("dream", LLMSettings(job_token_budget=1_234))
        assert (budget.job, budget.limit_tokens, budget.remaining) == ("dream", 1_234, 1_234)

    @pytest.mark.parametrize(("job", "limit"), [("", 10), ("job", 0), ("job", -5), ("job", 1.5)])
    def test_bad_arguments_are_rejected(self, job, limit):
        with pytest.raises(ValidationError):
            TokenBudget(job, limit)

    @given(st.lists(st.integers(min_value=0, max_value=1_000), max_size=50))
    def test_spent_is_the_sum_of_charges_across_threads(self, charges):
        budget = TokenBudget("job", 10**9)
        threads = [threading.Thread(target=budget.charge, args=(c,)) for c in charges]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert budget.spent == sum(charges)


class TestMessageValidation:
    def test_returns_a_deep_copy(self):
        messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
        copied = validate_messages(messages)
        copied[0]["content"][0]["text"] = "changed"
        assert messages[0]["content"][0]["text"] == "hi"

    def test_assistant_tool_calls_may_have_no_content(self):
        msg = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
        assert validate_messages([msg]) == [msg]

    def test_error_names_the_offending_index(self):
        with pytest.raises(ValidationError, match=r"messages\[1\]\.role"):
            validate_messages([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])


class TestSummarizePrompt:
    def test_template_names_what_to_keep_and_the_limit(self):
        template = load_prompt("summarize")
        for word in ("verbatim", "identifiers", "URLs", "dates", "预算", "language", "{max_tokens}"):
            assert word in template

    def test_messages_put_the_source_alone_in_the_user_turn(self):
        system, user = summarize_messages("src {x} text", max_tokens=77, instructions="Be terse.")
        assert "at most 77 tokens" in system["content"] and "Be terse." in system["content"]
        assert "{instructions}" not in system["content"]
        assert user == {"role": "user", "content": "src {x} text"}


class TestGuardedComplete:
    def test_scripted_replies_come_back_in_order(self):
        llm = FakeLLM(["one", "two"])
        assert [llm.complete(HELLO).text, llm.complete(HELLO).text] == ["one", "two"]
        assert llm.calls == 2

    def test_transient_failures_are_retried_within_max_retries(self):
        llm = FakeLLM(["finally"], fail_times=2, settings=LLMSettings(max_retries=2))
        assert llm.complete(HELLO).text == "finally"
        assert llm.calls == 3

    def test_failures_beyond_max_retries_are_reported(self):
        llm = FakeLLM(["never seen"], fail_times=5, settings=LLMSettings(max_retries=1))
        with pytest.raises(ProviderResponseError, match="scripted failure"):
            llm.complete(HELLO)
        assert llm.calls == 2

    def test_non_retryable_errors_fail_fast_and_do_not_open_the_breaker(self):
        bad = ProviderError("bad request", retryable=False)
        llm = FakeLLM(fail_times=10, error=bad, settings=LLMSettings(max_retries=3, breaker_fail_max=2))
        for _ in range(3):
            with pytest.raises(ProviderError, match="bad request"):
                llm.complete(HELLO)
        assert llm.calls == 3

    def test_breaker_opens_after_consecutive_failed_calls(self):
        llm = FakeLLM(fail_times=100, settings=LLMSettings(max_retries=0, breaker_fail_max=3))
        for _ in range(3):
            with pytest.raises(ProviderResponseError):
                llm.complete(HELLO)
        with pytest.raises(CircuitOpenError):
            llm.complete(HELLO)
        assert llm.calls == 3

    def test_an_error_finish_completion_is_passed_through_for_the_callers_gate(self):
        bad = Completion("", "error", Usage.of(5, 0), "fake-model")
        assert FakeLLM([bad]).complete(HELLO) == bad

    def test_the_provider_sees_a_copy_of_the_callers_messages(self):
        llm = FakeLLM(["ok"])
        messages = [{"role": "user", "content": "hi"}]
        llm.complete(messages)
        llm.requests[0]["messages"][0]["content"] = "mutated"
        assert messages == [{"role": "user", "content": "hi"}]

    def test_exhausted_script_falls_back_to_a_bounded_extractive_reply(self):
        llm = FakeLLM()
        text = "The budget is 8000 CNY and must not be exceeded. " + "Filler words here. " * 50
        out = llm.summarize(text, max_tokens=30)
        assert "8000 CNY" in out.text
        assert llm.counter.count(out.text) <= 30

    def test_concurrent_calls_are_not_serialized_by_the_breaker(self):
        # Two calls that each wait for the other can only finish if both run at once.
        barrier = threading.Barrier(2, timeout=10)

        def meet(_messages, _max_tokens):
            barrier.wait()
            return "met"

        llm = FakeLLM(default=meet)
        results: list[str] = []
        threads = [threading.Thread(target=lambda: results.append(llm.complete(HELLO).text)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == ["met", "met"]

    def test_budget_is_checked_before_and_charged_after(self):
        llm = FakeLLM(["reply"])
        prompt = llm.counter.count_messages(HELLO)
        budget = TokenBudget("job", prompt + 1)
        out = llm.complete(HELLO, budget=budget)
        assert llm.requests[0]["max_tokens"] == 1
        assert budget.spent == out.usage.total_tokens
        with pytest.raises(TokenBudgetExceededError):
            llm.complete(HELLO, budget=budget)
        assert llm.calls == 1

    @pytest.mark.parametrize("max_tokens", [0, -1, 2.5])
    def test_bad_max_tokens_is_rejected(self, max_tokens):
        with pytest.raises(ValidationError, match="max_tokens"):
            FakeLLM(["x"]).complete(HELLO, max_tokens=max_tokens)
