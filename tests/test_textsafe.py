"""Text hygiene: refuse or escape what cannot be stored; names cannot escape their folder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mindpalace.errors import InvalidNameError, InvalidTextError
from mindpalace.textsafe import clean_json, clean_text, require_name, require_text


class TestRequireText:
    def test_lone_surrogate_is_refused_with_offset(self) -> None:
        with pytest.raises(InvalidTextError, match=r"lone surrogate.*offset 3"):
            require_text("body", "abc\ud800def")

    def test_nul_is_refused(self) -> None:
        with pytest.raises(InvalidTextError, match="NUL"):
            require_text("body", "a\x00b")

    def test_non_string_is_refused(self) -> None:
        with pytest.raises(InvalidTextError, match="expected text"):
            require_text("body", b"bytes")

    def test_empty_refused_only_when_asked(self) -> None:
        assert require_text("x", "") == ""
        with pytest.raises(InvalidTextError, match="empty"):
            require_text("x", "  ", allow_empty=False)


class TestCleanText:
    @given(st.text())
    def test_cleaned_text_is_always_storable(self, text: str) -> None:
        cleaned = clean_text(text)
        require_text("t", cleaned)
        cleaned.encode("utf-8")

    def test_escape_is_visible(self) -> None:
        assert clean_text("a\x00b\udc80") == "a\\x00b\\udc80"

    def test_clean_json_cleans_keys_and_nested_values(self) -> None:
        assert clean_json({"k\x00": ["\ud800", 1]}) == {"k\\x00": ["\\ud800", 1]}

    @pytest.mark.parametrize("value", [{1: "a", "1": "b"}, {"x": {True: 1, "True": 2}},
                                       [{"\ud800": 1, "\\ud800": 2}]])
    def test_two_keys_that_become_one_are_refused_not_merged(self, value: object) -> None:
        # new-user finding: s.checkpoint(artifacts={1: "a", "1": "b"}) stored {"1": "b"} — the
        # keys are written as text, so one value was silently lost
        with pytest.raises(InvalidTextError, match="same key"):
            clean_json(value)
        assert clean_json({1: "a", 2: "b"}) == {"1": "a", "2": "b"}  # distinct keys as text, as JSON writes them


class TestRequireName:
    @pytest.mark.parametrize("name", ["step_12", "memory_snapshot_recent_step_8", "user:profile"])
    def test_good_names_pass(self, name: str) -> None:
        assert require_name(name) == name

    @pytest.mark.parametrize(
        ("name", "why"),
        [("../etc/passwd", "separator"), ("a/b", "separator"), ("a\\b", "separator"),
         ("..", "'..'"), (".hidden", "letters"), ("", "non-empty"), ("x" * 129, "longer"),
         ("with space", "letters")],
    )
    def test_path_tricks_are_refused(self, name: str, why: str) -> None:
        with pytest.raises(InvalidNameError, match=why):
            require_name(name)
