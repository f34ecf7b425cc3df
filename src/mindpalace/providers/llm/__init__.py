"""LLM providers: the OpenAI-compatible client and the offline extractive summarizer.

    >>> from mindpalace.providers.llm import make_llm          # doctest: +SKIP
    >>> llm = make_llm(settings.llm, get_counter("o200k_base"))  # doctest: +SKIP
    >>> llm.summarize(text, max_tokens=200).text                 # doctest: +SKIP
"""

from __future__ import annotations

from mindpalace.errors import ConfigError
from mindpalace.providers.llm.base import (
    ChatReply,
    Completion,
    LLMProvider,
    Message,
    TokenBudget,
    ToolCallRequest,
    Usage,
    summarize_messages,
    validate_messages,
)
from mindpalace.providers.llm.extractive import ExtractiveProvider, ExtractiveSummarizer
from mindpalace.settings import LLMSettings
from mindpalace.tokens import TokenCounter

__all__ = [
    "ChatReply",
    "Completion",
    "ExtractiveProvider",
    "ExtractiveSummarizer",
    "LLMProvider",
    "Message",
    "OpenAIProvider",
    "TokenBudget",
    "ToolCallRequest",
    "Usage",
    "make_llm",
    "summarize_messages",
    "validate_messages",
]


def make_llm(settings: LLMSettings, counter: TokenCounter) -> LLMProvider:
    """The provider named by ``settings.provider``: ``"openai"`` or ``"extractive"`` (offline).

    Raises:
        ConfigError: an unknown provider name, or no API key for the default OpenAI endpoint.
    """
    if settings.provider == "openai":
        from mindpalace.providers.llm.openai import OpenAIProvider

        return OpenAIProvider(settings, counter)
    if settings.provider == "extractive":
        return ExtractiveProvider(settings, counter)
    raise ConfigError("settings", "llm.provider", f"unknown provider {settings.provider!r}; "
                      "use 'openai' or 'extractive'")


def __getattr__(name: str) -> object:
    # The openai SDK takes ~0.3 s to import; load it only when the OpenAI provider is used.
    if name == "OpenAIProvider":
        from mindpalace.providers.llm.openai import OpenAIProvider

        return OpenAIProvider
    raise AttributeError(name)
