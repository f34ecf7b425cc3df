"""The OpenAI-compatible chat client (OpenAI, vLLM, Ollama, llama.cpp server, DeepSeek, Qwen …).

Retries are ours (the SDK's are switched off with ``max_retries=0``); this module only turns one
HTTP exchange into a `Completion` or a classified `ProviderError`.

How unusable replies are reported (the decision, so callers need no second check):

| reply                                        | outcome                                          |
|----------------------------------------------|--------------------------------------------------|
| no answer within ``llm.timeout_seconds``     | `ProviderTimeoutError`, retried                  |
| cannot connect                               | `ProviderError` (retryable), retried             |
| HTTP 408 / 409 / 429 / 5xx (HTML page too)   | `ProviderResponseError`, retried; HTML pages are |
|                                              | named as such with their ``<title>``             |
| HTTP 200 that is not a chat completion       | `ProviderResponseError`, retried                 |
| (malformed JSON, HTML, no choices)           |                                                  |
| empty / whitespace-only content              | `ProviderResponseError`, retried, then reported  |
| ``finish_reason == "error"``                 | `ProviderResponseError`, retried, then reported  |
| ``finish_reason == "content_filter"``        | `ProviderResponseError`, not retried (the same   |
|                                              | request would be filtered again)                 |
| other HTTP 4xx (400, 401, 403, 404, 422 …)   | `ProviderError`, not retried, with a hint        |

So a returned `Completion` always carries non-empty text and a finish_reason of ``"stop"``,
``"length"`` or another non-error value. Only retryable failures count towards the breaker.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from mindpalace.blocks import ToolSchema
from mindpalace.errors import (
    ConfigError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
)
from mindpalace.providers.llm.base import (
    ChatReply,
    Completion,
    LLMProvider,
    Message,
    ToolCallRequest,
    Usage,
)
from mindpalace.settings import LLMSettings
from mindpalace.tokens import TokenCounter

# Same transient statuses the SDK itself would retry.
RETRYABLE_STATUS = frozenset({408, 409, 429})
ERROR_DETAIL_MAX_CHARS = 300  # enough for an API error message, not a whole HTML page
LOCAL_SERVER_API_KEY = "EMPTY"  # vLLM / llama.cpp convention when a local server needs no key

_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TAGS = re.compile(r"<[^>]+>")


class OpenAIProvider(LLMProvider):
    """`LLMProvider` over the official ``openai`` SDK's chat completions API.

    Args:
        settings: ``[llm]`` settings; ``base_url`` (e.g. ``http://localhost:8000/v1``; None =
            the SDK's default endpoint), ``api_key`` (None with a base_url → ``"EMPTY"`` for
            keyless local servers), ``model``, ``timeout_seconds``.
        counter: counts usage when the server reports none.
        client: an injected ``openai.OpenAI`` (tests, custom HTTP clients).
        sleep: retry-wait function (seconds).

    Raises:
        ConfigError: no API key anywhere for the default (cloud) endpoint.
    """

    name = "openai"

    def __init__(
        self,
        settings: LLMSettings,
        counter: TokenCounter,
        *,
        client: openai.OpenAI | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(settings, counter, sleep=sleep)
        self._owns_client = client is None
        self.client = client or _make_client(settings)
        self.endpoint = str(self.client.base_url).rstrip("/")

    def close(self) -> None:
        """Close the HTTP connection pool (only when this provider created the client)."""
        if self._owns_client:
            self.client.close()

    def _complete(
        self, messages: list[Message], *, max_tokens: int | None, temperature: float, **opts: Any
    ) -> Completion:
        request: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature}
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        request.update(opts)
        return self._completion(self._send(request), messages)

    def _chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None,
        max_tokens: int | None,
        temperature: float,
        **opts: Any,
    ) -> ChatReply:
        request: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": temperature}
        if tools:
            request["tools"] = tools
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        request.update(opts)
        return self._chat_reply(self._send(request), messages)

    def _send(self, request: dict[str, Any]) -> Any:
        """One HTTP exchange; SDK and HTTP failures become classified ProviderErrors."""
        try:
            return self.client.chat.completions.create(**request)
        except openai.APITimeoutError as exc:
            raise ProviderTimeoutError(
                f"{self.endpoint} did not answer within {self.settings.timeout_seconds:g} s "
                "(llm.timeout_seconds)",
                retryable=True,
            ) from exc
        except openai.APIConnectionError as exc:
            raise ProviderError(
                f"cannot reach {self.endpoint}: {exc.__cause__ or exc}; is the server running "
                "and llm.base_url right?",
                retryable=True,
            ) from exc
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except (json.JSONDecodeError, openai.APIResponseValidationError) as exc:
            raise ProviderResponseError(
                f"{self.endpoint} answered with malformed JSON: {exc}", retryable=True
            ) from exc

    def _completion(self, reply: Any, messages: list[Message]) -> Completion:
        """Turn a parsed reply into a Completion, or raise for anything unusable."""
        choice = self._choice(reply)
        finish = choice.finish_reason or "stop"
        text = choice.message.content if choice.message is not None else None
        self._check_finish(finish)
        if not isinstance(text, str) or not text.strip():
            raise ProviderResponseError(
                f"{self.endpoint}: empty reply (finish_reason {finish!r}, model {self.model})",
                retryable=True,
            )
        return Completion(text=text, finish_reason=finish, usage=self._usage(reply, messages, text),
                          model=reply.model or self.model)

    def _chat_reply(self, reply: Any, messages: list[Message]) -> ChatReply:
        """Turn a parsed reply into a ChatReply (text and/or tool calls), or raise."""
        choice = self._choice(reply)
        finish = choice.finish_reason or "stop"
        self._check_finish(finish)
        msg = choice.message
        text = msg.content if msg is not None and isinstance(msg.content, str) else ""
        calls = []
        for i, call in enumerate((msg.tool_calls if msg is not None else None) or []):
            fn = getattr(call, "function", None)
            if fn is None or not isinstance(getattr(fn, "name", None), str):
                continue  # not a function call (a custom tool type): nothing we could run
            args = fn.arguments if isinstance(fn.arguments, str) else json.dumps(fn.arguments)
            call_id = call.id if isinstance(call.id, str) and call.id else f"call_{i + 1}"
            calls.append(ToolCallRequest(call_id, fn.name, args))
        if not text.strip() and not calls:
            raise ProviderResponseError(
                f"{self.endpoint}: empty reply with no tool call (finish_reason {finish!r}, "
                f"model {self.model})", retryable=True,
            )
        usage = self._usage(reply, messages, text + "".join(c.arguments for c in calls))
        return ChatReply(text=text, tool_calls=tuple(calls), finish_reason=finish, usage=usage,
                         model=reply.model or self.model)

    def _choice(self, reply: Any) -> Any:
        if not isinstance(reply, ChatCompletion) or not reply.choices:
            raise ProviderResponseError(
                f"{self.endpoint} answered HTTP 200 without a chat completion: "
                f"{_excerpt(reply if isinstance(reply, str) else repr(reply))}",
                retryable=True,
            )
        return reply.choices[0]

    def _check_finish(self, finish: str) -> None:
        if finish == "content_filter":
            raise ProviderResponseError(
                f"{self.endpoint}: the model's content filter stopped the reply (model {self.model})",
                retryable=False,
            )
        if finish == "error":
            raise ProviderResponseError(
                f"{self.endpoint}: the model reported finish_reason 'error' (model {self.model})",
                retryable=True,
            )

    def _usage(self, reply: Any, messages: list[Message], text: str) -> Usage:
        if reply.usage is not None:
            return Usage(
                reply.usage.prompt_tokens or 0,
                reply.usage.completion_tokens or 0,
                reply.usage.total_tokens
                or (reply.usage.prompt_tokens or 0) + (reply.usage.completion_tokens or 0),
            )
        # some local servers omit usage; count it ourselves so budgets still work
        return Usage.of(self.counter.count_messages(messages), self.counter.count(text))

    def _status_error(self, exc: openai.APIStatusError) -> ProviderError:
        status = exc.status_code
        body = exc.body if exc.body is not None else exc.response.text
        ctype = exc.response.headers.get("content-type", "")
        if "html" in ctype or (isinstance(body, str) and body.lstrip()[:1] == "<"):
            detail = f"an HTML error page ({_html_title(str(body))})"
        else:
            detail = _excerpt(exc.message)
        where = f"{self.endpoint} answered HTTP {status} with {detail}"
        if status in RETRYABLE_STATUS or status >= 500:
            return ProviderResponseError(where, retryable=True, status_code=status)
        hint = {
            401: "check llm.api_key",
            403: "check llm.api_key and the key's permissions",
            404: f"check llm.model ({self.model!r}) and that llm.base_url ends in /v1",
        }.get(status, "the request was rejected; it is not retried")
        return ProviderError(f"{where}; {hint}", retryable=False, status_code=status)


def _make_client(settings: LLMSettings) -> openai.OpenAI:
    api_key = settings.api_key
    if api_key is None and settings.base_url is not None:
        api_key = LOCAL_SERVER_API_KEY
    try:
        return openai.OpenAI(
            base_url=settings.base_url,
            api_key=api_key,
            timeout=settings.timeout_seconds,
            max_retries=0,  # retries, backoff and the breaker live in LLMProvider.complete
        )
    except openai.OpenAIError as exc:
        raise ConfigError(
            "settings", "llm.api_key",
            "no API key for the OpenAI endpoint; set llm.api_key (MINDPALACE_LLM__API_KEY), "
            "or llm.base_url for a local server",
        ) from exc


def _html_title(page: str) -> str:
    m = _TITLE.search(page)
    text = m.group(1) if m else _TAGS.sub(" ", page)
    return _excerpt(text) or "no title"


def _excerpt(text: str) -> str:
    text = " ".join(str(text).split())
    if len(text) > ERROR_DETAIL_MAX_CHARS:
        return text[:ERROR_DETAIL_MAX_CHARS] + "…"
    return text
