"""Dates named in a query, as time intervals that message timestamps can fall in.

Recognised (English): ISO dates (``2023-05-08``), day dates (``8 May 2023``, ``May 8, 2023``,
``October 13, 2023``), months with a year (``May 2023``), a month alone (``in June``: that
month of any year), years (``in 2023``), and relative periods (``today``, ``yesterday``,
``this/last week``, ``this/last month``, ``this/last year``) resolved against a reference time
(the newest document of the searched scope, i.e. "now" in the conversation). Anything else
yields no interval, so a query without a date is ranked exactly as before.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS.pop("may", None)
_MONTHS["may"] = 5
_MONTH = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)"
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.I)
_MONTH_ALONE = re.compile(
    r"\b(?:in|during|since|of|last|this|early|late|mid)\s+"
    r"(january|february|march|april|may|june|july|august|september|october|november|december)\b",
    re.I,
)
_YEAR = re.compile(r"\b(?:in|during|of|since)\s+((?:19|20)\d{2})\b", re.I)
_RELATIVE = re.compile(r"\b(today|yesterday|(?:this|last|past)\s+(?:week|month|year))\b", re.I)


@dataclass(frozen=True, slots=True)
class Period:
    """[start, end) in UTC; ``month`` set instead for "that month of any year"."""

    start: datetime | None = None
    end: datetime | None = None
    month: int | None = None

    def contains(self, when: datetime, slack: timedelta = timedelta(0)) -> bool:
        """Whether `when` falls in the period or within `slack` after its end."""
        if self.month is not None:
            return when.month == self.month or (when - slack).month == self.month
        assert self.start is not None and self.end is not None
        return self.start <= when < self.end + slack


def _month_period(year: int, month: int) -> Period:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end)


def _day_period(year: int, month: int, day: int) -> Period | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return Period(start, start + timedelta(days=1))


def query_periods(query: str, reference: datetime) -> list[Period]:
    """The periods `query` names (most specific first); [] when it names none.

    Args:
        query: free text.
        reference: aware datetime standing for "now" (relative periods are resolved from it).
    """
    found: list[Period] = []
    spans: list[tuple[int, int]] = []

    def free(m: re.Match[str]) -> bool:
        return all(m.end() <= a or m.start() >= b for a, b in spans)

    for m in _ISO.finditer(query):
        p = _day_period(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        if p:
            found.append(p)
            spans.append(m.span())
    for m in _DAY_MONTH_YEAR.finditer(query):
        p = _day_period(int(m.group(3)), _MONTHS[m.group(2).lower()], int(m.group(1)))
        if p and free(m):
            found.append(p)
            spans.append(m.span())
    for m in _MONTH_DAY_YEAR.finditer(query):
        p = _day_period(int(m.group(3)), _MONTHS[m.group(1).lower()], int(m.group(2)))
        if p and free(m):
            found.append(p)
            spans.append(m.span())
    for m in _MONTH_YEAR.finditer(query):
        if free(m):
            found.append(_month_period(int(m.group(2)), _MONTHS[m.group(1).lower()]))
            spans.append(m.span())
    for m in _MONTH_ALONE.finditer(query):
        if free(m):
            found.append(Period(month=_MONTHS[m.group(1).lower()]))
            spans.append(m.span())
    for m in _YEAR.finditer(query):
        if free(m):
            year = int(m.group(1))
            found.append(Period(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)))
            spans.append(m.span())
    ref = reference.astimezone(UTC)
    day = datetime(ref.year, ref.month, ref.day, tzinfo=UTC)
    for m in _RELATIVE.finditer(query):
        word = " ".join(m.group(1).lower().split())
        if word == "today":
            found.append(Period(day, day + timedelta(days=1)))
        elif word == "yesterday":
            found.append(Period(day - timedelta(days=1), day))
        elif word.endswith("week"):
            monday = day - timedelta(days=day.weekday())
            if word.startswith("this"):
                found.append(Period(monday, monday + timedelta(days=7)))
            else:
                found.append(Period(monday - timedelta(days=7), monday))
        elif word.endswith("month"):
            if word.startswith("this"):
                found.append(_month_period(ref.year, ref.month))
            else:
                year, month = (ref.year, ref.month - 1) if ref.month > 1 else (ref.year - 1, 12)
                found.append(_month_period(year, month))
        else:
            year = ref.year if word.startswith("this") else ref.year - 1
            found.append(Period(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)))
    return found
