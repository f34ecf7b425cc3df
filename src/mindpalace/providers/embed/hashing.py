"""Deterministic feature-hashing embedder — for unit tests only, never for real retrieval.

It needs no model and gives the same vector for the same text in every process, so tests of
vector search, re-embedding and scope isolation run in milliseconds. Texts that share words or
character n-grams get similar vectors, but there is no semantics: "hotel" and "lodging" are
unrelated to it. Use ``use`` (the offline default) or ``e5`` for real recall.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from functools import lru_cache

import numpy as np

from mindpalace.providers.embed.base import DEFAULT_BATCH_SIZE, Embedder

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
CHAR_NGRAM = 3  # character n-grams inside a word: catches inflections (budget / budgets)
WORD_WEIGHT = 2.0  # whole words count more than their n-grams


class HashingEmbedder(Embedder):
    """Feature hashing of word unigrams and character 3-grams (CJK: characters and bigrams).

    **For unit tests only** (see module docstring). Each feature is hashed with a seeded
    BLAKE2b into one of `dim` buckets with a ±1 sign; counts are dampened with 1 + log(tf)
    and the row is L2-normalised by :class:`Embedder`.

    Args:
        dim: vector width (settings ``embed.dimensions``), at least 8.
        seed: hash key; different seeds give unrelated vectors (and a different ``model_id``).
        batch_size: texts per internal batch.
    """

    def __init__(self, dim: int = 256, *, seed: int = 0, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if dim < 8:
            raise ValueError(f"hashing embedder needs dim >= 8, got {dim}")
        self._dim = int(dim)
        self.seed = int(seed)
        self.batch_size = batch_size
        self.model_id = f"hashing-{self._dim}" if self.seed == 0 else f"hashing-{self._dim}-s{self.seed}"
        self._bucket = lru_cache(maxsize=65_536)(self._bucket_uncached)

    @property
    def dim(self) -> int:
        return self._dim

    def _bucket_uncached(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(
            feature.encode("utf-8"), digest_size=8, key=self.seed.to_bytes(8, "little")
        ).digest()
        value = int.from_bytes(digest, "little")
        return value % self._dim, (1.0 if (value >> 63) & 1 else -1.0)

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in features(text).items():
                index, sign = self._bucket(feature)
                out[row, index] += sign * weight
        return out


def features(text: str) -> dict[str, float]:
    """Weighted features of `text`: ``w:word`` (weight 2), ``c:<3-gram>`` and CJK ``c:`` grams."""
    counts: Counter[str] = Counter()
    for word in _WORD.findall(text.lower()):
        if any("\u3400" <= ch <= "\u9fff" or "\u3040" <= ch <= "\u30ff" for ch in word):
            counts.update(f"c:{ch}" for ch in word)
            counts.update(f"c:{word[i:i + 2]}" for i in range(len(word) - 1))
            continue
        counts[f"w:{word}"] += 1
        padded = f"<{word}>"
        counts.update(
            f"c:{padded[i:i + CHAR_NGRAM]}" for i in range(max(1, len(padded) - CHAR_NGRAM + 1))
        )
    return {
        f: (WORD_WEIGHT if f.startswith("w:") else 1.0) * (1.0 + math.log(n))
        for f, n in counts.items()
    }
