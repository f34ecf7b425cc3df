"""Token counters for text and whole chat prompts (I9: exact, or an estimate that errs high).

Exact counts use tiktoken with the ``o200k_base`` / ``cl100k_base`` BPE files shipped inside
this package (``data/<encoding>.tiktoken.gz``). The file is decompressed from package data,
checked against the sha256 that tiktoken itself pins, parsed (one ``base64(token) rank`` per
line) and turned into a ``tiktoken.Encoding`` with the same pattern and special tokens as
tiktoken's own definition. Nothing touches the network, ``os.environ`` or any cache folder on
disk; the built encoding is kept in memory, one per encoding per process.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import json
import math
import re
from functools import cache, lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mindpalace.errors import ConfigError

if TYPE_CHECKING:
    import tiktoken

# sha256 of the decompressed BPE files, as pinned by tiktoken itself (the ``expected_hash`` in
# tiktoken_ext.openai_public); a mismatch means a corrupted install.
_BPE_SHA256: dict[str, str] = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}

# Pre-tokeniser patterns and special tokens copied verbatim from tiktoken 0.14's
# tiktoken_ext.openai_public.o200k_base() and cl100k_base() (tests/test_tokens.py checks that
# they still equal tiktoken's own definitions).
ENDOFTEXT = "<|endoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"

O200K_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
O200K_SPECIAL_TOKENS: dict[str, int] = {ENDOFTEXT: 199999, ENDOFPROMPT: 200018}

CL100K_PAT_STR = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
CL100K_SPECIAL_TOKENS: dict[str, int] = {
    ENDOFTEXT: 100257,
    FIM_PREFIX: 100258,
    FIM_MIDDLE: 100259,
    FIM_SUFFIX: 100260,
    ENDOFPROMPT: 100276,
}

# encoding name -> (pattern, special tokens)
_DEFINITIONS: dict[str, tuple[str, dict[str, int]]] = {
    "o200k_base": (O200K_PAT_STR, O200K_SPECIAL_TOKENS),
    "cl100k_base": (CL100K_PAT_STR, CL100K_SPECIAL_TOKENS),
}


def _check_encoding(encoding: str) -> None:
    if encoding not in _DEFINITIONS:
        raise ConfigError("settings", "tokens.tokenizer", f"unknown encoding {encoding!r}; "
                          f"use one of {sorted(_DEFINITIONS)} or 'estimate'")


def _mergeable_ranks(encoding: str) -> dict[bytes, int]:
    """The BPE ranks of a shipped encoding, read from package data (no network, no disk cache).

    Raises:
        ConfigError: `encoding` is not one of the shipped encodings.
        RuntimeError: the shipped file fails tiktoken's sha256 (a corrupted install).
    """
    _check_encoding(encoding)
    packed = resources.files("mindpalace.tokens").joinpath(f"data/{encoding}.tiktoken.gz")
    data = gzip.decompress(packed.read_bytes())
    if hashlib.sha256(data).hexdigest() != _BPE_SHA256[encoding]:  # not a user error
        raise RuntimeError(f"shipped {encoding} BPE file fails its sha256 check; reinstall")
    # Each line is `base64(token) rank`; splitting the whole file on whitespace and pairing the
    # fields is ~2× faster than tiktoken's line loop and gives the same dict.
    fields = data.split()
    if len(fields) != 2 * data.count(b"\n"):  # cannot happen once the hash matched
        raise RuntimeError(f"shipped {encoding} BPE file is malformed; reinstall")
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


@cache
def _encoding(encoding: str) -> tiktoken.Encoding:
    """The tiktoken encoding, built once per process from package data."""
    import tiktoken  # lazy: importing mindpalace.tokens stays cheap

    pat_str, special_tokens = _DEFINITIONS[encoding]
    return tiktoken.Encoding(
        encoding,
        pat_str=pat_str,
        mergeable_ranks=_mergeable_ranks(encoding),
        special_tokens=dict(special_tokens),
    )


# OpenAI chat format overheads (tokens). Each errs high relative to the cookbook figures.
TOKENS_PER_MESSAGE = 4  # <|start|>role<|message|> … <|end|>
TOKENS_PER_NAME = 1
TOKENS_REPLY_PRIMING = 3  # every reply is primed with <|start|>assistant<|message|>
TOKENS_PER_TOOL_CALL = 8  # id, type and function wrapper around name + arguments
TOKENS_TOOLS_OVERHEAD = 12  # the namespace wrapper around all tool schemas
TOKENS_PER_IMAGE = 1_105  # a high-detail 1024×1024 image; real cost is lower for smaller ones

COUNT_CACHE_ENTRIES = 16_384  # memoised counts per encoding (messages are re-counted each turn)
COUNT_CACHE_MAX_CHARS = 4_096  # longer texts are counted afresh: keys stay ≤ 64 MB (ASCII) to 256 MB


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text and of whole OpenAI-format prompts."""

    name: str
    exact: bool

    def count(self, text: str) -> int: ...

    def count_message(self, message: dict[str, Any]) -> int: ...

    def count_messages(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


class _BaseCounter:
    """Chat-format accounting on top of a text `count`; subclasses give `count` and `truncate`."""

    name: str = ""
    exact: bool = False

    def count(self, text: str) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def truncate(self, text: str, max_tokens: int) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def count_content(self, content: Any) -> int:
        """Tokens of a message `content`: a string, or a list of text / image parts."""
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count(content)
        total = 0
        for part in content if isinstance(content, list) else [content]:
            if isinstance(part, dict) and part.get("type") in ("image_url", "image", "input_image"):
                total += TOKENS_PER_IMAGE
            elif isinstance(part, dict) and "text" in part:
                total += self.count(str(part["text"]))
            else:
                total += self.count(json.dumps(part, ensure_ascii=False, default=str))
        return total

    def count_message(self, message: dict[str, Any]) -> int:
        """Tokens of one chat message: overhead + role + content + name + tool calls."""
        total = TOKENS_PER_MESSAGE + self.count(str(message.get("role", "")))
        total += self.count_content(message.get("content"))
        if message.get("name"):
            total += TOKENS_PER_NAME + self.count(str(message["name"]))
        if message.get("tool_call_id"):
            total += self.count(str(message["tool_call_id"]))
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            args = fn.get("arguments", "")
            if not isinstance(args, str):
                args = json.dumps(args, ensure_ascii=False)
            total += TOKENS_PER_TOOL_CALL + self.count(str(fn.get("name", ""))) + self.count(args)
            total += self.count(str(call.get("id", ""))) if isinstance(call, dict) else 0
        return total

    def count_tools(self, tools: list[dict[str, Any]] | None) -> int:
        """Tokens of the tool schemas sent with a request (0 when there are none)."""
        if not tools:
            return 0
        return TOKENS_TOOLS_OVERHEAD + sum(
            self.count(json.dumps(t, ensure_ascii=False, sort_keys=True)) for t in tools
        )

    def count_messages(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """Tokens of a whole prompt: every message, the tool schemas and reply priming."""
        return (
            sum(self.count_message(m) for m in messages)
            + self.count_tools(tools)
            + TOKENS_REPLY_PRIMING
        )


class TiktokenCounter(_BaseCounter):
    """Exact counts with a tiktoken encoding loaded offline from package data.

    The encoding is built on the first count, encode or truncate, not by the constructor
    (~0.3 s and ~75 MB of resident memory for o200k_base: its ranks are held both as a Python
    dict and inside tiktoken's BPE): a component handed a counter it does not use on a path
    (a recall builds the knowledge base, which counts only when it renders) costs nothing.
    Counters of one encoding share one built encoding.

    Raises:
        ConfigError: `encoding` is not one of the shipped encodings.
    """

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        _check_encoding(encoding)
        self.name = encoding
        self._count = lru_cache(maxsize=COUNT_CACHE_ENTRIES)(self._count_uncached)

    @property
    def _enc(self) -> tiktoken.Encoding:
        """The encoding, built (once per process, shared) on first use."""
        return _encoding(self.name)

    def _count_uncached(self, text: str) -> int:
        return len(self._enc.encode(text, disallowed_special=()))

    def count(self, text: str) -> int:
        """Exact token count of `text` (special-token text is counted as plain text)."""
        if not text:
            return 0
        # Only short texts are memoised: the cache keeps its keys alive, and 16k cached tool
        # outputs of 100 KB each would hold 1.6 GB.
        return self._count(text) if len(text) <= COUNT_CACHE_MAX_CHARS else self._count_uncached(text)

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, disallowed_special=())

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` with at most `max_tokens` tokens."""
        if max_tokens <= 0:
            return ""
        ids = self.encode(text)
        if len(ids) <= max_tokens:
            return text
        out = self._enc.decode(ids[:max_tokens], errors="ignore")
        while out and self.count(out) > max_tokens:  # decode/re-encode can merge differently
            out = out[:-1]
        return out


# Pieces roughly as BPE pre-tokenisers split text; each gets an upper-bound cost.
_PIECE = re.compile(
    r"(?P<han>[\u4e00-\u9fff]+)"
    r"|(?P<kana>[\u3040-\u30ff]+)"
    r"|(?P<hangul>[\uac00-\ud7af]+)"
    r"|(?P<word>[A-Za-z]+)"
    r"|(?P<digits>[0-9]+)"
    r"|(?P<space>\s+)"
    r"|(?P<letters>[^\W\d_]+)"
    r"|(?P<other>.)",
    re.DOTALL,
)
_SAME_CHAR_RUN = re.compile(r"(.)\1*", re.DOTALL)

# Costs (tokens), calibrated so that o200k_base and cl100k_base never count more on real
# English (LoCoMo turns) and Chinese (seed articles) text, down to single words and lines
# (benchmarks/bench_tokens.py measures the margin). Each errs high; see EstimateCounter.
HAN_PER_CHAR = 1.75  # 1 token in o200k, 1–2 in cl100k; unpunctuated cl100k stretches reach 1.7
HAN_PER_RUN = 2.0  # short runs of 2-token characters (崩溃, 突破) need the headroom
KANA_PER_CHAR = 2.0  # a lone kana is at most 2 tokens in either encoding
HANGUL_PER_CHAR = 3.0  # = its UTF-8 bytes: a byte-level BPE can never need more
LETTERS_PER_TOKEN = 2.5  # an ASCII letter run costs ⌈len/2.5⌉ (rare words: amidst, bungee) …
WORD_EXTRA = 0.25  # … + ¼ (a word with no leading space is often one token more) …
MIXED_CASE_EXTRA = 1.0  # … + 1 with any capital (Bye, BTW split worse than lower case)
SPACES_PER_TOKEN = 8  # a run of one whitespace character costs ⌈len/8⌉


def _utf8_len(ch: str) -> int:
    return len(ch.encode("utf-8", "surrogatepass"))


class EstimateCounter(_BaseCounter):
    """Script-aware estimate for unknown tokenizers that errs high (never chars/4).

    Costs per piece (tokens): a run of Han ideographs 1.75 per character + 2; kana 2 per
    character; hangul 3 (its UTF-8 bytes); an ASCII letter run ⌈len/2.5⌉ + ¼, + 1 more when
    it has a capital; a single space before an ASCII letter 0 (BPE glues it to the word); digits
    ⌈len/3⌉ (BPE splits numbers into ≤3-digit groups); other whitespace ⌈len/8⌉ per run of one
    character; other letters (Latin-1, Greek, Cyrillic, Arabic …) 1 per 2-byte character or
    their UTF-8 bytes, + 1 per run; any other character 1 (ASCII), 2 (2–3 UTF-8 bytes) or
    its UTF-8 bytes (emoji and other 4-byte characters).

    On natural text it counts about 2.3× the exact tokens for English and 1.7× (cl100k_base)
    to 2.5× (o200k_base) for Chinese (benchmarks/bench_tokens.py); no window of the seed
    articles' Chinese and no line of LoCoMo is under either encoding. Character soup made only
    of ideographs that take 2–3 tokens each under cl100k_base (酒店酒店酒店, rare characters)
    can exceed 1.75 per character; only a per-byte count bounds that, at 2–4× the cost.
    """

    exact = False
    name = "estimate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        total = 0.0
        for m in _PIECE.finditer(text):
            kind, piece = m.lastgroup, m.group()
            n = len(piece)
            if kind == "han":
                total += HAN_PER_CHAR * n + HAN_PER_RUN
            elif kind == "kana":
                total += KANA_PER_CHAR * n
            elif kind == "hangul":
                total += HANGUL_PER_CHAR * n
            elif kind == "word":
                total += math.ceil(n / LETTERS_PER_TOKEN) + WORD_EXTRA
                if not piece.islower():
                    total += MIXED_CASE_EXTRA
            elif kind == "digits":
                total += math.ceil(n / 3)
            elif kind == "space":
                following = text[m.end() : m.end() + 1]
                if piece == " " and following.isascii() and following.isalpha():
                    continue
                total += sum(
                    math.ceil(len(r.group()) / SPACES_PER_TOKEN) for r in _SAME_CHAR_RUN.finditer(piece)
                )
            elif kind == "letters":
                total += 1 + sum(1 if _utf8_len(ch) <= 2 else _utf8_len(ch) for ch in piece)
            else:
                size = _utf8_len(piece)
                total += 1 if size == 1 else 2 if size <= 3 else size
        return math.ceil(total)

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        if self.count(text) <= max_tokens:
            return text
        lo, hi = 0, len(text)
        while lo < hi:  # binary search on the prefix length
            mid = (lo + hi + 1) // 2
            if self.count(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]


@lru_cache(maxsize=8)
def get_counter(name: str = "o200k_base") -> TokenCounter:
    """The counter for a `tokens.tokenizer` setting: a shipped tiktoken encoding or 'estimate'.

    Raises:
        ConfigError: an unknown encoding name.
    """
    if name == "estimate":
        return EstimateCounter()
    return TiktokenCounter(name)
