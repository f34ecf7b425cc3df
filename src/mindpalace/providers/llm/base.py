"""The LLM provider protocol: typed results, per-job token budgets, the guarded `complete`
and `chat` (a reply that may call tools, for the agent loop).

Every provider implements one private method, `_complete` (and `_chat` when it can call
tools); the public `complete` / `chat` do the cross-cutting work once (DESIGN.md §5, I4
"progress or stop"): they validate and copy the caller's messages, check the job's token budget
*before* calling, retry transient failures with bounded exponential backoff (tenacity), stop
calling a failing provider through a circuit breaker (pybreaker), and charge the reply's usage
to the budget.
"""

from __future__ import annotations

import copy
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, TypeVar

import pybreaker
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from mindpalace.blocks import ToolSchema, check_tools
from mindpalace.checks import require_int
from mindpalace.errors import (
    CircuitOpenError,
    ProviderError,
    TokenBudgetExceededError,
    ValidationError,
)
from mindpalace.settings import LLMSettings
from mindpalace.textsafe import require_text
from mindpalace.tokens import TokenCounter

Message = dict[str, Any]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
SAFE_REPLY_CAP_TOKENS = 4_096  # a max_tokens every mainstream chat model accepts


@dataclass(frozen=True)
class Usage:
    """Tokens one call consumed (as reported by the provider, else counted locally)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> Usage:
        return cls(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens)


@dataclass(frozen=True)
class Completion:
    """One model reply.

    Attributes:
        text: the reply text (never empty for a successful call of the OpenAI provider).
        finish_reason: ``"stop"``, ``"length"`` (hit max_tokens), or a provider's other value;
            provider failures raise instead (see `mindpalace.providers.llm.openai`).
        usage: tokens consumed by the call.
        model: the model that answered.
    """

    text: str
    finish_reason: str
    usage: Usage
    model: str


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call a model asked for.

    Attributes:
        id: the call id the tool result must answer (``tool_call_id``).
        name: the tool's name as the model wrote it (may name no known tool).
        arguments: the arguments as the model wrote them — JSON text, possibly malformed;
            the caller validates them (see :mod:`mindpalace.agent.tools`).
    """

    id: str
    name: str
    arguments: str

    def to_json(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` item of this call."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ChatReply:
    """One model reply that may call tools (:meth:`LLMProvider.chat`).

    Attributes:
        text: the reply text; ``""`` when the model only called tools.
        tool_calls: the calls the model asked for, in order (empty for a plain answer).
        finish_reason: ``"stop"``, ``"tool_calls"``, ``"length"`` or a provider's other value.
        usage: tokens consumed by the call. model: the model that answered.
    """

    text: str
    tool_calls: tuple[ToolCallRequest, ...]
    finish_reason: str
    usage: Usage
    model: str

    def message(self) -> Message:
        """The reply as an OpenAI assistant message (content None when it only calls tools)."""
        msg: Message = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_json() for c in self.tool_calls]
        elif not self.text:
            msg["content"] = ""
        return msg


_Reply = TypeVar("_Reply", Completion, ChatReply)


class TokenBudget:
    """A per-job token budget: every call's usage is charged; a spent budget stops the job.

    Thread-safe; share one instance between the calls of one job (a consolidation run, a
    dream run, a benchmark). Checking happens before each call (`LLMProvider.complete` calls
    :meth:`check` with the prompt's size), charging after it.

    Example:
        >>> b = TokenBudget("dream", 1_000)
        >>> b.charge(Usage.of(300, 100)); b.remaining
        600

    Raises:
        ValidationError: `limit_tokens` < 1 or an empty job name.
    """

    def __init__(self, job: str, limit_tokens: int) -> None:
        if not isinstance(job, str) or not job.strip():
            raise ValidationError("TokenBudget job must be a non-empty name")
        self.job = job
        self.limit_tokens = require_int("TokenBudget limit_tokens", limit_tokens)
        self._spent = 0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, job: str, settings: LLMSettings) -> TokenBudget:
        """A budget of ``settings.job_token_budget`` tokens for `job` (the configured default)."""
        return cls(job, settings.job_token_budget)

    @property
    def spent(self) -> int:
        """Tokens charged so far."""
        return self._spent

    @property
    def remaining(self) -> int:
        """Tokens left (0 when spent; never negative)."""
        return max(0, self.limit_tokens - self._spent)

    @property
    def exhausted(self) -> bool:
        return self._spent >= self.limit_tokens

    def check(self, needed: int = 0) -> None:
        """Raise unless at least `needed` tokens (and at least one) remain.

        Raises:
            TokenBudgetExceededError: the budget is spent, or fewer than `needed` tokens remain.
        """
        with self._lock:
            if self._spent >= self.limit_tokens or self.limit_tokens - self._spent < needed:
                raise TokenBudgetExceededError(self.job, self.limit_tokens, self._spent, needed)

    def charge(self, usage: Usage | int) -> None:
        """Add a call's usage (or a token count) to the spent total.

        Charging never raises: the reply was already paid for, and throwing it away would waste
        it. The *next* :meth:`check` (i.e. the job's next call) raises once the budget is spent.
        """
        tokens = usage.total_tokens if isinstance(usage, Usage) else int(usage)
        with self._lock:
            self._spent += max(0, tokens)

    def __repr__(self) -> str:
        return f"TokenBudget({self.job!r}, spent={self._spent}, limit={self.limit_tokens})"


def validate_messages(messages: Any) -> list[Message]:
    """Check an OpenAI-format message list and return a deep copy the provider may not leak back.

    Raises:
        ValidationError: not a non-empty list of dicts, an unknown role, or content that is
            neither text, a list of parts, nor None (assistant tool calls); the message names the
            offending index.
        InvalidTextError: text content with a NUL or a lone surrogate.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes) or not messages:
        raise ValidationError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValidationError(f"messages[{i}] must be a dict, got {type(msg).__name__}")
        role = msg.get("role")
        if role not in ROLES:
            raise ValidationError(f"messages[{i}].role must be one of {sorted(ROLES)}, got {role!r}")
        content = msg.get("content")
        if isinstance(content, str):
            require_text(f"messages[{i}].content", content)
        elif content is None:
            if role != "assistant" or not msg.get("tool_calls"):
                raise ValidationError(f"messages[{i}].content is missing")
        elif not isinstance(content, list):
            raise ValidationError(
                f"messages[{i}].content must be text or a list of parts, got {type(content).__name__}"
            )
    return copy.deepcopy(list(messages))


@lru_cache(maxsize=8)
def load_prompt(name: str) -> str:
    """The markdown prompt template `mindpalace/prompts/<name>.md`."""
    return resources.files("mindpalace").joinpath(f"prompts/{name}.md").read_text(encoding="utf-8")


def summarize_messages(text: str, *, max_tokens: int, instructions: str | None = None) -> list[Message]:
    """The chat messages asking a model to summarize `text` in at most `max_tokens` tokens."""
    extra = f"\nAdditional instructions:\n{instructions.strip()}\n" if instructions else ""
    system = load_prompt("summarize").replace("{max_tokens}", str(max_tokens))
    return [
        {"role": "system", "content": system.replace("{instructions}", extra).rstrip() + "\n"},
        {"role": "user", "content": text},
    ]


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


def _not_provider_health(exc: BaseException) -> bool:
    """Breaker exclusion: only exhausted transient failures say the provider is unhealthy.

    Bad requests (4xx, content filter, validation) are the caller's problem and must not
    open the circuit for every other caller.
    """
    return not _is_retryable(exc)


class LLMProvider(ABC):
    """Base of every LLM provider: ``complete(messages) → Completion`` with retries, breaker, budget.

    Subclasses implement :meth:`_complete` only. Construct through
    :func:`mindpalace.providers.llm.make_llm`. Thread-safe: concurrent calls share the breaker
    but are not serialized by it.

    Example:
        >>> llm = make_llm(settings.llm, get_counter("o200k_base"))     # doctest: +SKIP
        >>> budget = TokenBudget.from_settings("consolidate", settings.llm)  # doctest: +SKIP
        >>> llm.summarize(old_turns, max_tokens=512, budget=budget).text  # doctest: +SKIP

    Args:
        settings: the ``[llm]`` settings (model, timeout, retries, backoff, breaker).
        counter: token counter used for budget checks and for usage the provider omits.
        sleep: how retry waits are slept (seconds); injectable so tests never wait.
    """

    name: str = "base"

    def __init__(
        self,
        settings: LLMSettings,
        counter: TokenCounter,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.counter = counter
        self._sleep = sleep
        # Keep the storage so callers (and tests) can inspect or age the open time.
        self.breaker_storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self.breaker = pybreaker.CircuitBreaker(
            fail_max=settings.breaker_fail_max,
            reset_timeout=settings.breaker_reset_seconds,
            exclude=[_not_provider_health],
            state_storage=self.breaker_storage,
            name=f"llm:{self.name}",
            # The call that trips the breaker reports its own error, not a generic one.
            throw_new_error_on_trip=False,
        )

    @property
    def model(self) -> str:
        return self.settings.model

    def close(self) -> None:
        """Release network resources (a no-op for offline providers)."""
        return None

    def __enter__(self) -> LLMProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        budget: TokenBudget | None = None,
        **opts: Any,
    ) -> Completion:
        """Send `messages` to the model and return its reply.

        Args:
            messages: OpenAI-format chat messages; never modified.
            max_tokens: cap on the reply (tokens); None = the provider's default. With a
                `budget`, the cap is lowered to what the budget has left after the prompt
                (with None, only once that is below 4,096 tokens).
            temperature: sampling temperature (0 = as deterministic as the model allows).
            budget: the job's token budget; checked before the call, charged after it.
            **opts: provider-specific request options (e.g. ``stop``, ``seed``).

        Returns:
            A :class:`Completion`.

        Raises:
            ValidationError / InvalidTextError: malformed messages or max_tokens < 1.
            TokenBudgetExceededError: the budget cannot pay for the prompt; nothing was sent.
            CircuitOpenError: the breaker is open after ``breaker_fail_max`` consecutive failed
                calls; nothing was sent. It half-opens after ``breaker_reset_seconds``.
            ProviderTimeoutError / ProviderResponseError: still failing after
                ``max_retries`` retries (waits ``backoff_initial_seconds`` · 2^n, capped at
                ``backoff_max_seconds``).
            ProviderError: a non-transient failure (4xx, content filter) — not retried.
        """
        msgs = validate_messages(messages)
        return self._call(
            msgs, None, max_tokens, budget,
            lambda cap: self._complete(msgs, max_tokens=cap, temperature=temperature, **opts),
        )

    def chat(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSchema] | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        budget: TokenBudget | None = None,
        **opts: Any,
    ) -> ChatReply:
        """Send `messages` with the `tools` the model may call; return its text and tool calls.

        The agent loop's call (:mod:`mindpalace.agent`): the same validation, budget check,
        retries, breaker and charging as :meth:`complete`, but a reply that only calls tools
        (no text) is a valid reply.

        Args:
            messages: OpenAI-format chat messages (tool calls and results included); never modified.
            tools: OpenAI-format tool schemas (``{"type": "function", "function": {…}}``);
                counted against the `budget` with the prompt.
            max_tokens / temperature / budget / opts: as for :meth:`complete`.

        Returns:
            A :class:`ChatReply` with non-empty text or at least one tool call.

        Raises:
            ProviderError: the provider cannot call tools (the offline extractive one), and
                everything :meth:`complete` raises (ValidationError for malformed `tools`).
        """
        msgs = validate_messages(messages)
        tool_list = check_tools(list(tools) if tools is not None else None)
        return self._call(
            msgs, tool_list, max_tokens, budget,
            lambda cap: self._chat(msgs, tools=tool_list, max_tokens=cap, temperature=temperature, **opts),
        )

    def _call(
        self,
        msgs: list[Message],
        tools: list[ToolSchema] | None,
        max_tokens: int | None,
        budget: TokenBudget | None,
        attempt: Callable[[int | None], _Reply],
    ) -> _Reply:
        """The cross-cutting part of every call: check the budget (prompt and tool schemas
        counted), run `attempt` under retries and the breaker, charge the usage."""
        if max_tokens is not None:
            require_int("max_tokens", max_tokens)
        if budget is not None:
            prompt_tokens = self.counter.count_messages(msgs, tools)
            max_tokens = self._budgeted_max_tokens(budget, prompt_tokens, max_tokens)
        cap = max_tokens
        reply = self._guarded(lambda: attempt(cap))
        if budget is not None:
            budget.charge(reply.usage)
        return reply

    def summarize(
        self,
        text: str,
        *,
        max_tokens: int,
        instructions: str | None = None,
        budget: TokenBudget | None = None,
    ) -> Completion:
        """Summarize `text` in at most `max_tokens` tokens, keeping ids, numbers, dates, constraints.

        The prompt is ``prompts/summarize.md`` (identifiers, paths, URLs, numbers with units,
        dates, names and constraint sentences verbatim; the source's language). The caller
        still gates the result (I3: non-empty, shorter than the source, not an error finish).

        Raises:
            InvalidTextError: `text` is empty, not a string, or has NUL / lone surrogates.
            ValidationError: `max_tokens` < 1.
            Everything :meth:`complete` raises.
        """
        require_text("text", text, allow_empty=False)
        require_int("max_tokens", max_tokens)
        messages = summarize_messages(text, max_tokens=max_tokens, instructions=instructions)
        return self.complete(messages, max_tokens=max_tokens, budget=budget)

    @abstractmethod
    def _complete(
        self, messages: list[Message], *, max_tokens: int | None, temperature: float, **opts: Any
    ) -> Completion:
        """One attempt. Raise a `ProviderError` with ``retryable=True`` for transient failures."""

    def _chat(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSchema] | None,
        max_tokens: int | None,
        temperature: float,
        **opts: Any,
    ) -> ChatReply:
        """One attempt of :meth:`chat`; providers that can call tools override it."""
        raise ProviderError(
            f"LLM provider {self.name!r} cannot call tools; point the agent at an "
            "OpenAI-compatible model (agent.base_url / OPENAI_BASE_URL)", retryable=False)

    def _budgeted_max_tokens(
        self, budget: TokenBudget | None, prompt_tokens: int, max_tokens: int | None
    ) -> int | None:
        """Check the budget can pay for the prompt plus one reply token; cap the reply to the rest.

        Without a caller's cap the reply is only capped once the rest is below
        SAFE_REPLY_CAP_TOKENS: sending max_tokens=190_000 would make real APIs reject the request.
        """
        if budget is None:
            return max_tokens
        budget.check(prompt_tokens + 1)
        left = budget.remaining - prompt_tokens
        if max_tokens is None:
            return left if left < SAFE_REPLY_CAP_TOKENS else None
        return min(max_tokens, left)

    def _guarded(self, attempt: Callable[[], _Reply]) -> _Reply:
        """Run `attempt` under the breaker, retrying transient failures with bounded backoff."""
        s = self.settings
        retrying = Retrying(
            stop=stop_after_attempt(s.max_retries + 1),
            wait=wait_exponential(
                multiplier=s.backoff_initial_seconds, min=0, max=s.backoff_max_seconds
            ),
            retry=retry_if_exception(_is_retryable),
            sleep=self._sleep,
            reraise=True,
        )
        try:
            # `calling()` releases the breaker's lock while the body runs, so concurrent calls
            # through one provider are not serialized (breaker.call() would hold it throughout).
            with self.breaker.calling():
                return retrying(attempt)
        except pybreaker.CircuitBreakerError as exc:
            raise CircuitOpenError(
                f"LLM provider {self.name!r} ({self.model}) failed {s.breaker_fail_max} calls in "
                f"a row; not calling it for {s.breaker_reset_seconds:g} s (llm.breaker_reset_seconds)"
            ) from exc
