"""Optional embedder: WordLlama ``l2_supercat`` static token embeddings (256-d, offline).

The weights (``l2_supercat_256.safetensors``) and tokenizer config ship inside the
``wordllama`` wheel; they are loaded from the package folder with downloads disabled, so
nothing is fetched at run time. A static model (mean of token vectors, no attention): tens of
thousands of texts per CPU-second (~16× ``use``). On LoCoMo its dense list (speaker names removed
from the query) beats ``use``'s (dev R@10 61.5 vs 48.8) and product recall is on a par (held-out
R@10 76.2 vs 76.6); English only, where ``use`` is multilingual (2026-12-01).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mindpalace.errors import ProviderError
from mindpalace.providers.embed.base import DEFAULT_BATCH_SIZE, LazyModelEmbedder

WORDLLAMA_DIM = 256
INSTALL_HINT = "pip install 'mindpalace[wordllama]'"


class WordLlamaEmbedder(LazyModelEmbedder):
    """`wordllama.WordLlama` (``l2_supercat``, 256-d) as an :class:`Embedder`.

    Queries and documents are embedded alike (the model has no prefixes).

    Args:
        batch_size: texts per engine call.
    Raises:
        ProviderError: ``wordllama`` is not installed (the message says ``pip install
            'mindpalace[wordllama]'``) — at construction; or (on first embed) its bundled
            weights fail to load.
    """

    model_id = "wordllama-l2-supercat-256"
    chunk_tokens = 1024  # a bag of token vectors: cost is linear in length, no input limit

    def __init__(self, *, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        try:
            import wordllama  # noqa: F401  (import only: the weights load lazily)
        except ImportError as exc:
            raise ProviderError(
                f"the 'wordllama' embedder needs the optional package wordllama: {INSTALL_HINT}"
            ) from exc
        super().__init__(batch_size=batch_size)

    @property
    def dim(self) -> int:
        return WORDLLAMA_DIM

    def _load_model(self) -> Any:
        import wordllama

        try:
            # The wheel keeps weights/ and tokenizers/ beside the module: as cache_dir
            # that folder resolves both files locally; downloads stay disabled.
            return wordllama.WordLlama.load(
                dim=WORDLLAMA_DIM,
                cache_dir=Path(wordllama.__file__).parent,
                disable_download=True,
            )
        except (OSError, RuntimeError, ValueError) as exc:
            raise ProviderError(f"wordllama failed to load its bundled weights: {exc}") from exc

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        out = self._load().embed(list(texts))  # normalised by the base (empty text: zero row)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)
