"""Relative dates resolved against the time a message was written (mindpalace.datenotes)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from mindpalace.datenotes import date_note, relative_dates

SAID = datetime(2023, 10, 22, 9, 55, tzinfo=UTC)  # a Sunday


def test_days_resolve_to_dates() -> None:
    assert relative_dates("I went there yesterday and again today.", SAID) == [
        ("yesterday", "21 October 2023"), ("today", "22 October 2023")]
    assert relative_dates("Last night was great; see you tomorrow", SAID) == [
        ("Last night", "21 October 2023"), ("tomorrow", "23 October 2023")]
    assert relative_dates("a conference two days ago", SAID) == [("two days ago", "20 October 2023")]
    assert relative_dates("the day before yesterday", SAID) == [("the day before yesterday", "20 October 2023")]


def test_spans_are_anchored_not_guessed() -> None:
    assert relative_dates("I passed the interviews last Friday!", SAID) == [
        ("last Friday", "the Friday before 22 October 2023")]
    assert relative_dates("joined a group last Tues. and", SAID) == [
        ("last Tues", "the Tuesday before 22 October 2023")]
    assert relative_dates("the roadtrip this past weekend", SAID) == [
        ("this past weekend", "the weekend before 22 October 2023")]
    assert relative_dates("busy this week, busier last week", SAID) == [
        ("this week", "the week of 22 October 2023"), ("last week", "the week before 22 October 2023")]
    assert relative_dates("camping two weekends ago", SAID) == [
        ("two weekends ago", "two weekends before 22 October 2023")]


def test_months_and_years() -> None:
    assert relative_dates("Last month I moved; next month a show", SAID) == [
        ("Last month", "September 2023"), ("next month", "November 2023")]
    assert relative_dates("painted last year, made ten years ago", SAID) == [
        ("last year", "2022"), ("ten years ago", "2013")]
    assert relative_dates("3 months ago", datetime(2023, 1, 5, tzinfo=UTC)) == [("3 months ago", "October 2022")]


def test_note() -> None:
    assert date_note("nothing relative here", SAID) == ""
    assert date_note("yesterday", None) == ""
    assert date_note("yesterday, last year", SAID) == "[dates: yesterday = 21 October 2023; last year = 2022]"
    # a small prompt drops the label (each pair still reads "phrase = date")
    assert date_note("yesterday, last year", SAID, compact=True) == "[yesterday = 21 October 2023; last year = 2022]"
    assert date_note("nothing relative here", SAID, compact=True) == ""


@given(st.text(max_size=300), st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)))
def test_any_text_is_safe(text: str, when: datetime) -> None:
    # never raises; every phrase it names is in the text
    for phrase, meaning in relative_dates(text, when):
        assert phrase.lower() in " ".join(text.split()).lower()
        assert meaning
