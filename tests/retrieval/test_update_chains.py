"""ku10q: a chain of updates whose middle one is an aside ends at the newest; a reply with no
content ("Haha, true.") corrects nothing; "Jonah and I …" is the speaker's own fact.

Small hand-written conversations (a user correcting themselves in a long chat with an
assistant), not the knowledge-update generator's output."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import pytest

from mindpalace import Memory
from mindpalace.retrieval.supersession import (
    NAME,
    SELF,
    answer_link,
    choose_corrections,
    gives_new_value,
    gives_typed_value,
    holder,
    value_kinds,
)

from ._conversations import said_day_by_day

_AT = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
_OPTS = {"similarity": 0.5, "answer_similarity": 0.25, "answers": 3, "min_score_ratio": 0.4}


class TestTypedChain:
    # 0 "My job is a teacher." 1 "(a long message) … By the way: from next week I'm an architect."
    # 2 "Got the offer! I'll be working as a pharmacist.": 1 is closer to 0 than 2 is, and 2 is
    # little alike to 1 — the chain stopped at the aside
    sims = np.array([[1, 0.45, 0.35], [0.45, 1, 0.2], [0.35, 0.2, 1]])
    args = ([0.5, 0.5, 0.5], [3.0, 3.0, 3.0])

    def test_the_newest_typed_update_is_the_current_value(self) -> None:
        typed = np.triu(np.ones((3, 3), dtype=bool), k=1)
        assert choose_corrections(self.sims, *self.args, **_OPTS) == {0: 1}  # type: ignore[arg-type]
        assert choose_corrections(self.sims, *self.args, typed=typed, **_OPTS) == {0: 2, 1: 2}  # type: ignore[arg-type]

    def test_not_when_the_newest_gives_no_value_of_the_middle_ones_kind(self) -> None:
        typed = np.zeros((3, 3), dtype=bool)
        typed[0, 1] = typed[0, 2] = True  # 2 gives 0's kind of value, not 1's
        assert choose_corrections(self.sims, *self.args, typed=typed, **_OPTS) == {0: 1}  # type: ignore[arg-type]

    @pytest.mark.parametrize(("older", "newer", "typed"), [
        ("From next week I'm an architect.", "Got the offer! I'll be working as a pharmacist.", True),
        ("I get to the office by the train.", "Switched to the car for getting in.", True),
        ("Since the baby arrived I'm up at 7:30.", "My alarm goes off at 7:00 now.", True),
        ("I've had a Fairphone for two years.", "Our cat is called Tiger.", False),  # names only
        ("I take the bus to work.", "I take the bus to work.", False),
    ])
    def test_typed_values(self, older: str, newer: str, typed: bool) -> None:
        assert gives_typed_value(older, newer) is typed


class TestContentFreeReplies:
    @pytest.mark.parametrize("text", ["Haha, true.", "Morning!", "Wow, lucky you.", "Thanks, that's useful."])
    def test_an_interjection_first_is_no_name(self, text: str) -> None:
        assert NAME not in value_kinds(text, generous=True)

    def test_a_reply_that_goes_on_is_read_as_before(self) -> None:
        assert NAME in value_kinds("Yeah, our trip got off to a bad start.", generous=True)

    def test_a_name_first_is_still_one_generously(self) -> None:
        assert NAME in value_kinds("Mei is my person.", generous=True)
        assert NAME in value_kinds("Bob's, the one on Main Street.", generous=True)  # a possessive

    def test_a_content_free_reply_gives_no_new_value(self) -> None:
        older = "user: Jonah and I have become inseparable, she's my closest friend these days."
        assert not gives_new_value(older, "user: Haha, true.")
        assert not answer_link(older, "user: Haha, true.", False)

    @pytest.mark.parametrize("text", ["Jonah and I have become inseparable.", "user: Mei and me go way back."])
    def test_a_name_and_i_is_the_speakers_fact(self, text: str) -> None:
        assert holder(text) == SELF


FILLER = "Noted. Let me know if anything about that changes and I will keep the newest details in mind."
CHAIN = (
    ("s1", "My job is a teacher at a logistics firm."),
    ("s1", "Long day today."),
    ("s2", "What's a sensible way to split chores with roommates? We keep arguing about the dishes and the "
           "bins, and a rota on the fridge lasted exactly one week. By the way: Handed in my notice, from next "
           "week I'm an architect."),
    ("s2", "Got the offer! I'll be working as a pharmacist."),
    ("s2", "I'm thinking of asking for a raise at work."),
    ("s3", "I tell Mei everything, she is my best friend."),
    ("s3", "Haha, true."),
)


@pytest.fixture(scope="module")
def chain_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with said_day_by_day(tmp_path_factory.mktemp("chains"), CHAIN, FILLER, _AT) as mem:
        yield mem


@pytest.mark.slow
def test_a_chain_through_an_aside_ends_at_the_newest(chain_memory: Memory) -> None:
    hits = chain_memory.session("q", user="u", agent="a").recall("What is my current occupation?", k=8)
    texts = [h.text for h in hits]
    at = {w: next(i for i, t in enumerate(texts) if w in t) for w in ("teacher", "architect", "pharmacist")}
    assert at["pharmacist"] < at["architect"] and at["pharmacist"] < at["teacher"], texts


@pytest.mark.slow
def test_a_content_free_reply_supersedes_nothing(chain_memory: Memory) -> None:
    hits = chain_memory.session("q", user="u", agent="a").recall("Who is my closest friend?", k=8)
    for h in hits:
        if "Haha" in h.text:
            assert "supersedes" not in h.meta, h.meta
