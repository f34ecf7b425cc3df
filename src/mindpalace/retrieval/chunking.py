"""Chunks of long documents for embedding: bounded size in tokens, with overlap.

A long message (a tool output, a long assistant reply) is embedded as several windows of at
most ``chunk_tokens`` tokens (o200k_base, the project's token unit), consecutive windows
sharing ``overlap_tokens`` tokens so a sentence cut by a boundary is whole in one of them.
Every chunk vector is stored under its document (``store.put_embeddings(..., rows=)``), so a
vector hit on any chunk returns the document once, scored by its best chunk. Embedding cost
of attention models grows faster than linearly with length, and models truncate long inputs
(e5: 512 tokens): chunks make long texts both cheaper to embed and searchable to the end.
"""

from __future__ import annotations

from functools import cache

from mindpalace.errors import ValidationError
from mindpalace.tokens.counter import TiktokenCounter

DEFAULT_CHUNK_TOKENS = 256
DEFAULT_OVERLAP_TOKENS = 32
_CHARS_PER_TOKEN_MIN = 1  # a text with at most chunk_tokens characters is never split


@cache
def _counter() -> TiktokenCounter:
    return TiktokenCounter("o200k_base")


def chunk_text(
    text: str, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, overlap_tokens: int = DEFAULT_OVERLAP_TOKENS
) -> list[str]:
    """`text` as windows of ≤ `chunk_tokens` tokens overlapping by `overlap_tokens`.

    Args:
        text: any string ('' gives ['']).
        chunk_tokens: window size (tokens, ≥ 8).
        overlap_tokens: tokens shared by consecutive windows (0 ≤ overlap < chunk_tokens / 2).
    Returns:
        ``[text]`` when it fits in one window, else the windows in order (a window boundary
        inside a multi-byte character drops that character's partial bytes).
    Raises:
        ValidationError: sizes out of range.
    """
    if chunk_tokens < 8 or not 0 <= overlap_tokens < chunk_tokens / 2:
        raise ValidationError(
            f"chunk size {chunk_tokens} tokens with overlap {overlap_tokens}: need size >= 8 "
            "and 0 <= overlap < size/2"
        )
    if len(text) <= chunk_tokens * _CHARS_PER_TOKEN_MIN:
        return [text]
    counter = _counter()
    ids = counter.encode(text)
    if len(ids) <= chunk_tokens:
        return [text]
    step = chunk_tokens - overlap_tokens
    out = []
    for start in range(0, len(ids), step):
        piece = ids[start : start + chunk_tokens]
        out.append(counter._enc.decode(piece, errors="ignore"))
        if start + chunk_tokens >= len(ids):
            break
    return out


def tail_tokens(text: str, max_tokens: int) -> str:
    """The end of `text` holding at most `max_tokens` tokens (o200k_base), `text` itself when
    it fits (a cut inside a multi-byte character drops that character's partial bytes).

    Raises:
        ValidationError: `max_tokens` below 1.
    """
    if max_tokens < 1:
        raise ValidationError(f"max_tokens must be >= 1, got {max_tokens}")
    if len(text) <= max_tokens * _CHARS_PER_TOKEN_MIN:
        return text
    counter = _counter()
    ids = counter.encode(text)
    if len(ids) <= max_tokens:
        return text
    return counter._enc.decode(ids[-max_tokens:], errors="ignore")
