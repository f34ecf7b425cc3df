"""Which later statement corrects an earlier one (pure scoring, no store)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace.retrieval.supersession import (
    best_sentence,
    choose_corrections,
    choose_followup,
    find_followups,
    followup_similarity,
    said_sentences,
    sentences,
    subject_terms,
    value_words,
)
from mindpalace.scope import Scope
from mindpalace.store.base import Document

from ._embedders import bag_of_words

_AT = datetime(2025, 1, 1, tzinfo=UTC)

INF = float("-inf")


def _choose(sims: list[list[float]], query_sims: list[float], scores: list[float], **kw: float) -> dict[int, int]:
    opts: dict[str, float] = {"similarity": 0.5, "answer_similarity": 0.3, "answers": 3, "min_score_ratio": 0.4}
    opts.update(kw)
    return choose_corrections(
        np.array(sims), query_sims, scores, similarity=opts["similarity"],
        answer_similarity=opts["answer_similarity"], answers=int(opts["answers"]),
        min_score_ratio=opts["min_score_ratio"],
    )


class TestChooseCorrections:
    def test_among_best_answers_the_closest_later_statement_wins_not_the_newest(self) -> None:
        # 0 = statement, 1 = its correction, 2 = a later statement on another subject that is
        # also among the speaker's best answers to the query
        sims = [[1, 0.45, 0.35], [0.45, 1, 0.25], [0.35, 0.25, 1]]
        assert _choose(sims, [0.6, 0.5, 0.2], [5.0, 4.0, 3.0]) == {0: 1}

    def test_statements_alike_on_their_own_point_at_the_newest(self) -> None:
        sims = [[1, 0.7, 0.6], [0.7, 1, 0.7], [0.6, 0.7, 1]]
        assert _choose(sims, [0.5, 0.5, 0.5], [3.0, 3.0, 3.0]) == {0: 2, 1: 2}

    def test_a_later_statement_alike_to_the_first_only_does_not_take_over(self) -> None:
        # "I go to the gym at lunchtime" (0), "Gym is mornings at 6 now" (1), "I'm training for
        # a 10k" (2): 2 is alike to 0 but not to its closest correction 1
        sims = [[1, 0.64, 0.52], [0.64, 1, 0.4], [0.52, 0.4, 1]]
        assert _choose(sims, [0.46, 0.35, 0.2], [8.0, 6.0, 6.0], answers=0) == {0: 1}

    def test_a_later_statement_that_barely_matches_the_query_corrects_nothing(self) -> None:
        # "Good morning!" is close to everything short the user said, but answers nothing
        sims = [[1, 0.6], [0.6, 1]]
        assert _choose(sims, [0.5, 0.1], [5.0, 0.5]) == {}
        assert _choose(sims, [0.5, 0.1], [5.0, 0.5], min_score_ratio=0.0) == {0: 1}

    def test_an_earlier_statement_never_corrects_a_later_one(self) -> None:
        sims = [[1, 0.9], [0.9, 1]]
        assert _choose(sims, [0.1, 0.9], [0.5, 9.0]) == {0: 1}
        assert all(j > i for i, j in _choose(sims, [0.9, 0.1], [9.0, 9.0]).items())

    def test_a_later_statement_alike_to_both_less_than_they_are_alike_does_not_take_over(self) -> None:
        # "I own 3 bikes" (0), "I just bought another bike, so 4 now" (1), "I'm planning a long
        # bike ride this weekend" (2, newer): 2 is alike to both (the same thing, another detail)
        # but less alike to the update than the update is to the statement — not an update of it
        sims = [[1, 0.62, 0.55], [0.62, 1, 0.56], [0.55, 0.56, 1]]
        assert _choose(sims, [0.5, 0.4, 0.4], [5.0, 5.0, 5.0]) == {0: 1, 1: 2}
        # restating the update as closely as the update restated the statement: it is the newest
        sims = [[1, 0.62, 0.55], [0.62, 1, 0.7], [0.55, 0.7, 1]]
        assert _choose(sims, [0.5, 0.4, 0.4], [5.0, 5.0, 5.0]) == {0: 2, 1: 2}

    def test_best_answers_match_at_the_lower_cosine(self) -> None:
        sims = [[1, 0.4, 0.35], [0.4, 1, 0.35], [0.35, 0.35, 1]]
        assert _choose(sims, [0.5, 0.45, INF], [4.0, 4.0, 4.0], answers=2) == {0: 1}
        assert _choose(sims, [0.5, 0.45, INF], [4.0, 4.0, 4.0], answers=0) == {}

    def test_bad_shapes_and_ratio_are_refused(self) -> None:
        with pytest.raises(ValueError, match="len"):
            _choose([[1, 0.5], [0.5, 1]], [0.1], [1.0, 1.0])
        with pytest.raises(ValueError, match="min_score_ratio"):
            _choose([[1.0]], [0.1], [1.0], min_score_ratio=-1)


class TestFollowups:
    """Later statements the query does not reach (issue 10, failure classes 1 and 2)."""

    def test_the_closest_later_statement_wins_not_a_later_one_on_another_attribute(self) -> None:
        # anchor "My sister lives in Denver"; 0 = "My sister moved to Austin", 1 = "My sister's
        # birthday is next Friday" (newer, shares "sister", but another attribute)
        assert choose_followup([0.62, 0.5], np.array([[1, 0.3], [0.3, 1]]), similarity=0.4) == 0

    def test_an_update_of_the_update_is_the_current_value(self) -> None:
        assert choose_followup([0.6, 0.5], np.array([[1, 0.7], [0.7, 1]]), similarity=0.4) == 1

    def test_a_later_statement_less_alike_to_the_update_than_the_update_to_the_anchor_is_drift(self) -> None:
        # anchor "I own 3 bikes"; 0 = "I just bought another bike, so 4 now" (0.52), 1 = "I'm
        # planning a long bike ride this weekend" (0.47 to the anchor, 0.48 to the update)
        assert choose_followup([0.52, 0.47], np.array([[1, 0.48], [0.48, 1]]), similarity=0.4) == 0

    def test_nothing_close_enough_is_no_followup(self) -> None:
        assert choose_followup([0.2, 0.39], np.eye(2), similarity=0.4) is None
        assert choose_followup([], np.zeros((0, 0)), similarity=0.4) is None

    def test_bad_input_is_refused(self) -> None:
        with pytest.raises(ValueError, match="mutual"):
            choose_followup([0.5], np.eye(2), similarity=0.4)
        with pytest.raises(ValueError, match="similarity"):
            choose_followup([0.5], np.eye(1), similarity=0.0)

    def test_sentences_and_subject_terms(self) -> None:
        assert sentences("Can you help? I need a plan.  Oh, one more thing: my sister moved.") == [
            "Can you help?", "I need a plan.", "Oh, one more thing: my sister moved."]
        assert sentences("Look at this [shares a photo: a bowl]") == ["Look at this", "[shares a photo: a bowl]"]
        assert sentences("no punctuation here") == ["no punctuation here"]
        # a note first is its own sentence too, and the search text's "speaker:" prefix is never
        # a sentence of its own (it was: "user:" and "[note] My dog is called Rex.")
        assert sentences("user: [shares a photo: a dog] My dog is called Rex.") == [
            "user: [shares a photo: a dog]", "My dog is called Rex."]
        assert sentences("Caroline: Hi. I moved.") == ["Caroline: Hi.", "I moved."]

    def test_each_sentence_is_compared_as_its_speaker_said_it_alone(self) -> None:
        # a message's label goes with every sentence; a label of openers only does not
        assert said_sentences("user: I need a speech. Oh, one more thing: I ride the ferry now.") == (
            "user: I need a speech.", "user: I ride the ferry now.")
        assert said_sentences("user: By the way: I ride the ferry now. Cool.") == (
            "user: I ride the ferry now.", "Cool.")
        # a sentence with no aside label is as written
        assert said_sentences("Caroline: Hi. I moved.") == ("Caroline: Hi.", "I moved.")
        # one sentence, or no speaker label: as sentences() gives them
        assert said_sentences("user: Oh, one more thing: I moved.") == ("user: Oh, one more thing: I moved.",)
        assert said_sentences("By the way: I moved. Cool.") == ("By the way: I moved.", "Cool.")
        assert said_sentences("I moved. New race target: a marathon.") == ("I moved.", "New race target: a marathon.")
        # a label with any word besides openers is kept (it says what follows)
        assert said_sentences("user: Hi. New race target: a marathon.") == (
            "user: Hi.", "New race target: a marathon.")

    def test_an_aside_is_compared_with_the_speaker_label(self) -> None:
        # the follow-up compares the update's sentence as said alone ("user: …"), like the
        # one-sentence anchor it updates: compared bare, an embedder hears the label's absence
        corpus = _user_messages(["user: I take the car to work.",
                                 "user: I need to write a speech. Oh, one more thing: since the move I take the ferry to work."])
        embedded: list[str] = []

        def embed(batch: list[str]) -> np.ndarray:
            embedded.extend(batch)
            return _bag_of_words(batch)

        got = find_followups(
            corpus[:1], _bag_of_words(["car to work"])[0], search=lambda _a, _w: corpus[1:],
            same_speaker=lambda a, b: True, later=lambda a, b: a.id < b.id, states=lambda d: True,
            embed=embed, similarity=0.4, speaker_terms=lambda d: ["user"],
        )
        assert {k: v.id for k, v in got.items()} == {1: 2}
        assert "user: since the move I take the ferry to work." in embedded
        assert not any(t.startswith("Oh, one more thing") for t in embedded)

    def test_the_speaker_label_is_no_subject_word(self) -> None:
        # A speaker with few statements uses their own label ("user:", a name) in every one, so
        # it passed the max_uses test and linked unrelated statements as corrections.
        corpus = _user_messages(["user: The weather is lovely today, I went for a walk in the park.",
                                 "user: Actually, my favourite color is now green, blue got boring."])
        searched: list[str] = []

        def search(anchor: Document, terms: str) -> list[Document]:
            searched.append(terms)
            return [d for d in corpus if set(terms.split()) & set(re.findall(r"\w+", d.text.lower()))]

        kw = {"search": search, "same_speaker": lambda a, b: True, "later": lambda a, b: a.id < b.id,
              "states": lambda d: True, "embed": lambda ts: np.ones((len(ts), 4)) / 2.0, "similarity": 0.4,
              "uses": lambda a, ws: [2] * len(ws), "max_uses": 5}
        qvec = np.ones(4) / 2.0
        assert find_followups(corpus[:1], qvec, **kw) == {1: corpus[1]}  # type: ignore[arg-type]
        searched.clear()
        got = find_followups(corpus[:1], qvec, speaker_terms=lambda d: [d.meta["role"]], **kw)  # type: ignore[arg-type]
        assert got == {} and searched  # found by the search, but it shares no subject word
        assert subject_terms("My sister moved to Austin.") & subject_terms("my sisters live in Denver")

    def test_an_update_inside_a_long_message_is_compared_on_its_own_sentence(self) -> None:
        embed = _bag_of_words
        anchor = "My sister lives in Denver."
        long = ("Can you help me plan a dinner for Saturday? I am thinking of six guests, a big lasagna, "
                "a green salad and a lemon tart. Oh, one more thing: my sister lives in Austin now.")
        whole = float(embed([long])[0] @ embed([anchor])[0])
        terms = subject_terms(anchor)
        assert followup_similarity(terms, embed([anchor])[0], long, embed) > whole + 0.2
        assert followup_similarity(terms, embed([anchor])[0], "I burned the rice.", embed) == float("-inf")

    def test_pasted_text_shared_by_two_messages_is_not_what_they_are_compared_on(self) -> None:
        embed = _bag_of_words
        aside = "I need help to plan a dinner for six guests on Saturday."  # a statement: questions are passed over
        anchor = f"{aside} Oh, one more thing: I pay 1500 a month for the flat."
        later = f"{aside} Oh, one more thing: I run 20 km every week."
        query = embed(["help me plan a dinner on Saturday, what do I pay for the flat"])[0]
        own = frozenset(sentences(anchor))
        assert best_sentence(later, query, embed) == aside
        assert best_sentence(later, query, embed, own) != aside
        assert best_sentence(aside, query, embed, own) == aside  # nothing else to compare on
        terms = subject_terms(anchor)
        assert followup_similarity(terms, embed([aside])[0], later, embed) == pytest.approx(1.0)
        # compared on its own sentence only
        own_sentence = float(embed(["Oh, one more thing: I run 20 km every week."])[0] @ embed([aside])[0])
        assert followup_similarity(terms, embed([aside])[0], later, embed, own) == pytest.approx(own_sentence)

    def test_an_update_found_only_through_the_updates_own_words_ends_the_chain(self) -> None:
        # "We adopted a kitten and named her Olive" → "The cat goes by Saffron, Olive never
        # stuck" (shares "Olive") → "The cat goes by Mochi, Saffron never stuck" (shares no word
        # with the first statement): with depth 2 the chain is followed to its end
        texts = ["We adopted a kitten and named her Olive.", "The cat goes by Saffron these days, Olive never stuck.",
                 "The cat goes by Mochi these days, Saffron never stuck.", "I burned the rice last night."]
        docs = [_doc(i, t) for i, t in enumerate(texts)]

        def search(_anchor: Document, words: str) -> list[Document]:
            terms = subject_terms(words)
            return [d for d in docs if subject_terms(d.text) & terms]

        def found(depth: int) -> dict[int, Document]:
            return find_followups(
                [docs[0]], _bag_of_words([texts[0]])[0], search=search, same_speaker=lambda a, b: True,
                later=lambda a, b: a.id < b.id, states=lambda d: True, embed=_bag_of_words,
                similarity=0.1, depth=depth,
            )

        assert found(1)[0].id == 1
        assert found(2)[0].id == 2

    def test_an_earlier_choice_competes_with_what_the_search_finds(self) -> None:
        # the retrieved window linked "My sister lives in Denver" to a later, less alike update
        # ("known"); the subject-word search finds a closer one
        texts = ["My sister lives in Denver.", "My sister is settled in Boulder these days.",
                 "My sister lives in Austin now.", "My sister's birthday is next Friday."]
        docs = [_doc(i, t) for i, t in enumerate(texts)]

        def run(found_by_search: list[Document], known: Document = docs[1]) -> dict[int, Document]:
            return find_followups(
                [docs[0]], _bag_of_words([texts[0]])[0], search=lambda _a, _w: found_by_search,
                same_speaker=lambda a, b: True, later=lambda a, b: a.id < b.id, states=lambda d: True,
                embed=_bag_of_words, similarity=0.1, known={0: known},
            )

        assert run([docs[2]])[0].id == 2
        assert run([])[0].id == 1  # nothing closer found: the earlier choice stands
        # an earlier choice on another detail (no new place) is no current value
        assert run([], known=docs[3]) == {}
        assert run([docs[3]], known=docs[3]) == {}

    @settings(max_examples=40, deadline=None)
    @given(n=st.integers(1, 6), drift=st.lists(st.floats(0.0, 0.39), max_size=4), seed=st.integers(0, 10_000))
    def test_any_chain_of_updates_ends_at_the_newest(self, n: int, drift: list[float], seed: int) -> None:
        # a chain of n updates (each alike to the anchor, and to each other at least as much as
        # to the anchor), with unrelated later statements (below the threshold) shuffled in:
        # the newest update is the current value
        rng = np.random.default_rng(seed)
        kinds = ["u"] * n + ["d"] * len(drift)
        rng.shuffle(kinds)
        to_anchor = [float(rng.uniform(0.45, 0.9)) if k == "u" else drift.pop() for k in kinds]
        m = len(kinds)
        mutual = np.array([[1.0 if i == j else (0.9 if kinds[i] == kinds[j] == "u" else 0.1) for j in range(m)]
                           for i in range(m)])
        newest = max(i for i, k in enumerate(kinds) if k == "u")
        assert choose_followup(to_anchor, mutual, similarity=0.4) == newest


class TestVectorFollowups:
    """The vector follow-up: an update sharing no word with what it updates, found among the
    anchor sentence's nearest statements (the keyword search finds nothing)."""

    # hand-made sentence vectors: axes plants, ferns, running, friends, doctors, filler
    VECTORS: ClassVar[dict[str, list[float]]] = {
        "I have 3 houseplants.": [1, 0.5, 0, 0, 0, 0.2],
        "Bought two more ferns, 5 in total.": [0.5, 1, 0.2, 0, 0, 0.3],
        "After the garden centre trip it's 7 pots on the sill.": [0.4, 1, 0, 0, 0, 0.2],
        "One of my plants has yellow leaves.": [1, 0.6, 0, 0, 0, 0],
        "My weekly mileage is 16 km.": [0.1, 0.1, 1, 0, 0, 0.3],
        "My best friend is Carlos.": [0, 0, 0, 1, 0.35, 0.2],
        "I see Dr. Okafor for checkups.": [0, 0, 0, 0.1, 1, 0.2],
        "Dr. Okafor retired, so Dr. Reyes took over my care.": [0, 0, 0, 0.35, 1, 0.2],
        "Caroline: Thanks, Melanie.": [0, 0, 0, 0, 0, 1],
        "Caroline: Cool, thanks Mel!": [0, 0, 0, 0.1, 0, 1],
        "Caroline: Thanks, Melanie, I see Dr. Okafor too.": [0, 0, 0, 0.1, 0.3, 1],
        "I take my bike to work.": [0, 0, 0.3, 0, 0, 1],
        "My bike helmet strap broke yesterday.": [0, 0, 0.4, 0, 0, 1],
        "Since the move I ride the train into town every morning.": [0, 0, 0.1, 0, 0, 1],
        "I need to write a speech for a farewell.": [0, 0, 0, 0.3, 0, 0.1],
        "Oh, one more thing: I ride the train to work now.": [0, 0, 0.1, 0, 0, 1],
        "I need to write a speech for a farewell. Oh, one more thing: I ride the train to work now.":
            [0, 0, 0, 1, 0, 0.1],
    }

    @classmethod
    def embed(cls, texts: list[str]) -> np.ndarray:
        rows = np.array([cls.VECTORS[t] for t in texts], dtype=np.float64).reshape(len(texts), 6)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def followups(self, texts: list[str], anchor: int, *, vector: float | None = 0.25,
                  neighbours: bool = True, near: list[int] | None = None,
                  retrieved: tuple[int, ...] = ()) -> dict[int, int]:
        docs = [_doc(i, t) for i, t in enumerate(texts)]
        pool = docs if near is None else [docs[i] for i in near]
        got = find_followups(
            [docs[anchor]], self.embed([texts[anchor]])[0], search=lambda _a, _w: [],
            speaker_terms=lambda d: ["caroline", "melanie"] if d.text.startswith("Caroline") else ["user"],
            same_speaker=lambda a, b: True, later=lambda a, b: a.id < b.id, states=lambda d: True,
            embed=self.embed, similarity=0.4,
            neighbours=(lambda _d, _v: list(pool)) if neighbours else None, vector_similarity=vector,
            retrieved=[docs[i] for i in retrieved],
        )
        return {k: v.id for k, v in got.items()}

    def test_a_new_value_of_the_same_kind_is_found_without_a_shared_word(self) -> None:
        texts = ["I have 3 houseplants.", "One of my plants has yellow leaves.", "My weekly mileage is 16 km.",
                 "Bought two more ferns, 5 in total."]
        # the yellow leaves are closer, but give no count; the mileage is a count of another subject
        assert self.followups(texts, 0) == {0: 3}
        assert self.followups(texts, 0, vector=None) == {}  # off
        assert self.followups(texts, 0, neighbours=False) == {}  # off
        assert self.followups(texts, 0, vector=0.99) == {}  # not alike enough

    def test_a_new_means_of_travel_is_a_new_value(self) -> None:
        # no shared word, no capital, no digit: the means of travel is the value that changes;
        # the helmet is closer but names the same bike again
        texts = ["I take my bike to work.", "My bike helmet strap broke yesterday.",
                 "Since the move I ride the train into town every morning."]
        assert self.followups(texts, 0) == {0: 2}

    def test_a_retrieved_long_message_is_a_candidate_though_no_neighbour(self) -> None:
        # the long message's one vector is far from the anchor sentence (not among its
        # neighbours), its last sentence is the update; the query reached it all the same
        texts = ["I take my bike to work.",
                 "I need to write a speech for a farewell. Oh, one more thing: I ride the train to work now."]
        assert self.followups(texts, 0, near=[0]) == {}
        assert self.followups(texts, 0, near=[0], retrieved=(1,)) == {0: 1}
        assert self.followups(texts, 0, near=[0], retrieved=(0,)) == {}  # the anchor itself
        # an earlier retrieved statement is no update of a later one
        assert self.followups(texts[::-1], 1, near=[1], retrieved=(0,)) == {}

    def test_a_chain_of_updates_ends_at_the_newest(self) -> None:
        texts = ["I have 3 houseplants.", "Bought two more ferns, 5 in total.",
                 "After the garden centre trip it's 7 pots on the sill."]
        assert self.followups(texts, 0) == {0: 2}

    def test_a_statement_nearer_to_an_earlier_one_of_its_own_subject_updates_that_one(self) -> None:
        # the new doctor is alike enough to the best friend (a name for a name), but it is the
        # mutual nearest of the old doctor, not of the friend
        texts = ["I see Dr. Okafor for checkups.", "My best friend is Carlos.",
                 "Dr. Okafor retired, so Dr. Reyes took over my care."]
        assert float(self.embed([texts[1]])[0] @ self.embed([texts[2]])[0]) >= 0.25
        assert self.followups(texts, 1) == {}
        assert self.followups(texts, 0) == {0: 2}

    def test_a_speaker_addressed_by_name_or_the_same_value_again_is_no_update(self) -> None:
        # "Melanie" / "Mel" name the speakers (not values); "Okafor" is the value said before
        assert self.followups(["Caroline: Thanks, Melanie.", "Caroline: Cool, thanks Mel!"], 0) == {}
        texts = ["I see Dr. Okafor for checkups.", "Caroline: Thanks, Melanie, I see Dr. Okafor too."]
        assert self.followups(texts, 0) == {}
        assert value_words("user: I have 3 houseplants.") == {"3"}
        assert value_words("Honestly Jonah is the one I call first about anything.") == {"jonah"}
        assert value_words("Yoga with Marta is on Tuesday evenings.") == {"marta", "tuesday"}


def _bag_of_words(texts: list[str]) -> np.ndarray:
    return bag_of_words(texts, 256)


def _user_messages(texts: list[str]) -> list[Document]:
    """The user's messages `texts`, ids 1, 2, …, one day apart from _AT."""
    scope = Scope(tenant="t", user="u", agent="a", session="s")
    return [Document(i + 1, scope, "message", str(i + 1), t, {"role": "user"}, _AT + timedelta(days=i))
            for i, t in enumerate(texts)]


def _doc(i: int, text: str) -> Document:
    from datetime import UTC, datetime

    return Document(id=i, scope=Scope(tenant="t", user="u", agent="a", session="s"), kind="message",
                    ref=str(i), text=text, meta={"role": "user"}, created_at=datetime(2025, 1, 1 + i, tzinfo=UTC))
