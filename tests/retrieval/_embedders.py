"""Deterministic stand-in embedders for the retrieval tests."""

from __future__ import annotations

import re
import zlib

import numpy as np

from mindpalace.providers.embed import HashingEmbedder


def bag_of_words(texts: list[str], dim: int = 256) -> np.ndarray:
    """(len(texts), dim) unit vectors of hashed lower-cased word counts."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for w in re.findall(r"\w+", text.lower()):
            out[row, zlib.crc32(w.encode()) % dim] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


class Recording(HashingEmbedder):
    """A hashing embedder that remembers every passage it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(64)
        self.seen: list[str] = []

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        if not query:
            self.seen += texts
        return super()._embed_batch(texts, query=query)
