"""OpenAIProvider against a real HTTP server on loopback serving canned chat completions."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mindpalace.errors import (
    CircuitOpenError,
    InvalidTextError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    TokenBudgetExceededError,
    ValidationError,
)
from mindpalace.providers.llm import Completion, TokenBudget, ToolCallRequest, Usage, make_llm
from mindpalace.providers.llm.openai import OpenAIProvider
from mindpalace.settings import LLMSettings
from mindpalace.testing.openai_stub import (
    Reply,
    StubServer,
    api_error,
    chat,
    html_page,
    serve_stub,
    tool_call,
)
from mindpalace.tokens import get_counter

COUNTER = get_counter("o200k_base")
HELLO = [{"role": "user", "content": "Say hello."}]
SLOW_REPLY_SECONDS = 5.0  # the server's stall; the client gives up after 0.2 s (25× margin)
HTML_502 = html_page(502, "502 Bad Gateway")


@pytest.fixture
def server() -> Iterator[StubServer]:
    with serve_stub() as stub:
        yield stub


@pytest.fixture
def make_provider(server: StubServer) -> Iterator[Callable[..., OpenAIProvider]]:
    made: list[OpenAIProvider] = []

    def make(sleep: Callable[[float], None] | None = None, **overrides: Any) -> OpenAIProvider:
        settings = {
            "provider": "openai",
            "base_url": server.url,
            "api_key": "test-key",
            "model": "stub-model",
            "timeout_seconds": 5.0,
            "max_retries": 2,
            "backoff_initial_seconds": 0.01,
            "backoff_max_seconds": 0.05,
            "breaker_fail_max": 3,
        } | overrides
        kwargs = {"sleep": sleep} if sleep else {}
        provider = OpenAIProvider(LLMSettings(**settings), COUNTER, **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


class TestNormalReply:
    def test_returns_text_finish_reason_usage_and_model(self, server, make_provider):
        server.script(chat("Hello!"))
        out = make_provider().complete(HELLO)
        assert out == Completion("Hello!", "stop", Usage(11, 3, 14), "stub-model-2024")

    def test_sends_model_messages_limits_and_key(self, server, make_provider):
        server.script(chat())
        make_provider().complete(HELLO, max_tokens=7, temperature=0.3, stop=["\n"])
        [req] = server.requests
        assert req["path"] == "/v1/chat/completions"
        assert req["auth"] == "Bearer test-key"
        assert req["json"] == {"model": "stub-model", "messages": HELLO, "max_tokens": 7,
                               "temperature": 0.3, "stop": ["\n"]}

    def test_leaves_the_callers_messages_unchanged(self, server, make_provider):
        server.script(chat())
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
        before = copy.deepcopy(messages)
        make_provider().complete(messages, max_tokens=5)
        assert messages == before

    def test_counts_usage_locally_when_the_server_reports_none(self, server, make_provider):
        server.script(chat("Hello there!", usage=None))
        out = make_provider().complete(HELLO)
        assert out.usage == Usage.of(COUNTER.count_messages(HELLO), COUNTER.count("Hello there!"))

    def test_length_finish_is_a_normal_completion(self, server, make_provider):
        server.script(chat("Hel", finish_reason="length"))
        assert make_provider().complete(HELLO, max_tokens=1).finish_reason == "length"

    def test_local_server_without_api_key_gets_a_placeholder_key(self, server, make_provider):
        server.script(chat())
        make_provider(api_key=None).complete(HELLO)
        assert server.requests[0]["auth"] == "Bearer EMPTY"


class TestUnusableReplies:
    def test_finish_reason_error_is_retried_then_reported(self, server, make_provider):
        server.script(chat("partial", finish_reason="error"))
        with pytest.raises(ProviderResponseError, match="finish_reason 'error'"):
            make_provider(max_retries=2).complete(HELLO)
        assert len(server.requests) == 3

    def test_content_filter_fails_fast(self, server, make_provider):
        server.script(chat(None, finish_reason="content_filter"))
        with pytest.raises(ProviderResponseError, match="content filter") as err:
            make_provider().complete(HELLO)
        assert not err.value.retryable
        assert len(server.requests) == 1

    @pytest.mark.parametrize("content", ["", "   \n", None])
    def test_empty_content_is_retried_then_reported(self, server, make_provider, content):
        server.script(chat(content))
        with pytest.raises(ProviderResponseError, match="empty reply"):
            make_provider(max_retries=1).complete(HELLO)
        assert len(server.requests) == 2

    def test_empty_content_then_a_real_reply_returns_the_real_reply(self, server, make_provider):
        server.script(chat(""), chat("second try"))
        assert make_provider().complete(HELLO).text == "second try"
        assert len(server.requests) == 2

    def test_html_error_page_is_reported_with_its_title(self, server, make_provider):
        server.script(HTML_502)
        with pytest.raises(ProviderResponseError) as err:
            make_provider(max_retries=1).complete(HELLO)
        assert err.value.status_code == 502
        assert "HTML error page (502 Bad Gateway)" in str(err.value)
        assert "<html>" not in str(err.value)
        assert len(server.requests) == 2

    def test_html_page_with_status_200_is_not_a_completion(self, server, make_provider):
        server.script(Reply(content_type="text/html", body="<html><title>Login</title></html>"))
        with pytest.raises(ProviderResponseError, match="without a chat completion"):
            make_provider(max_retries=0).complete(HELLO)

    def test_malformed_json_is_reported(self, server, make_provider):
        server.script(Reply(body='{"choices": [ {"message": '))
        with pytest.raises(ProviderResponseError, match="malformed JSON"):
            make_provider(max_retries=0).complete(HELLO)

    @pytest.mark.parametrize("body", [{"choices": []}, {"object": "list"}, []])
    def test_json_without_choices_is_reported(self, server, make_provider, body):
        server.script(Reply(body=body))
        with pytest.raises(ProviderResponseError, match="without a chat completion"):
            make_provider(max_retries=0).complete(HELLO)


class TestTimeout:
    def test_a_stalled_server_raises_timeout_after_bounded_retries(self, server, make_provider):
        server.script(Reply(stall_seconds=SLOW_REPLY_SECONDS, body=chat().body))
        provider = make_provider(timeout_seconds=0.2, max_retries=1)
        with pytest.raises(ProviderTimeoutError, match=r"within 0\.2 s"):
            provider.complete(HELLO)
        assert len(server.requests) == 2


class TestRetries:
    def test_rate_limit_then_success_is_retried(self, server, make_provider):
        server.script(api_error(429, "slow down"), chat("after the wait"))
        assert make_provider().complete(HELLO).text == "after the wait"
        assert len(server.requests) == 2

    def test_persistent_500_makes_exactly_max_retries_plus_one_requests(self, server, make_provider):
        server.script(api_error(500))
        with pytest.raises(ProviderResponseError, match="HTTP 500") as err:
            make_provider(max_retries=3).complete(HELLO)
        assert err.value.status_code == 500
        assert len(server.requests) == 4

    def test_backoff_doubles_from_the_initial_wait_up_to_the_cap(self, server, make_provider):
        server.script(api_error(503))
        waits: list[float] = []
        provider = make_provider(sleep=waits.append, max_retries=4, backoff_initial_seconds=0.01,
                                 backoff_max_seconds=0.05)
        with pytest.raises(ProviderResponseError):
            provider.complete(HELLO)
        assert waits == pytest.approx([0.01, 0.02, 0.04, 0.05])

    @pytest.mark.parametrize(
        ("status", "hint"),
        [(400, "not retried"), (401, "llm.api_key"), (403, "llm.api_key"), (404, "llm.model")],
    )
    def test_client_errors_fail_fast_with_a_hint(self, server, make_provider, status, hint):
        server.script(api_error(status, "nope"))
        with pytest.raises(ProviderError, match=hint) as err:
            make_provider().complete(HELLO)
        assert not isinstance(err.value, ProviderResponseError)
        assert (err.value.status_code, err.value.retryable) == (status, False)
        assert len(server.requests) == 1

    def test_unreachable_server_is_retried_then_reported(self, make_provider):
        probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        dead_url = f"http://127.0.0.1:{probe.server_address[1]}/v1"
        probe.server_close()  # nothing listens on this port any more
        waits: list[float] = []
        with pytest.raises(ProviderError, match="cannot reach") as err:
            make_provider(base_url=dead_url, sleep=waits.append, max_retries=2).complete(HELLO)
        assert err.value.retryable
        assert len(waits) == 2


class TestCircuitBreaker:
    def test_opens_after_fail_max_failed_calls_then_sends_nothing(self, server, make_provider):
        server.script(api_error(500))
        provider = make_provider(max_retries=1, breaker_fail_max=2)
        for _ in range(2):
            with pytest.raises(ProviderResponseError):
                provider.complete(HELLO)
        assert len(server.requests) == 4
        with pytest.raises(CircuitOpenError, match="failed 2 calls in a row"):
            provider.complete(HELLO)
        assert len(server.requests) == 4

    def test_a_success_resets_the_consecutive_failure_count(self, server, make_provider):
        server.script(api_error(500), chat("ok"), api_error(500), api_error(500))
        provider = make_provider(max_retries=0, breaker_fail_max=2)
        with pytest.raises(ProviderResponseError):
            provider.complete(HELLO)
        provider.complete(HELLO)
        with pytest.raises(ProviderResponseError):
            provider.complete(HELLO)
        with pytest.raises(ProviderResponseError):  # second in a row: trips, reports its own error
            provider.complete(HELLO)
        with pytest.raises(CircuitOpenError):
            provider.complete(HELLO)
        assert len(server.requests) == 4

    def test_client_errors_do_not_open_the_breaker(self, server, make_provider):
        server.script(api_error(400))
        provider = make_provider(breaker_fail_max=2)
        for _ in range(4):
            with pytest.raises(ProviderError, match="HTTP 400"):
                provider.complete(HELLO)
        assert len(server.requests) == 4

    def test_half_opens_after_the_reset_time_and_closes_on_success(self, server, make_provider):
        server.script(api_error(500), chat("recovered"))
        provider = make_provider(max_retries=0, breaker_fail_max=1, breaker_reset_seconds=30)
        with pytest.raises(ProviderResponseError):
            provider.complete(HELLO)
        with pytest.raises(CircuitOpenError):
            provider.complete(HELLO)
        # Age the open time instead of sleeping: the breaker reads it from its storage.
        provider.breaker_storage.opened_at = datetime.now(UTC) - timedelta(seconds=31)
        assert provider.complete(HELLO).text == "recovered"
        assert provider.breaker.current_state == "closed"


class TestTokenBudget:
    def test_usage_is_charged_to_the_budget(self, server, make_provider):
        server.script(chat())
        budget = TokenBudget("consolidate", 1_000)
        provider = make_provider()
        provider.complete(HELLO, budget=budget)
        provider.complete(HELLO, budget=budget)
        assert (budget.spent, budget.remaining) == (28, 972)

    def test_a_spent_budget_raises_before_any_request(self, server, make_provider):
        server.script(chat())
        budget = TokenBudget("dream", 20)
        provider = make_provider()
        provider.complete(HELLO, budget=budget)  # 14 of 20 spent: the prompt alone needs more
        with pytest.raises(TokenBudgetExceededError, match="'dream' spent 14 of its 20-token"):
            provider.complete(HELLO, budget=budget)
        assert len(server.requests) == 1

    def test_the_reply_cap_is_lowered_to_what_the_budget_has_left(self, server, make_provider):
        server.script(chat())
        prompt = COUNTER.count_messages(HELLO)
        make_provider().complete(HELLO, max_tokens=500, budget=TokenBudget("job", prompt + 40))
        assert server.requests[0]["json"]["max_tokens"] == 40


    def test_without_a_cap_a_large_budget_sends_no_max_tokens(self, server, make_provider):
        server.script(chat())
        make_provider().complete(HELLO, budget=TokenBudget("job", 200_000))
        assert "max_tokens" not in server.requests[0]["json"]

    def test_without_a_cap_a_nearly_spent_budget_caps_the_reply(self, server, make_provider):
        server.script(chat())
        prompt = COUNTER.count_messages(HELLO)
        make_provider().complete(HELLO, budget=TokenBudget("job", prompt + 100))
        assert server.requests[0]["json"]["max_tokens"] == 100


class TestSummarize:
    def test_sends_the_template_with_the_limit_and_the_source(self, server, make_provider):
        server.script(chat("A summary."))
        out = make_provider().summarize("Long text about TK001.", max_tokens=50,
                                        instructions="Focus on tickets.")
        [req] = server.requests
        system, user = req["json"]["messages"]
        assert "at most 50 tokens" in system["content"]
        assert "verbatim" in system["content"] and "Focus on tickets." in system["content"]
        assert user == {"role": "user", "content": "Long text about TK001."}
        assert req["json"]["max_tokens"] == 50
        assert out.text == "A summary."


class TestBadInput:
    @pytest.mark.parametrize(
        ("messages", "error"),
        [
            ([], ValidationError),
            ("hello", ValidationError),
            ([{"role": "wizard", "content": "x"}], ValidationError),
            ([{"role": "user"}], ValidationError),
            ([{"role": "user", "content": 42}], ValidationError),
            ([{"role": "user", "content": "a\x00b"}], InvalidTextError),
            ([{"role": "user", "content": "\ud800"}], InvalidTextError),
        ],
    )
    def test_bad_messages_are_rejected_before_any_request(self, server, make_provider, messages, error):
        server.script(chat())
        with pytest.raises(error):
            make_provider().complete(messages)
        assert server.requests == []

    def test_make_llm_builds_the_openai_provider(self, server):
        llm = make_llm(LLMSettings(provider="openai", base_url=server.url, model="m"), COUNTER)
        try:
            assert isinstance(llm, OpenAIProvider)
            assert llm.endpoint == server.url
        finally:
            llm.close()


LOOKUP_TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}]


class TestChatWithTools:

    def test_tool_calls_come_back_typed_and_the_tools_are_sent(self, server, make_provider):
        server.script(chat(None, tool_calls=[tool_call("lookup", {"q": "x"}, id="c1"),
                                             tool_call("lookup", '{"q": ', id="c2")]))
        reply = make_provider().chat(HELLO, tools=LOOKUP_TOOLS)
        assert reply.text == "" and reply.finish_reason == "tool_calls"
        assert reply.tool_calls == (ToolCallRequest("c1", "lookup", '{"q": "x"}'),
                                    ToolCallRequest("c2", "lookup", '{"q": '))  # kept as sent
        assert reply.message() == {"role": "assistant", "content": None,
                                   "tool_calls": [c.to_json() for c in reply.tool_calls]}
        [req] = server.requests
        assert req["json"]["tools"] == LOOKUP_TOOLS

    def test_a_text_reply_is_a_chat_reply_without_calls(self, server, make_provider):
        server.script(chat("Hi"))
        reply = make_provider().chat(HELLO)
        assert (reply.text, reply.tool_calls, reply.usage) == ("Hi", (), Usage(11, 3, 14))
        assert "tools" not in server.requests[0]["json"]

    def test_an_empty_reply_without_calls_is_retried_then_reported(self, server, make_provider):
        server.script(chat(""))
        with pytest.raises(ProviderResponseError, match="no tool call"):
            make_provider(sleep=lambda s: None).chat(HELLO)
        assert len(server.requests) == 3  # 1 + max_retries 2

    def test_the_budget_counts_the_tool_schemas(self, server, make_provider):
        prompt = COUNTER.count_messages(HELLO)
        with pytest.raises(TokenBudgetExceededError):
            make_provider().chat(HELLO, tools=LOOKUP_TOOLS, budget=TokenBudget("t", prompt + 1))
        assert server.requests == []

    def test_malformed_tools_are_refused_before_sending(self, server, make_provider):
        with pytest.raises(ValidationError, match="tools"):
            make_provider().chat(HELLO, tools=["lookup"])  # type: ignore[list-item]
        assert server.requests == []

    def test_the_offline_provider_cannot_call_tools(self):
        llm = make_llm(LLMSettings(), COUNTER)
        with pytest.raises(ProviderError, match="cannot call tools"):
            llm.chat(HELLO, tools=LOOKUP_TOOLS)
