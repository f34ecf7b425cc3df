"""Supersession precision on short statements: another person's fact is no update of the
speaker's own, statements alike only in shape (small talk) are no subject, and small talk the
query barely matches is no answer (a new-user test with the
offline default embedder: "My brother lives in Paris" was taken as the update of "I live in
Lisbon", and small talk chained after it)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import pytest

from mindpalace import Memory
from mindpalace.retrieval.supersession import SELF, holder, same_subject

from ._conversations import said_day_by_day

FILLER = "Noted. The committee discussed budgets, schedules and staffing for the next quarter. "
TEXTS = (
    ("s1", "I live in Lisbon."), ("s1", "I like hiking on weekends."), ("s1", "The printer is broken again."),
    ("s2", "Lunch was great today."), ("s2", "My brother lives in Paris."), ("s2", "I bought new running shoes."),
    ("s3", "Good morning!"), ("s3", "I'm a bit tired today."), ("s3", "Haha, fair enough."),
)


@pytest.fixture(scope="module")
def use_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    """A workspace with the offline default embedder (``use``) holding TEXTS of user "u"."""
    with said_day_by_day(tmp_path_factory.mktemp("whose"), TEXTS, FILLER * 2, datetime(2025, 3, 1, tzinfo=UTC)) as mem:
        yield mem


@pytest.mark.slow
class TestShortStatements:
    def test_another_persons_fact_is_no_update_of_the_speakers(self, use_memory: Memory) -> None:
        hits = use_memory.session("q", user="u", agent="a").recall("Where do I live?", k=6)
        assert hits[0].text == "user: I live in Lisbon."
        assert hits[0].why.current  # type: ignore[attr-defined]
        brother = next(h for h in hits if "brother" in h.text)
        assert "supersedes" not in brother.meta

    def test_small_talk_alike_only_in_shape_is_no_update(self, use_memory: Memory) -> None:
        """"I like hiking on weekends." → "I'm a bit tired today." → "Haha, fair enough." were
        a chain (0.52, 0.61 alike through the "user:" label and their shortness): statements
        alike on their own must share a subject word."""
        for q in ("Where do I live?", "Which city is my home?"):
            hits = use_memory.session("q", user="u", agent="a").recall(q, k=9)
            chained = [h.text for h in hits if any(w in h.text for w in ("hiking", "Haha"))
                       and ("supersedes" in h.meta or "superseded_by" in h.meta)]
            assert not chained, q


class TestHolder:
    @pytest.mark.parametrize(("text", "whose"), [
        ("I live in Lisbon.", SELF),
        ("user: My brother lives in Paris.", "brother"),  # the search text's speaker label
        ("We moved, I live in Porto now.", SELF),
        ("Our cat is called Mochi.", SELF),
        ("My manager is Olumide.", SELF),
        ("My best friend is Hannah.", SELF),  # who the relation is: the speaker's fact
        ("My wife and I moved to Porto.", SELF),
        ("My brother lives in Paris.", "brother"),
        ("Oh, one more thing: my sister moved to Austin last month.", "sister"),
        ("My older sister's flat is in Rome.", "sister"),
        ("A colleague has 4 bikes too.", "colleague"),
        ("Helped my sister pack up, she is settled in Austin.", None),
        ("The kids insisted on renaming the cat Luna.", None),
        # the speaker and someone named: the speaker's own fact (never "my cousin's best friend is …")
        ("Hannah and I have been best friends since school.", SELF),
    ])
    def test_whose_fact_a_sentence_states(self, text: str, whose: str | None) -> None:
        assert holder(text) == whose

    def test_different_known_holders_are_never_one_subject(self) -> None:
        sims = np.full((3, 3), 0.9)
        same = same_subject(sims, [0.5, 0.4, 0.3], similarity=0.5, answer_similarity=0.3, answers=3,
                            holders=[SELF, "brother", None])
        assert not same[0, 1] and same[0, 2] and same[1, 2]

    def test_alike_on_their_own_needs_a_shared_subject_word(self) -> None:
        sims = np.full((2, 2), 0.6)
        shared = np.array([[True, False], [False, True]])
        assert not same_subject(sims, [0.1, 0.1], similarity=0.5, answer_similarity=0.3, answers=0,
                                shared=shared).any()
        assert same_subject(sims, [0.1, 0.1], similarity=0.5, answer_similarity=0.3, answers=0)[0, 1]

    def test_a_runner_up_the_query_barely_matches_is_no_best_answer(self) -> None:
        sims = np.full((3, 3), 0.4)
        q = [0.3, 0.25, 0.09]
        same = same_subject(sims, q, similarity=0.5, answer_similarity=0.3, answers=3, answer_share=0.5)
        assert same[0, 1] and not same[0, 2] and not same[1, 2]
        assert same_subject(sims, q, similarity=0.5, answer_similarity=0.3, answers=3)[1, 2]
