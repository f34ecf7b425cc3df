"""I/O-free text indexing helpers shared by every backend: CJK segmentation and FTS queries."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

# Han, Hiragana, Katakana, Hangul, CJK punctuation-free ranges: runs of these carry no spaces,
# so a word tokenizer sees one giant token. Indexing them as overlapping bigrams (the Lucene
# CJKAnalyzer approach) makes a 2-character query like 预算 match.
_CJK: Final = (
    "\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_]+", re.UNICODE)

STOP_WORDS: Final = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so", "that", "the", "their", "them", "then", "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "why", "will", "with", "would", "you", "your", "yours"]
)


def has_cjk(text: str) -> bool:
    """True when `text` contains a CJK / kana / hangul character."""
    return _CJK_RUN.search(text) is not None


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping bigrams of a CJK run; a 1-character run is kept whole."""
    if len(run) < 2:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def segment_for_index(text: str) -> str:
    """The text the word index sees: CJK runs replaced by space-separated bigrams."""
    if not has_cjk(text):
        return text
    return _CJK_RUN.sub(lambda m: " " + " ".join(cjk_bigrams(m.group())) + " ", text)


# A recall splits its query ~7 times (keyword search, vector query without speakers, speaker
# and date boosts, the explanations, facts, recalled notes); the last few texts are remembered.
_MEMO_TEXTS: Final = 256
_MEMO_MAX_CHARS: Final = 4096


def query_terms(text: str, *, drop_stop_words: bool = True) -> list[str]:
    """Lower-cased search terms of `text`: words (stop words dropped) and CJK bigrams,
    distinct, in first-occurrence order. A new list on every call; the split of the last
    256 texts (up to 4096 characters each) is remembered, as it depends on nothing else."""
    if len(text) > _MEMO_MAX_CHARS:
        return list(_split_terms(text, drop_stop_words))
    return list(_remembered_terms(text, drop_stop_words))


@lru_cache(maxsize=_MEMO_TEXTS)
def _remembered_terms(text: str, drop_stop_words: bool) -> tuple[str, ...]:
    return _split_terms(text, drop_stop_words)


def _split_terms(text: str, drop_stop_words: bool) -> tuple[str, ...]:
    terms: list[str] = []
    for tok in _TOKEN.findall(text.lower()):
        if _CJK_RUN.fullmatch(tok):
            terms.extend(cjk_bigrams(tok))
        elif not (drop_stop_words and tok in STOP_WORDS):
            terms.append(tok)
    return tuple(dict.fromkeys(terms))  # de-duplicated, first occurrence order


def quote_fts(term: str) -> str:
    """Quote one term for an FTS5 MATCH expression (so user text is never FTS syntax)."""
    return '"' + term.replace('"', '""') + '"'


def build_match_query(text: str) -> str:
    """An FTS5 MATCH expression OR-ing the quoted terms of `text` ('' when it has none).

    >>> build_match_query('Where is the "hotel" budget?')
    '"hotel" OR "budget"'
    """
    terms = query_terms(text)
    if not terms:  # a query made only of stop words still deserves an answer
        terms = query_terms(text, drop_stop_words=False)
    return " OR ".join(quote_fts(t) for t in terms)


def build_trigram_query(text: str) -> str:
    """A MATCH expression for the trigram index: whitespace-separated chunks of ≥ 3 characters."""
    chunks = [c for c in re.split(r"\s+", text.strip()) if len(c) >= 3]
    return " OR ".join(quote_fts(c) for c in chunks)
