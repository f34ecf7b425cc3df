"""The embedder protocol: texts → L2-normalised float32 vectors, validated and batched once here."""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from mindpalace.errors import ProviderResponseError
from mindpalace.textsafe import require_text

DEFAULT_BATCH_SIZE = 64  # only used when a provider is built without settings


class Embedder(abc.ABC):
    """Turns texts into unit-length vectors for cosine search (the ``embed`` service of DESIGN.md §2).

    Providers implement one private method, :meth:`_embed_batch`; validation, batching, shape
    checks and L2 normalisation happen once in the public methods, so every provider returns
    the same shapes and raises the same errors.

    Attributes:
        model_id: unique id of provider + model + variant (``use-multilingual-v3``,
            ``e5-small-q4``, ``openai:text-embedding-3-small``, ``hashing-256``); stored with
            every vector so a changed embedder is detected and never mixed with the old one.
        dim: vector width (floats).
        batch_size: texts per provider call (``settings.embed.batch_size``).
        chunk_tokens: default embedding window for long documents (tokens).

    Example:
        >>> emb = HashingEmbedder(dim=64)            # doctest: +SKIP
        >>> emb.embed(["budget 2000 CNY", "预算"]).shape   # doctest: +SKIP
        (2, 64)
    """

    model_id: str
    batch_size: int = DEFAULT_BATCH_SIZE
    chunk_tokens: int = 256
    """Embedding window for long documents (tokens, o200k): what the model reads well and
    cheaply; ``embed.chunk_tokens = 0`` uses it (see :mod:`mindpalace.retrieval.chunking`)."""

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """Vector width (number of float32 components)."""

    @abc.abstractmethod
    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        """Provider work: at most `batch_size` valid texts → array of shape (len(texts), dim).

        `query` is True for search queries (e5 uses a ``query:`` prefix, passages ``passage:``).
        """

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents (passages).

        Args:
            texts: strings to embed; empty strings are allowed.
        Returns:
            float32 array of shape (len(texts), dim), each row L2-normalised (an all-zero row,
            which only the hashing embedder can produce for featureless text, stays zero).
            An empty list gives shape (0, dim).
        Raises:
            InvalidTextError: an item is not a str, or holds NUL / a lone surrogate (nothing
                is sent to the provider).
            ProviderError: the provider failed or answered with the wrong shape.
        """
        return self._run(texts, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one search query → float32 vector of shape (dim,), L2-normalised.

        Raises:
            InvalidTextError: `text` is not a storable string.
            ProviderError: the provider failed.
        """
        return self._run([text], query=True)[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed several search queries in one provider call → float32 array of shape
        (len(texts), dim), rows L2-normalised (as :meth:`embed_query` gives them one by one).

        Raises:
            InvalidTextError: an item is not a storable string.
            ProviderError: the provider failed.
        """
        return self._run(texts, query=True)

    def _run(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if isinstance(texts, str):  # a bare string would otherwise be embedded per character
            texts = [texts]
        items = [require_text(f"texts[{i}]", t) for i, t in enumerate(texts)]
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        step = max(1, int(self.batch_size))
        parts = [self._checked(items[i : i + step], query=query) for i in range(0, len(items), step)]
        return _normalise(np.concatenate(parts, axis=0))

    def _checked(self, batch: list[str], *, query: bool) -> np.ndarray:
        out = np.asarray(self._embed_batch(batch, query=query), dtype=np.float32)
        if out.ndim == 1 and len(batch) == 1:
            out = out.reshape(1, -1)
        if out.ndim != 2 or out.shape[0] != len(batch) or out.shape[1] != self.dim:
            raise ProviderResponseError(
                f"embedder {self.model_id!r} returned shape {out.shape} for {len(batch)} texts; "
                f"expected ({len(batch)}, {self.dim})"
            )
        if not np.isfinite(out).all():
            raise ProviderResponseError(f"embedder {self.model_id!r} returned NaN or infinity")
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r})"


def _normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.ascontiguousarray(matrix / np.where(norms > 0, norms, 1.0), dtype=np.float32)


class LazyModelEmbedder(Embedder):
    """An embedder over a local model that loads once, on first use, under a lock (several
    threads may embed at once; the load takes ~1 s and hundreds of MB, so opening a workspace
    that never embeds pays nothing).

    Subclasses implement :meth:`_load_model`; :meth:`_load` returns the one loaded model.

    Raises (from :meth:`_load`): whatever :meth:`_load_model` raises — a ``ProviderError``
        naming the package when its weights fail to load.
    """

    def __init__(self, *, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @abc.abstractmethod
    def _load_model(self) -> Any:
        """Build the provider's model (called at most once while it succeeds)."""

    def _load(self) -> Any:
        with self._lock:  # one load even when several threads embed at once
            if self._model is None:
                self._model = self._load_model()
            return self._model
