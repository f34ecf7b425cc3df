"""Deterministic fakes for tests of components that need an LLM: `FakeLLM`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mindpalace.errors import ProviderError, ProviderResponseError
from mindpalace.providers.llm.base import Completion, LLMProvider, Message, Usage
from mindpalace.providers.llm.extractive import ExtractiveSummarizer
from mindpalace.settings import LLMSettings
from mindpalace.tokens import TokenCounter, get_counter

Reply = str | Completion | BaseException


class FakeLLM(LLMProvider):
    """A scripted `LLMProvider` that goes through the real `complete` (validation, retries,
    breaker, budget) but answers from a script instead of a network.

    Args:
        replies: answers in order, one per attempt: a str (→ finish_reason ``"stop"``), a
            `Completion` (returned as is, e.g. ``finish_reason="error"`` to test the I3 gate),
            or an exception instance (raised). When the script runs out, `default` answers.
        fail_times: the first N attempts raise `error` before the script is consulted.
        error: what a failing attempt raises; default a retryable `ProviderResponseError`.
        default: ``(messages, max_tokens) -> text`` once the script is exhausted; default a
            deterministic extractive summary of the user messages within max_tokens.
        settings: ``[llm]`` settings; default `LLMSettings()` (3 retries, breaker after 5).
            Pass ``LLMSettings(max_retries=0)`` to see every failure directly.
        counter: token counter for usage; default exact ``o200k_base``.

    Attributes:
        calls: attempts made so far (retries included).
        requests: the messages of every attempt (copies), with ``max_tokens`` / ``temperature``.

    Retry waits are not slept.
    """

    name = "fake"

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        fail_times: int = 0,
        error: ProviderError | None = None,
        default: Callable[[list[Message], int | None], str] | None = None,
        settings: LLMSettings | None = None,
        counter: TokenCounter | None = None,
        model: str = "fake-model",
    ) -> None:
        counter = counter or get_counter("o200k_base")
        super().__init__(settings or LLMSettings(model=model), counter, sleep=lambda _s: None)
        self._model = model
        self.script: list[Reply] = list(replies)
        self.fail_times = fail_times
        self.error = error or ProviderResponseError("FakeLLM scripted failure", retryable=True)
        self.default = default or self._extractive_default
        self.calls = 0
        self.requests: list[dict[str, Any]] = []
        self._summarizer = ExtractiveSummarizer(counter.count, counter.truncate)

    @property
    def model(self) -> str:
        return self._model

    def _complete(
        self, messages: list[Message], *, max_tokens: int | None, temperature: float, **opts: Any
    ) -> Completion:
        self.calls += 1
        self.requests.append(
            {"messages": messages, "max_tokens": max_tokens, "temperature": temperature, **opts}
        )
        if self.calls <= self.fail_times:
            raise self.error
        reply = self.script.pop(0) if self.script else self.default(messages, max_tokens)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Completion):
            return reply
        usage = Usage.of(self.counter.count_messages(messages), self.counter.count(reply))
        return Completion(text=reply, finish_reason="stop", usage=usage, model=self._model)

    def _extractive_default(self, messages: list[Message], max_tokens: int | None) -> str:
        text = "\n".join(
            m["content"] for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)
        )
        return self._summarizer.summarize(text or "ok", max_tokens or 256)
