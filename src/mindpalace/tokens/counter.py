"""Token counters for text and whole chat prompts (I9: exact, or an estimate that errs high).

Exact counts use tiktoken with the `o200k_base` / `cl100k_base` BPE files shipped inside this
package: on first use they are written into ``TIKTOKEN_CACHE_DIR`` under the file name tiktoken
looks for (sha1 of the upstream URL), after checking tiktoken's own sha256, so
``tiktoken.get_encoding()`` never touches the network.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
import tempfile
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mindpalace.errors import ConfigError

# Upstream locations and sha256 of the decompressed BPE files, as pinned by tiktoken itself.
_BPE_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

# OpenAI chat format overheads (tokens). Each errs high relative to the cookbook figures.
TOKENS_PER_MESSAGE = 4  # <|start|>role<|message|> … <|end|>
TOKENS_PER_NAME = 1
TOKENS_REPLY_PRIMING = 3  # every reply is primed with <|start|>assistant<|message|>
TOKENS_PER_TOOL_CALL = 8  # id, type and function wrapper around name + arguments
TOKENS_TOOLS_OVERHEAD = 12  # the namespace wrapper around all tool schemas
TOKENS_PER_IMAGE = 1_105  # a high-detail 1024×1024 image; real cost is lower for smaller ones

COUNT_CACHE_ENTRIES = 16_384  # memoised counts per encoding (messages are re-counted each turn)
COUNT_CACHE_MAX_CHARS = 4_096  # longer texts are counted afresh: keys stay ≤ 64 MB (ASCII) to 256 MB

_cache_lock = threading.Lock()


def _cache_dir() -> Path:
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mindpalace" / "tiktoken"


def ensure_tiktoken_cache(encoding: str) -> Path:
    """Write the shipped BPE file for `encoding` where tiktoken's cache lookup finds it.

    Sets ``TIKTOKEN_CACHE_DIR`` (if unset or empty) to ``~/.cache/mindpalace/tiktoken``. Idempotent.

    Raises:
        ConfigError: `encoding` is not one of the shipped encodings.
    """
    if encoding not in _BPE_FILES:
        raise ConfigError("settings", "tokens.tokenizer", f"unknown encoding {encoding!r}; "
                          f"use one of {sorted(_BPE_FILES)} or 'estimate'")
    url, sha256 = _BPE_FILES[encoding]
    with _cache_lock:
        cache = _cache_dir()
        if not os.environ.get("TIKTOKEN_CACHE_DIR"):  # "" would make tiktoken skip its cache
            os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)  # and download, which fails offline
        target = cache / hashlib.sha1(url.encode()).hexdigest()
        if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == sha256:
            return target
        data = gzip.decompress(
            resources.files("mindpalace.tokens").joinpath(f"data/{encoding}.tiktoken.gz").read_bytes()
        )
        if hashlib.sha256(data).hexdigest() != sha256:  # a corrupted install, not a user error
            raise RuntimeError(f"shipped {encoding} BPE file fails its sha256 check; reinstall")
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".bpe-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)  # atomic: concurrent processes never see a half-written file
        return target


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
    """Exact counts with a tiktoken encoding loaded offline from package data."""

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        import tiktoken

        ensure_tiktoken_cache(encoding)
        self.name = encoding
        self._enc = tiktoken.get_encoding(encoding)
        self._count = lru_cache(maxsize=COUNT_CACHE_ENTRIES)(self._count_uncached)

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
