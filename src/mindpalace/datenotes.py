"""Relative dates in a message, resolved against when the message was written.

A message written on 8 May 2023 that says "yesterday" means 7 May 2023; recalled months later,
"yesterday" no longer says when. The recalled-memory block quotes messages verbatim and adds,
after the quote, a note resolving each relative expression against the message's own
timestamp (:func:`date_note`), e.g. ``[dates: yesterday = 7 May 2023; last Friday = the Friday
before 8 May 2023]``. The quote itself is never rewritten.

Recognised (English, case-insensitive):

- days: ``today``, ``tonight``, ``this morning/afternoon/evening``, ``yesterday``, ``last
  night``, ``the day before yesterday``, ``tomorrow``, ``<n> days ago`` → that date;
- weeks and weekends: ``last/past/this past week`` → ``the week before <date>``, ``this week``
  → ``the week of <date>``, ``next week`` → ``the week after <date>``; ``last/past/this past
  weekend`` → ``the weekend before <date>``, ``next weekend`` → ``the weekend after <date>``;
  ``<n> weeks/weekends ago`` → ``<n> weeks/weekends before <date>``;
- weekdays: ``last <weekday>`` / ``this past <weekday>`` → ``the <Weekday> before <date>``
  (not a single date: "last Friday" said on a Saturday may mean either of two Fridays, so the
  note anchors it without guessing), ``next <weekday>`` → ``the <Weekday> after <date>``;
- months and years: ``last/this/next month`` → ``June 2023``; ``<n> months ago``; ``last/this/
  next year`` → ``2022``; ``<n> years ago`` → the year.

``<n>`` is a numeral or a number word up to twenty (``a``/``an`` = 1, ``a couple of`` = 2).
Anything else is left unresolved (no note), so a message without such words costs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, timedelta

_WORDS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"])}
_WORDS.update({"a": 1, "an": 1, "a couple of": 2, "couple of": 2})
_NUMBER = r"(\d{1,3}|a couple of|couple of|an?|" + "|".join(w for w in _WORDS if " " not in w and len(w) > 2) + ")"
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_ABBR = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}
_WEEKDAY = r"(" + "|".join(_DAYS) + r"|" + "|".join(_DAY_ABBR) + r")\b\.?"
_PAST = r"(?:last|past|this past)"

Resolver = Callable[[re.Match[str], date], str | None]


def day(d: date) -> str:
    """``7 May 2023``."""
    return f"{d.day} {d:%B %Y}"


def _month(d: date, shift: int) -> str:
    index = d.year * 12 + d.month - 1 + shift
    return f"{date(index // 12, index % 12 + 1, 1):%B %Y}"


def _count(word: str) -> int | None:
    word = " ".join(word.lower().split())
    if word.isdigit():
        return int(word)
    return _WORDS.get(word)


def _weekday(word: str) -> str:
    word = word.lower().rstrip(".")
    index = _DAYS.index(word) if word in _DAYS else _DAY_ABBR[word]
    return _DAYS[index].capitalize()


def _ago(m: re.Match[str], d: date) -> str | None:
    n, unit = _count(m.group(1)), m.group(2).lower().rstrip("s")
    if n is None or n > 400:
        return None
    if unit == "day":
        return day(d - timedelta(days=n))
    if unit == "month":
        return _month(d, -n)
    if unit == "year":
        return str(d.year - n)
    return f"{m.group(1)} {m.group(2)} before {day(d)}"  # weeks / weekends: a span, anchored


_RULES: tuple[tuple[re.Pattern[str], Resolver], ...] = tuple((re.compile(p, re.I), f) for p, f in (
    (r"\bthe day before yesterday\b", lambda m, d: day(d - timedelta(days=2))),
    (r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b", lambda m, d: day(d)),
    (r"\b(?:yesterday|last night)\b", lambda m, d: day(d - timedelta(days=1))),
    (r"\btomorrow\b", lambda m, d: day(d + timedelta(days=1))),
    (rf"\b{_NUMBER} (days?|weeks?|weekends?|months?|years?) ago\b", _ago),
    (rf"\b{_PAST} weekend\b", lambda m, d: f"the weekend before {day(d)}"),
    (r"\bnext weekend\b", lambda m, d: f"the weekend after {day(d)}"),
    (rf"\b{_PAST} week\b", lambda m, d: f"the week before {day(d)}"),
    (r"\bthis week\b", lambda m, d: f"the week of {day(d)}"),
    (r"\bnext week\b", lambda m, d: f"the week after {day(d)}"),
    (rf"\b{_PAST} {_WEEKDAY}", lambda m, d: f"the {_weekday(m.group(1))} before {day(d)}"),
    (rf"\bnext {_WEEKDAY}", lambda m, d: f"the {_weekday(m.group(1))} after {day(d)}"),
    (rf"\b{_PAST} month\b", lambda m, d: _month(d, -1)),
    (r"\bthis month\b", lambda m, d: _month(d, 0)),
    (r"\bnext month\b", lambda m, d: _month(d, 1)),
    (rf"\b{_PAST} year\b", lambda m, d: str(d.year - 1)),
    (r"\bthis year\b", lambda m, d: str(d.year)),
    (r"\bnext year\b", lambda m, d: str(d.year + 1)),
))


def relative_dates(text: str, when: datetime) -> list[tuple[str, str]]:
    """``(expression as written, what it means)`` for each relative date expression in `text`
    said at `when` (its calendar date is used), in text order, each expression once; an
    expression inside a longer one that was resolved (``last week`` in ``this past week``) is
    not repeated. Pure; never raises on any text."""
    d = when.date()
    found: list[tuple[int, int, str, str]] = []
    for pattern, resolve in _RULES:
        for m in pattern.finditer(text):
            if any(a <= m.start() < b or a < m.end() <= b for a, b, _, _ in found):
                continue
            meaning = resolve(m, d)
            if meaning:
                found.append((m.start(), m.end(), " ".join(m.group(0).split()).rstrip("."), meaning))
    out: list[tuple[str, str]] = []
    for _, _, phrase, meaning in sorted(found):
        if (phrase, meaning) not in out:
            out.append((phrase, meaning))
    return out


def date_note(text: str, when: datetime | None, *, compact: bool = False) -> str:
    """``[dates: yesterday = 7 May 2023; …]`` for the relative dates of `text` said at `when`;
    '' when there are none or `when` is unknown. `compact` (a small prompt) drops the label:
    ``[yesterday = 7 May 2023; …]`` — each pair's ``phrase = date`` still says what it is."""
    if when is None:
        return ""
    pairs = relative_dates(text, when)
    if not pairs:
        return ""
    return ("[" if compact else "[dates: ") + "; ".join(f"{p} = {m}" for p, m in pairs) + "]"
