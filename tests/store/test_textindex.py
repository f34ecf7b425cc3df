"""Query terms: the remembered split is the split, and every caller gets its own list."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace.store import textindex
from mindpalace.store.textindex import query_terms

PIECES = ["the", "Hotel", "hotel", "预算", "酒店预算", "a", "x_y", "naïve", "did", "2023", "?", " ", ",", "é"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12), st.booleans(), st.integers(0, 2))
def test_remembered_split_equals_the_split(pieces: list[str], drop: bool, pad: int) -> None:
    text = " ".join(pieces) + "z" * (pad * textindex._MEMO_MAX_CHARS // 2)  # some past the limit
    want = list(textindex._split_terms(text, drop))
    first = query_terms(text, drop_stop_words=drop)
    assert first == want
    first.append("mutated")  # a caller's change never reaches the next caller
    assert query_terms(text, drop_stop_words=drop) == want
    assert len(set(want)) == len(want)
    assert all(t == t.lower() for t in want)
    if drop:
        assert not set(want) & textindex.STOP_WORDS


def test_known_splits() -> None:
    assert query_terms('Where is the "hotel" budget?') == ["hotel", "budget"]
    assert query_terms("What did the hotel cost", drop_stop_words=False) == [
        "what", "did", "the", "hotel", "cost"]
    assert query_terms("酒店预算") == ["酒店", "店预", "预算"]
