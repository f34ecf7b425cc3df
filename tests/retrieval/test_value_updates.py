"""A later statement corrects an earlier one only when it gives the attribute a new value of the
same kind: a later remark on another detail of the same thing ("My car needs new tyres" after
"I have 2 cars", "The dog needs a bath" after "Our dog is called Biscuit") is no update, however
alike an embedder finds the two sentences (kupd varied set: such remarks were taken as the
current value and ranked above the statement, and the real update was never looked for)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.retrieval.supersession import (
    CALENDAR,
    DISTANCE,
    DURATION,
    MONEY,
    NAME,
    NUMBER,
    ROLE,
    TIME_OF_DAY,
    TRAVEL,
    amount_units,
    answer_link,
    best_sentence,
    choose_corrections,
    find_followups,
    gives_new_value,
    gives_value_of_kind,
    gives_value_on_subject,
    noun_values,
    says_it_changed,
    sentences,
    value_kinds,
    value_words,
)
from mindpalace.scope import Scope
from mindpalace.store.base import Document

from ._conversations import said_day_by_day
from ._embedders import bag_of_words

_AT = datetime(2025, 1, 1, tzinfo=UTC)


class TestValueKinds:
    @pytest.mark.parametrize(("text", "kinds"), [
        ("I have 2 cars.", {NUMBER, TRAVEL}),  # the same cars said again are no new value (new_travel)
        ("user: My rent is $1450 a month.", {NUMBER}),
        ("Our dog is called Biscuit.", {NAME}),
        ("Biscuit sleeps all day.", set()),  # first word: capitalised by position, read strictly
        ("My pottery class is on Wednesday evenings.", {CALENDAR}),
        ("I take the tram to work.", {TRAVEL}),  # a means of travel is a value, capital or not
        ("Oh, one more thing: The dog needs a bath.", set()),  # a stop word after a colon
        ("I'm learning Dutch.", {NAME}),
        ("I've been an architect for six years.", {ROLE}),  # what the speaker is: a value
        ("I work as a software engineer.", {ROLE}),
        ("I'm a big fan of pottery.", set()),  # a phrase that goes on ("of …") names no role
        ("I'm a bit tired today.", set()),
        ("My cousin is a pharmacist.", set()),  # someone else's role: not the speaker's value
    ])
    def test_kinds_read_strictly(self, text: str, kinds: set[str]) -> None:
        assert value_kinds(text) == frozenset(kinds)

    def test_generous_reading_counts_number_words_and_a_first_name(self) -> None:
        assert NUMBER in value_kinds("got another one last week.", generous=True)
        assert value_kinds("Pepper is her name now.", generous=True) == frozenset({NAME})
        assert value_kinds("The dog needs a bath.", generous=True) == frozenset()

    @pytest.mark.parametrize(("older", "newer", "gives"), [
        ("I have 2 cars.", "Bought a van, so 3 vehicles now.", True),
        ("I have 2 cars.", "My car needs new tyres before winter.", False),
        ("Our dog is called Biscuit.", "We renamed the dog Pepper.", True),
        ("Our dog is called Biscuit.", "The dog needs a bath this weekend.", False),
        ("My brother lives in Oslo.", "My brother's wedding is next Saturday.", False),  # a day is no place
        ("My brother lives in Oslo.", "He packed up and is in Bergen for good.", True),
        ("I take the tram to work.", "I cycle in every morning since the move.", True),  # tram -> bike
        ("I take my bike to work.", "Switched to the bus, much less stressful.", True),
        ("I take my bike to work.", "My bike helmet strap broke yesterday.", False),  # the same bike again
        ("I take the bus to work.", "My foot hurts after the run, my flight is late.", False),  # no means
        ("Couldn't resist the sale, that's bike number 3 for me.", "My bike helmet strap broke yesterday.", False),
        ("I'll think about it.", "I'll think about it.", False),  # the same sentence again
        ("I've been an architect for six years.", "Handed in my notice, from next week I'm a nurse.", True),
        ("I work as a software engineer.", "I started a new position as a data analyst on Monday.", True),
        ("My job is a data analyst at a firm.", "I'm a business analyst now.", True),  # another analyst
        ("I've been an architect for six years.", "My job has been really stressful this month.", False),
        ("I've been an architect for six years.", "I'm an architect, and the hours are long.", False),  # the same
    ])
    def test_a_new_value_of_the_same_kind(self, older: str, newer: str, gives: bool) -> None:
        assert gives_new_value(older, newer) is gives


def test_a_role_is_read_after_a_first_person_copula_or_as() -> None:
    assert noun_values("Got the offer! I'll be working as a teacher.") == {"teacher"}
    assert noun_values("My job is a data analyst at a logistics firm.") == {"data", "analyst"}
    assert noun_values("I take the bus; I'm a nurse.") == {"bus", "nurse"}  # travel and role
    assert noun_values("She works as a nurse at the clinic.") == {"nurse"}  # the holder is checked elsewhere
    assert noun_values("I'm a member of the club.") == frozenset()


class TestChangeAndAnswerLinks:
    @pytest.mark.parametrize(("sentence", "changed"), [
        ("user: New race target: a marathon.", True),
        ("I changed my running goal to a marathon.", True),
        ("I cycle in now, no longer by tram.", True),
        ("My car needs new tyres before winter.", False),  # "new" as any adjective
        ("The dog needs a bath this weekend.", False),
    ])
    def test_a_sentence_that_says_it_changed(self, sentence: str, changed: bool) -> None:
        assert says_it_changed(sentence) is changed

    def test_best_answers_are_one_subject_only_on_evidence(self) -> None:
        assert answer_link("I use a Pixel 7.", "Upgraded to a Fairphone 4 over the weekend.", False)
        assert answer_link("I take the tram to work.", "Switched to cycling, much less stressful.", False)
        assert answer_link("I take the tram to work.", "The tram is always late.", True)
        assert not answer_link("Lunch was nice today.", "The dog needs a bath this weekend.", False)
        # a new value of the old kind is wanted for a correction, not for a shared subject
        assert gives_new_value("I use a Pixel 7.", "Upgraded to a Fairphone 4 over the weekend.")


class TestCorrectionsNeedAValue:
    def test_a_later_remark_without_a_value_corrects_nothing(self) -> None:
        # 0 "I have 2 cars." 1 "My car needs new tyres." 2 "Bought a van, so 3 now."; the remark is
        # the closest to 0 and would be its correction, without the value check
        sims = np.array([[1, 0.7, 0.55], [0.7, 1, 0.5], [0.55, 0.5, 1]])
        opts = {"similarity": 0.5, "answer_similarity": 0.3, "answers": 3, "min_score_ratio": 0.4}
        assert choose_corrections(sims, [0.5, 0.5, 0.5], [3.0, 3.0, 3.0], **opts) == {0: 1, 1: 2}  # type: ignore[arg-type]
        texts = ["I have 2 cars.", "My car needs new tyres.", "Bought a van, so 3 now."]
        values = np.array([[gives_new_value(a, b) for b in texts] for a in texts])
        assert choose_corrections(sims, [0.5, 0.5, 0.5], [3.0, 3.0, 3.0], values=values, **opts)[0] == 2  # type: ignore[arg-type]

    def test_one_sentence_left_after_the_pasted_ones_is_compared_alone(self) -> None:
        aside = "Can you help me plan a dinner for six guests on Saturday? I want a big lasagna and a salad."
        text = f"{aside} Oh, one more thing: my rent is $1450 a month."
        query = bag_of_words(["dinner for six guests on Saturday"])[0]
        repeated = frozenset(["Can you help me plan a dinner for six guests on Saturday?",
                              "I want a big lasagna and a salad."])
        assert best_sentence(text, query, bag_of_words, repeated) == "Oh, one more thing: my rent is $1450 a month."

    def test_a_title_does_not_end_a_sentence(self) -> None:
        assert sentences("I see Dr. Okafor for checkups. Mrs. Lee too!") == [
            "I see Dr. Okafor for checkups.", "Mrs. Lee too!"]
        assert value_kinds("I see Dr. Okafor for checkups.") == frozenset({NAME})


def _doc(i: int, text: str) -> Document:
    return Document(id=i, scope=Scope(tenant="t", user="u", agent="a", session="s"), kind="message", ref=str(i), text=text,
                    meta={"role": "user"}, created_at=_AT + timedelta(minutes=i))


@settings(max_examples=60, deadline=None)
@given(
    old=st.integers(1, 9), new=st.integers(10, 30),
    remark=st.lists(st.sampled_from(["needs", "new", "tyres", "washing", "parked", "outside", "dirty", "again",
                                     "weekend", "garage", "noisy", "brakes"]), min_size=1, max_size=6),
    order=st.permutations([1, 2]),
)
def test_a_remark_without_a_number_never_takes_over_a_count(old: int, new: int, remark: list[str],
                                                              order: list[int]) -> None:
    """Whatever the remark on the cars says (no number in it; worded closer to the count than the
    update is) and wherever it falls after the count, the follow-up of "I have N cars." is the
    later count, never the remark."""
    texts = {1: f"Bought a van, {new} cars in the drive now.", 2: "I have cars " + " ".join(remark) + "."}
    docs = [_doc(0, f"I have {old} cars.")] + [_doc(i + 1, texts[k]) for i, k in enumerate(order)]
    got = find_followups(
        [docs[0]], bag_of_words([docs[0].text])[0], search=lambda _a, _w: docs[1:],
        same_speaker=lambda a, b: True, later=lambda a, b: a.id < b.id, states=lambda d: True,
        embed=bag_of_words, similarity=0.05,
    )
    assert got[0].text == texts[1]


# -- the product path, with the offline default embedder ----------------------------------------

STATEMENTS = (
    ("s1", "I have 2 cars."), ("s1", "Our dog is called Biscuit."), ("s1", "Lunch was nice today."),
    ("s2", "My car needs new tyres before winter."), ("s2", "The dog needs a bath this weekend."),
    ("s3", "My brother has 4 cars."), ("s3", "Bought a small van last month, so 3 vehicles in the drive now."),
)
FILLER = "Noted. Let me know if anything else about that changes and I will keep it in mind. "


@pytest.fixture(scope="module")
def use_memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with said_day_by_day(tmp_path_factory.mktemp("values"), STATEMENTS, FILLER, _AT) as mem:
        yield mem


@pytest.mark.slow
@pytest.mark.parametrize(("query", "stated", "remark"), [
    ("How many cars do I have?", "I have 2 cars.", "tyres"),
    ("What is our dog's name?", "Our dog is called Biscuit.", "bath"),
])
def test_a_remark_on_the_same_thing_is_not_its_current_value(
    use_memory: Memory, query: str, stated: str, remark: str
) -> None:
    hits = use_memory.session("q", user="u", agent="a").recall(query, k=8)
    said = next(h for h in hits if h.text.endswith(stated))
    later = [h for h in hits if remark in h.text]
    assert all("supersedes" not in h.meta for h in later)
    assert not str(said.meta.get("superseded_by", "")).startswith("s2/")


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(2, 7),
    seed=st.integers(0, 10_000),
    holders=st.lists(st.sampled_from([None, "self", "brother", "colleague"]), min_size=7, max_size=7),
)
def test_a_correction_always_gives_a_value_and_never_states_another_persons_fact(
    n: int, seed: int, holders: list[str | None]
) -> None:
    """Whatever the cosines and scores: every chosen correction is later than what it corrects,
    may give its new value (`values`), has the evidence the answers path asks for
    (`answer_evidence`) where the pair is alike only at the lower cosine, and never states
    another person's fact than the statement it corrects."""
    rng = np.random.default_rng(seed)
    raw = rng.uniform(0.0, 1.0, (n, n))
    sims = (raw + raw.T) / 2
    np.fill_diagonal(sims, 1.0)
    values = rng.uniform(0, 1, (n, n)) < 0.6
    evidence = rng.uniform(0, 1, (n, n)) < 0.6
    evidence = evidence & evidence.T
    strong = rng.uniform(0, 1, (n, n)) < 0.3  # values on a shared word: chains and preferences only
    got = choose_corrections(
        sims, list(rng.uniform(0, 1, n)), list(rng.uniform(1, 5, n)), similarity=0.6, answer_similarity=0.3,
        answers=6, min_score_ratio=0.4, holders=holders[:n], values=values, answer_evidence=evidence,
        strong=strong,
    )
    for i, j in got.items():
        assert j > i and values[i, j]
        assert sims[i, j] >= 0.6 or evidence[i, j]
        assert not (holders[i] and holders[j] and holders[i] != holders[j])


# -- ku10j: which sentence is compared, which values agree, which update is the current one ------


class TestValuesReadCloser:
    def test_a_number_word_names_nothing(self) -> None:
        # "one" counted as a number that names a thing ("4B") made a yoga mat a new class day
        assert value_kinds("I bought a new yoga mat, a purple one.", generous=True) == frozenset({NUMBER})
        assert not gives_new_value("Yoga with Marta is on Tuesday.", "I bought a new yoga mat, a purple one.")

    @pytest.mark.parametrize(("text", "kinds"), [
        ("Amara and I have become inseparable, she's my closest friend these days.", {NAME}),
        ("Marta's class is on Thursday.", {NAME, CALENDAR}),
        ("Bought two more ferns, 5 in total.", {NUMBER}),  # a verb first is no name
        ("Honestly Jonah is the one I call first.", {NAME}),
    ])
    def test_a_name_opening_a_sentence(self, text: str, kinds: set[str]) -> None:
        assert value_kinds(text) == frozenset(kinds)

    def test_a_remark_gives_no_new_value_of_a_name_said_first(self) -> None:
        older = "Amara and I have become inseparable, she's my closest friend these days."
        assert not gives_new_value(older, "We're throwing a surprise party for a friend.")
        assert gives_new_value(older, "Honestly Jonah is the one I call first about anything.")

    @pytest.mark.parametrize(("text", "units"), [
        ("I pay $1515 monthly for the flat.", {MONEY}),
        ("My weekly mileage is 16 km.", {DISTANCE}),
        ("My alarm goes off at 6:30.", {TIME_OF_DAY}),
        ("I've been a nurse for 6 years.", {DURATION}),
        ("I have 3 bikes.", None),  # a count of anything
        ("I use a Galaxy S21.", None),  # a name with a digit is no amount
        ("Bought two more ferns, 5 in total.", None),
        ("I train mornings at 6 now instead of weekends only.", {TIME_OF_DAY}),  # a bare number after "at"
        ("I'm training for a 5k under 25 minutes.", {DISTANCE, DURATION}),
    ])
    def test_amount_units(self, text: str, units: set[str] | None) -> None:
        assert amount_units(text) == (frozenset(units) if units is not None else None)

    @pytest.mark.parametrize(("older", "newer", "gives"), [
        ("I pay $1515 monthly for the flat.", "My weekly mileage is 16 km.", False),
        ("I pay $1515 monthly for the flat.", "The landlord raised it to $1665 from next month.", True),
        ("I get up at 7:30 on weekdays.", "The new schedule means my alarm goes off at 6:30.", True),
        ("I run 20 km a week.", "I pay $900 a month.", False),
        ("I have 3 houseplants.", "Got two cuttings from a friend, so 5 altogether.", True),  # a doubt never vetoes
    ])
    def test_amounts_in_different_units_are_no_new_value(self, older: str, newer: str, gives: bool) -> None:
        assert gives_new_value(older, newer) is gives
        assert answer_link(older, newer, False) is gives

    def test_a_value_on_a_shared_subject_word(self) -> None:
        older = "My sister has an apartment in Denver."
        assert gives_value_on_subject(older, "Oh, one more thing: my sister took a job in Boston.", True)
        assert not gives_value_on_subject(older, "Since the move I ride the train into town.", False)
        # a clock time is no new race distance, however many words the two share
        assert not gives_value_on_subject("I'm training for a 5k under 25 minutes.",
                                          "I train mornings at 6 now instead of weekends only.", True)
        # a capitalised first word is no value read strictly
        assert not gives_value_on_subject("I take Spanish lessons on Thursdays.",
                                          "Lessons are getting harder this month.", True)

    @pytest.mark.parametrize(("older", "newer", "gives"), [
        ("I have 3 houseplants.", "Bought two more ferns, 5 in total.", True),
        ("My best friend is Carlos.", "Honestly Jonah is the one I call first about anything.", True),
        ("I have 4 houseplants.", "One of my plants has yellow leaves.", False),  # "One" is no value read strictly
        ("I take the train to work.", "My office moved to the fifth floor.", False),  # no value in the newer
        ("I take the bus to work.", "Sold my season pass, I'm using the train for the trip downtown.", True),
        ("My commute is by the train.", "I cycle in since the move.", True),  # a verb naming the means
        ("I take the bus to work.", "Work is driving me crazy.", False),  # "driving" names no means
        ("I have 3 bikes.", "I'm planning a long bike ride this weekend.", False),  # the same means again
        ("I pay $1515 monthly for the flat.", "My weekly mileage is 16 km.", False),  # other units
        ("I have 3 houseplants.", "I have 3 houseplants.", False),  # the same sentence gives nothing new
    ])
    def test_a_value_of_the_older_kind_without_a_shared_word(self, older: str, newer: str, gives: bool) -> None:
        assert gives_value_of_kind(older, newer) is gives
        # the subject-word reading is the same with a shared word, never true without one
        assert gives_value_on_subject(older, newer, True) is gives
        assert not gives_value_on_subject(older, newer, False)


class TestComparedSentence:
    def test_a_question_is_not_the_sentence_compared(self) -> None:
        text = "What's a sensible way to split chores with roommates? There are 2 bikes in our garage."
        query = bag_of_words(["what is a sensible way to split chores"])[0]
        assert best_sentence(text, query, bag_of_words) == "There are 2 bikes in our garage."


_OPTS = {"similarity": 0.5, "answer_similarity": 0.25, "answers": 3, "min_score_ratio": 0.4}


class TestWhichUpdateIsCurrent:
    def test_an_earlier_update_is_superseded_by_the_current_value_too(self) -> None:
        # 0 "I own 3 bikes." 1 "(a long message) … that's bike number 4 for me." 2 "Another bike, so 5
        # now.": 1 and 2 both update 0, but 1 is little alike to 2 — it was left above 2
        sims = np.array([[1, 0.3, 0.62], [0.3, 1, 0.1], [0.62, 0.1, 1]])
        strong = np.array([[False, True, True], [False, False, False], [False, False, False]])
        args = ([0.5, 0.5, 0.5], [3.0, 3.0, 3.0])
        assert choose_corrections(sims, *args, strong=strong, **_OPTS) == {0: 2, 1: 2}  # type: ignore[arg-type]
        # without a value on a shared word, two statements alike to a third are no evidence
        assert choose_corrections(sims, *args, **_OPTS) == {0: 2}  # type: ignore[arg-type]
        assert choose_corrections(sims, *args, strong=np.zeros((3, 3), dtype=bool), **_OPTS) == {0: 2}  # type: ignore[arg-type]

    def test_no_link_between_two_peoples_facts(self) -> None:
        sims = np.array([[1, 0.3, 0.62], [0.3, 1, 0.1], [0.62, 0.1, 1]])
        strong = np.array([[False, True, True], [False, False, False], [False, False, False]])
        got = choose_corrections(sims, [0.5, 0.5, 0.5], [3.0, 3.0, 3.0], holders=[None, "brother", "self"],
                                 strong=strong, **_OPTS)  # type: ignore[arg-type]
        assert got == {0: 2}

    def test_a_value_on_a_shared_word_is_taken_before_a_closer_answer(self) -> None:
        # 0 "My sister has an apartment in Denver." 1 "Since the move I ride the train." 2 "My sister
        # took a job in Boston.": 1 is a hair closer to 0, 2 gives 0's value on "sister"
        sims = np.array([[1, 0.41, 0.40], [0.41, 1, 0.2], [0.40, 0.2, 1]])
        strong = np.array([[False, False, True], [False, False, False], [False, False, False]])
        args = ([0.5, 0.5, 0.5], [3.0, 3.0, 3.0])
        assert choose_corrections(sims, *args, **_OPTS)[0] == 1  # type: ignore[arg-type]
        assert choose_corrections(sims, *args, strong=strong, **_OPTS)[0] == 2  # type: ignore[arg-type]

    def test_a_second_update_that_gives_the_value_ends_the_chain(self) -> None:
        # 0 "My best friend is Hannah." 1 "Hannah and I drifted apart; Mei is my person." 2 "Amara and I
        # have become inseparable, she's my closest friend": 2 is less alike to 1 than 1 is to 0
        sims = np.array([[1, 0.65, 0.50], [0.65, 1, 0.51], [0.50, 0.51, 1]])
        shared = np.array([[False, True, True], [True, False, False], [True, False, False]])
        strong = np.array([[False, True, True], [False, False, False], [False, False, False]])
        values = np.ones((3, 3), dtype=bool)
        args = ([0.5, 0.1, 0.3], [3.0, 3.0, 3.0])
        opts = {**_OPTS, "answers": 2, "shared": shared, "values": values}
        assert choose_corrections(sims, *args, **opts) == {0: 1}  # type: ignore[arg-type]
        assert choose_corrections(sims, *args, strong=strong, **opts) == {0: 2, 1: 2}  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["It's so much fun!", "Let's go hiking.", "Everything's great.", "That's it."])
def test_a_contracted_pronoun_names_nothing(text: str) -> None:
    # "It's" was read as a possessive name ("Marta's"), so chit-chat gave a NAME value
    assert NAME not in value_kinds(text) and NAME not in value_kinds(text, generous=True)
    assert not value_words(text)


def test_a_possessive_name_first_is_still_a_name() -> None:
    assert NAME in value_kinds("Marta's class is on Thursday")
