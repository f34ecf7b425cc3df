"""The archived-context block: every range shown or named, under its cap; merges keep pinned rules."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from mindpalace.session.archived import (
    ARCHIVED_SUMMARY_HEADER,
    HIDDEN_HEADER,
    ArchivedRange,
    chunk_text,
    date_span,
    fold,
    merged,
    pinned_rules,
    render_block,
    rule_sentences,
)
from mindpalace.tokens import get_counter

COUNTER = get_counter("o200k_base")
WORDS = ["TK001", "Tokyo", "hotel", "budget", "2000", "CNY", "Senso-ji", "May", "seat", "confirmed"]


@st.composite
def archive(draw: st.DrawFn) -> list[ArchivedRange]:
    n = draw(st.integers(1, 20))
    out, first, cursor = [], 1, 1
    for _ in range(n):
        size, gap = draw(st.integers(1, 30)), draw(st.integers(1, 5))
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=80))
        kind = draw(st.sampled_from(["summary", "raw", "merged"]))
        rules = tuple(draw(st.lists(st.sampled_from(["Never book before 9 am.", "Always pay by card."]),
                                    max_size=2, unique=True)))
        out.append(ArchivedRange(first, first + size - 1, cursor, cursor + gap - 1,
                                 " ".join(words) + " " + " ".join(rules), kind, gap, rules))
        first, cursor = first + size, cursor + gap
    return out


@given(ranges=archive(), cap=st.integers(120, 1_000))
def test_every_range_is_shown_or_named_and_the_block_is_under_its_cap(
    ranges: list[ArchivedRange], cap: int
) -> None:
    block = render_block(ranges, COUNTER, cap)
    assert block is not None and COUNTER.count(block) <= cap
    named: set[int] = set()
    for a, b in re.findall(r"messages (\d+)-(\d+) · history:", block):
        named.update(range(int(a), int(b) + 1))
    assert named == set(range(1, ranges[-1].last + 1))
    if "not shown" in block and COUNTER.count(block) < cap - 40:  # room left: rules were kept
        assert "Never book" in block or not any(r.rules for r in ranges)


def test_a_raw_breadcrumb_is_hidden_before_a_good_summary() -> None:
    good = ArchivedRange(1, 10, 1, 1, "Project Falcon ships 2027-03-14. " * 4)
    raw = ArchivedRange(11, 20, 2, 2, "[raw archive] " + "noise " * 60, "raw")
    new = ArchivedRange(21, 30, 3, 3, "Hotel Gracery, 18000 JPY.")
    block = str(render_block([good, raw, new], COUNTER, 110))
    assert "Project Falcon" in block and "Hotel Gracery" in block and "noise" not in block
    assert "messages 11-20 · history:2" in block


def test_a_merge_appends_the_rules_it_dropped() -> None:
    a = ArchivedRange(1, 5, 1, 1, "Never book before 9 am. Tokyo.", rules=("Never book before 9 am.",))
    b = ArchivedRange(6, 9, 4, 4, "Hotel chosen.")
    m = merged([a, b], "Tokyo trip, hotel chosen.")
    assert m.text.endswith("- Never book before 9 am.") and m.rules == a.rules
    assert (m.first, m.last, m.first_cursor, m.last_cursor, m.entries, m.kind) == (1, 9, 1, 4, 2, "merged")
    assert m.label == "messages 1-9 · history:1 … history:4, 2 entries"


def test_only_user_rules_the_summary_kept_are_pinned() -> None:
    user = ["Please always answer in French. I like trains.", "You must never book red-eye flights!"]
    assert rule_sentences(user[0]) == ["Please always answer in French."]
    assert pinned_rules(user, "User: please ALWAYS answer in  French. Trip to Lyon.") == (
        "Please always answer in French.",)


def test_a_rule_kept_in_other_words_is_pinned_and_not_appended_twice() -> None:
    user = ["Always answer in French and never book flights before 9 am."]
    reworded = "User rule: answers must be in French, and no flights may be booked before 9 am."
    assert pinned_rules(user, reworded) == tuple(user)
    assert pinned_rules(user, "Flights TK001 compared; the user speaks French.") == ()  # half its words
    assert pinned_rules(["Never use emojis."], "No emojis.") == ()  # one content word: verbatim only
    scattered = "Answers went out in French. Flights were booked. We met before 9 am."
    assert pinned_rules(user, scattered) == ()  # its words, spread over sentences, are not the rule
    a = ArchivedRange(1, 5, 1, 1, reworded, rules=tuple(user))
    assert merged([a], "Trip planning: " + reworded).text == "Trip planning: " + reworded


def test_folding_bounds_the_number_of_ranges() -> None:
    ranges = [ArchivedRange(i, i, i, i, f"r{i} " * 20, "raw") for i in range(1, 30)]
    out = fold(ranges, 16, COUNTER, 40)
    assert len(out) == 16 and out[0].first == 1 and out[0].last == 14 and out[0].entries == 14
    assert all(COUNTER.count(r.text) <= 40 for r in out[:1])


@given(st.text(max_size=3_000), st.integers(1, 200))
def test_chunks_rebuild_the_text_and_stay_under_the_limit(text: str, limit: int) -> None:
    chunks = chunk_text(text, COUNTER, limit)
    assert "".join(chunks) == text
    assert all(COUNTER.count(c) <= limit or len(c) == 1 for c in chunks)


@given(ranges=archive(), cap=st.integers(120, 1_000))
def test_the_compact_form_names_the_same_ranges_under_the_cap_in_no_more_tokens(
    ranges: list[ArchivedRange], cap: int
) -> None:
    """The small prompt's form (hidden ranges on the header line, no entry counts) keeps every
    range shown or named with its history refs, stays under the cap, and shows every range
    the full form shows (its hidden-range line is shorter, so it hides no more)."""
    block = render_block(ranges, COUNTER, cap, compact=True)
    full = render_block(ranges, COUNTER, cap)
    assert block is not None and full is not None and COUNTER.count(block) <= cap
    named: set[int] = set()
    for a, b in re.findall(r"messages (\d+)-(\d+) · history:", block):
        named.update(range(int(a), int(b) + 1))
    assert named == set(range(1, ranges[-1].last + 1))
    shown = re.compile(r"^\[messages (\d+)-", re.MULTILINE)
    assert set(shown.findall(full)) <= set(shown.findall(block))
    if HIDDEN_HEADER not in full and COUNTER.count(full) < cap:
        assert block == full  # nothing hidden: the forms are the same


def test_the_compact_form_names_hidden_ranges_on_its_first_line_without_the_header() -> None:
    good = ArchivedRange(1, 10, 1, 1, "Project Falcon ships 2027-03-14. " * 4)
    raw = ArchivedRange(11, 20, 2, 4, "[raw archive] " + "noise " * 60, "raw", entries=3)
    new = ArchivedRange(21, 30, 5, 5, "Hotel Gracery, 18000 JPY.")
    block = str(render_block([good, raw, new], COUNTER, 110, compact=True))
    first = block.splitlines()[0]
    assert first == "Not shown (read_files): messages 11-20 · history:2 … history:4."
    assert ARCHIVED_SUMMARY_HEADER not in block  # the envelope's source says what the block is
    assert "Project Falcon" in block and "Hotel Gracery" in block and "noise" not in block


def test_a_range_is_dated_by_the_messages_it_archived() -> None:
    """A range's label says when its messages were written (UTC days), shown or hidden, so a
    "when did …" question can be placed without reading the range back; a merge spans the
    dates of what it covers; a range stored without dates (older state) has none."""
    may8, may25 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC), datetime(2023, 5, 25, 9, 0, tzinfo=UTC)
    jun3, jan2 = datetime(2023, 6, 3, 23, 59, tzinfo=UTC), datetime(2024, 1, 2, 0, 1, tzinfo=UTC)
    assert date_span(may8, may8.replace(hour=20)) == "8 May 2023"
    assert date_span(may8, may25) == "8–25 May 2023"
    assert date_span(may8, jun3) == "8 May – 3 June 2023"
    assert date_span(may8, jan2) == "8 May 2023 – 2 January 2024"
    a = ArchivedRange(1, 40, 1, 1, "Trip to Tokyo, budget 2000 CNY.", first_at=may8, last_at=may25)
    b = ArchivedRange(41, 60, 2, 2, "Hotel Gracery booked.", first_at=jun3, last_at=jun3)
    assert a.label == "messages 1-40 · history:1 · 8–25 May 2023"
    assert a.line().startswith("[messages 1-40 · history:1 · 8–25 May 2023]\n")
    assert ArchivedRange.from_json(a.to_json()) == a
    assert merged([a, b], "Tokyo trip, hotel booked.").label == (
        "messages 1-60 · history:1 … history:2, 2 entries · 8 May – 3 June 2023")
    block = render_block([a, b], COUNTER, 35, compact=True)
    assert block is not None and "history:1 … history:2 · 8 May – 3 June 2023." in block  # hidden, named
    legacy = ArchivedRange.from_json({k: v for k, v in a.to_json().items() if not k.endswith("_at")})
    assert legacy is not None and legacy.label == "messages 1-40 · history:1"


def test_questions_and_stories_about_the_past_are_no_rules() -> None:
    text = ("Never had a chance to visit it. I always wanted a dog! Do you always run at 6? "
            "We only stayed two nights. Never book flights on Fridays. I didn't even notice. "
            "Always answer in French. Never exceed 300 EUR. Only red wine.")
    assert rule_sentences(text) == ["Never book flights on Fridays.", "Always answer in French.",
                                  "Never exceed 300 EUR.", "Only red wine."]


def test_a_cheer_is_no_rule() -> None:
    # the archived block listed chit-chat ("Don't quit!") under the rules the user stated
    text = ("Don't quit! Never give up on your dreams, Mel! You must try it! "
            "Never stop the backup job! Don't quit the app before saving. Always answer in French.")
    assert rule_sentences(text) == ["Never stop the backup job!", "Don't quit the app before saving.",
                                  "Always answer in French."]
