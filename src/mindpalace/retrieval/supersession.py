"""Supersession: which later statement of a speaker corrects an earlier one, for one query.

Pure functions over one speaker's candidate statements (oldest first): their pairwise cosine
similarities, their cosine to the query and how well each matches the query (the score the
result list ranks by). :class:`~mindpalace.retrieval.hybrid.HybridRetriever` gathers those
from a result list and applies the answer (the correction ranks directly above what it
corrects, which is marked ``superseded_by``).

A later statement B corrects an earlier A when

* A and B are the same subject (:func:`same_subject`): alike on their own (cosine at least
  ``similarity``), or both among the speaker's best answers to the query and alike at the
  lower ``answer_similarity``;
* B matches the query nearly as well as A (``min_score_ratio`` × A's score);
* of several such B: the one closest to A — or a later update of that one (alike on its
  own to A, and to the closest at least as much as the closest is to A: a chain A → B → C
  points at C). "The newest wins" picked a later statement on another subject ("We just
  settled in Osaka" taking over "We meet in room 4B every week": short statements of one
  user that the query half matches; "I'm training for a 10k" taking over "I go to the gym at
  lunchtime" and its correction), and so did "alike to both at the threshold": a later
  statement on another detail of the same thing ("I'm planning a long bike ride this
  weekend" after "I own 3 bikes" and "I just bought another bike, so 4 now") is alike to
  every statement about it, but less than an update is to what it updates.

Statements are compared on their sentence closest to the query (the caller's choice), not on
the whole message: an aside, a pasted text or an attachment note ("[shares a photo: a photo
of …]") in two messages made unrelated statements look alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from mindpalace.retrieval.fetch import stem_words
from mindpalace.store.textindex import STOP_WORDS, query_terms

if TYPE_CHECKING:
    from mindpalace.store.base import Document


def same_subject(
    sims: np.ndarray,
    query_sims: Sequence[float],
    *,
    similarity: float,
    answer_similarity: float,
    answers: int,
    answer_share: float = 0.0,
    holders: Sequence[str | None] | None = None,
    shared: np.ndarray | None = None,
    answer_evidence: np.ndarray | None = None,
) -> np.ndarray:
    """Which pairs of one speaker's statements are about the same subject (bool matrix).

    Two statements are the same subject when their vectors' cosine is at least `similarity`,
    or — relative to the query — when both are among the speaker's `answers` statements
    closest to the query and their cosine is at least `answer_similarity` ("Home for me is
    Osaka" and "We moved, I live in Perth now" are only 0.45 alike, but they are this user's
    two best answers to "Which city do I live in?").

    Args:
        sims: (n, n) cosine similarities of the statements' vectors.
        query_sims: length n, each statement's cosine to the query (-inf when unknown).
        similarity / answer_similarity: the two cosine thresholds (answer_similarity ≤ 1).
        answers: how many of the best answers to the query are compared with the lower one.
        answer_share: a best answer's cosine to the query is at least this share of the best
            one's (0 = any): when the query matches one statement and nothing else of the
            speaker, the runners-up ("Good morning!", "I'm a bit tired today." for "Where do
            I live?") are no answers, and two of them are no subject.
        holders: length n, whose fact each statement states (:func:`holder`); two known and
            different holders are never the same subject. None = not checked.
        shared: (n, n) bool, whether two statements share a subject word
            (:func:`subject_terms`); alike on their own (`similarity`) counts only for those
            that do: "I'm a bit tired today." and "Haha, fair enough." are 0.61 alike with
            ``use`` through their common "user:" label and shortness alone. None = not checked.
        answer_evidence: (n, n) bool, symmetric: two best answers alike at the lower
            `answer_similarity` are one subject only where this holds (:func:`answer_link`:
            a shared subject word, values of one kind, or a stated change); "Lunch was nice
            today." and "The dog needs a bath this weekend." are both among six best answers
            to "What is our dog's name?" and 0.3 alike, and nothing else. None = not checked.
    Returns:
        (n, n) bool matrix, symmetric, diagonal False.
    """
    n = sims.shape[0]
    same = sims >= similarity
    if shared is not None:
        same &= shared
    q = np.asarray(query_sims, dtype=np.float64)
    order = np.argsort(-q, kind="stable")[:answers]
    top = float(q[order[0]]) if len(order) else float("-inf")
    floor = answer_share * top if top > 0 else float("-inf")
    best = np.zeros(n, dtype=bool)
    best[[i for i in order if np.isfinite(q[i]) and q[i] >= floor]] = True
    answered = np.outer(best, best) & (sims >= answer_similarity)
    if answer_evidence is not None:
        answered &= answer_evidence
    same |= answered
    if holders is not None:
        for i in range(n):
            for j in range(i + 1, n):
                if other_holders(holders[i], holders[j]):
                    same[i, j] = same[j, i] = False
    np.fill_diagonal(same, False)
    return same


def choose_corrections(
    sims: np.ndarray,
    query_sims: Sequence[float],
    scores: Sequence[float],
    *,
    similarity: float,
    answer_similarity: float,
    answers: int,
    min_score_ratio: float,
    answer_share: float = 0.0,
    holders: Sequence[str | None] | None = None,
    shared: np.ndarray | None = None,
    values: np.ndarray | None = None,
    answer_evidence: np.ndarray | None = None,
    strong: np.ndarray | None = None,
    typed: np.ndarray | None = None,
) -> dict[int, int]:
    """For each of one speaker's statements, the later statement that corrects it, if any.

    Args:
        sims: (n, n) cosine similarities of the statements' vectors, statements ordered oldest
            first.
        query_sims: length n, each statement's cosine to the query (-inf when unknown).
        scores: length n, how well each statement matches the query (≥ 0, higher is better).
        similarity / answer_similarity / answers / answer_share / holders / shared /
            answer_evidence: as in :func:`same_subject`.
        min_score_ratio: a correction's score must be at least this share of the score of the
            statement it corrects (≥ 0).
        values: (n, n) bool, whether statement j can give the new value of statement i
            (:func:`gives_new_value`; read for i < j only): a later statement on the same
            subject that gives no value of the kind the older one gave ("I'm planning a long
            bike ride" after "I own 3 bikes") corrects nothing. None = not checked.
        strong: (n, n) bool, whether j gives a value of i's kind on a subject word the two share
            (:func:`gives_value_on_subject`; read for i < j only). Among several later
            statements that correct i, those that do are taken first (then the closest); and
            a later C that does for i or for i's chosen correction B (and can give B's value,
            alike at `answer_similarity`) is B's update: i's current value. None = neither.
        typed: (n, n) bool, whether j gives a value of a kind i gives other than a name (a
            number, a day, a means of travel, a role), both read strictly
            (:func:`gives_typed_value`; read for i < j only). Two updates B < C of A that each
            give such a value of A's and C one of B's are a chain of values of one thing: C
            is A's current value even when B is closer to A ("My job is a teacher" → "… By the
            way: from next week I'm an architect." → "Got the offer! I'll be working as a
            pharmacist."; "I get to the office by the train" → "I'm using the ferry" →
            "Switched to the car"), and B is corrected by C. A name alone is not such a value:
            any capitalised word is one. None = not checked.
        Two updates B < C of one statement A: when C is taken as A's current value, B (corrected
        by nothing else; C able to give its value, with the `answer_evidence` for the pair, not
        another person's fact; and B gives A's value on a shared word, or C gives B's: `strong`,
        or both give typed values, `typed`) is marked corrected by C as well. Without either,
        not: a predicate every statement shares ("my violin lessons start next week", "my
        garden tomatoes start next week") is no evidence that they are values of one thing.
    Returns:
        ``{older index: newer index}`` (newer > older); statements corrected by nothing are
        absent.
    Raises:
        ValueError: the lengths disagree or `min_score_ratio` is negative.
    """
    n = sims.shape[0]
    if sims.shape != (n, n) or len(query_sims) != n or len(scores) != n:
        raise ValueError(
            f"sims must be (n, n) with n = len(query_sims) = len(scores); got {sims.shape}, "
            f"{len(query_sims)}, {len(scores)}"
        )
    if min_score_ratio < 0:
        raise ValueError(f"min_score_ratio must be >= 0, got {min_score_ratio}")
    same = same_subject(
        sims, query_sims, similarity=similarity, answer_similarity=answer_similarity, answers=answers,
        answer_share=answer_share, holders=holders, shared=shared, answer_evidence=answer_evidence,
    )
    out: dict[int, int] = {}
    updates: dict[int, list[int]] = {}
    for i in range(n - 1):
        later = [
            j for j in range(i + 1, n)
            if same[i, j] and scores[j] >= min_score_ratio * scores[i] and (values is None or values[i, j])
        ]
        if not later:
            continue
        updates[i] = later
        # a later statement giving A's value on a word they share (`strong`) is better evidence
        # than one linked to it as an answer only: "My sister has an apartment in Denver" → "Oh,
        # one more thing: my sister took a job in Boston" (0.40 alike), not "Since the move I ride
        # the train" (0.40)
        closest = max(later, key=lambda j: (strong is None or bool(strong[i, j]), float(sims[i, j]), j))
        # a later update of the closest one is the current value: A → B → C points at C when
        # C is alike to A and to B at least as much as B is to A; a later statement alike to A
        # only, or to both only as much as any statement on the thing (another detail of it),
        # is not
        link = max(similarity, float(sims[i, closest]))
        chain = [j for j in later if j > closest and sims[i, j] >= similarity and sims[closest, j] >= link]
        if not chain and values is not None and strong is not None:
            # …nor when C, one more update of A, can give B's value too and gives A's or B's
            # value on a word they share (`strong`: "My best friend is Hannah" → "Hannah and I
            # drifted apart; Mei is my person" → "Amara and I have become inseparable, she's my
            # closest friend these days")
            chain = [
                j for j in later if j > closest and sims[closest, j] >= answer_similarity
                and values[closest, j] and (strong[i, j] or strong[closest, j])
            ]
        current = chain[-1] if chain else closest
        if typed is not None and typed[i, current]:
            # a newer typed update of A that is one of the current one's too is the newest value
            newer = [j for j in later if j > current and typed[i, j] and typed[current, j]
                     and (values is None or values[current, j]) and _may_link(current, j, holders, answer_evidence)]
            if newer:
                current = newer[-1]
        out[i] = current
    # two updates of one statement are two values of one thing: the one taken as its current
    # value is also newer than an earlier update that nothing corrected ("I own 3 bikes" →
    # "Oh, one more thing: that's bike number 4" → "I just bought another bike, so 5 now": the
    # middle one, inside a long message, is little alike to the last)
    if strong is None and typed is None:
        return out
    for i, current in list(out.items()):
        for j in updates[i]:
            evidence = (strong is not None and bool(strong[i, j] or strong[j, current])) \
                or (typed is not None and bool(typed[i, j] and typed[j, current]))
            if j < current and j not in out and (values is None or values[j, current]) \
                    and evidence and _may_link(j, current, holders, answer_evidence):
                out[j] = current
    return out


def _may_link(
    i: int, j: int, holders: Sequence[str | None] | None, answer_evidence: np.ndarray | None,
) -> bool:
    """Whether two updates of one statement may be linked to each other: with the evidence
    :func:`same_subject` asks of best answers, and not two people's facts (however little alike:
    each is one subject with the statement they update)."""
    if answer_evidence is not None and not answer_evidence[i, j]:
        return False
    return holders is None or not other_holders(holders[i], holders[j])


# -- follow-ups: later statements that the query does not reach ----------------------------------
#
# A correction often shares no word with the question ("Who do I report to?" → "My boss changed
# from Olumide to Priya") and sits far down both lists, or inside a long message about
# something else ("Can you help me plan a dinner … Oh, one more thing: my sister moved to
# Austin"). Starting from a statement the query did retrieve, the speaker's later statements
# that share a subject term with it are read back (keyword search on those terms), compared
# sentence by sentence with it, and the closest one above ``pull_similarity`` — or a later
# update of that one — is the current value; that one's own follow-ups are looked for the same
# way (a chain whose last update shares no word with the first statement).

_QUESTION_MARKS = ("?", "？", "؟")
# no split after a title's abbreviation ("I see Dr. Okafor", "Mrs. Lee"): the name is the value.
# The sentence-end lookbehind comes first: at most positions it fails at once, and the six
# title lookbehinds (the same conjunction at the same position, so the same splits) run only
# after a sentence-ending mark — a long message was split 3-4× slower with them first.
_SENTENCE = re.compile(
    r"(?<=[.!?。！？\]])(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bProf\.)\s+|\s+(?=\[)"
)
_SPEAKER_ONLY = re.compile(r"^[^\s:][^:\n]{0,63}:$")  # "user:", "Caroline:" — the search text's prefix


def sentences(text: str) -> list[str]:
    """`text` split after sentence-ending punctuation and around a bracketed aside such as an
    attachment note ("Look at this [shares a photo: …]", "[shares a photo: …] My dog is Rex")
    (whitespace-stripped, empties dropped); a text without any is one sentence. A leading
    ``speaker:`` prefix stays with the sentence after it. A new list each call (the split of
    a text of at most ``_SPLIT_MEMO_CHARS`` characters is remembered: a query splits the same
    statements several times, and the next query most of them again)."""
    if len(text) > _SPLIT_MEMO_CHARS:
        return list(_split_sentences(text))
    return list(_remembered_split(text))


# a longer text (a pasted document, a tool output) is split each time: the memo holds at most
# 8,192 texts of at most 2,000 characters (~35 MB with their splits at worst, far less for chat)
_SPLIT_MEMO_CHARS = 2_000


@lru_cache(maxsize=8_192)
def _remembered_split(text: str) -> tuple[str, ...]:
    return _split_sentences(text)


def said_sentences(text: str) -> tuple[str, ...]:
    """The :func:`sentences` of `text`, an aside as its speaker would say it alone: when the
    text opens with a speaker label (a message's search text, ``user: …`` / ``Caroline: …``), a
    sentence that opens with a label of openers only ("Oh, one more thing: ", "By the way: ",
    "Update: ") is that speaker label and the sentence after the openers; the other sentences,
    and other texts', are as :func:`sentences` gives them. What supersession compares: a
    one-sentence statement is embedded with its label, and with ``use`` the label alone is much
    of two short sentences' likeness, so an update said as an aside inside a longer message,
    compared as written, was far less alike to what it updates than the same words said alone
    ("user: I take the car to work." / "Oh, one more thing: Since the move I ride the ferry into
    town every morning.": 0.25; "user: Since the move …": 0.47 — the thresholds were measured on
    labelled one-sentence statements). Every sentence labelled (the aside's label is the
    speaker's, whatever it follows) cost LoCoMo dev R@5 73.05 -> 71.51: ordinary sentences of
    long messages, all labelled, were linked as corrections of each other. Remembered like
    :func:`sentences`."""
    if len(text) > _SPLIT_MEMO_CHARS:
        return _said_sentences(text)
    return _remembered_said(text)


@lru_cache(maxsize=8_192)
def _remembered_said(text: str) -> tuple[str, ...]:
    return _said_sentences(text)


def _said_sentences(text: str) -> tuple[str, ...]:
    """:func:`said_sentences` of `text`."""
    parts = sentences(text)
    m = _LABEL.match(parts[0]) if len(parts) > 1 else None
    if m is None or _openers_only(m.group(0)):
        return tuple(parts)
    label = m.group(0).strip() + " "
    out = []
    for p in parts:
        bare = p[len(label):] if p.startswith(label) else p
        aside = _without_opener(bare)
        out.append(p if aside == bare else label + aside)
    return tuple(dict.fromkeys(out))


def _openers_only(label: str) -> bool:
    """Whether a label ("Oh, one more thing:", "By the way:") is made of openers only."""
    words = [w.lower() for w in _WORD.findall(label)]
    return bool(words) and all(w in _OPENERS for w in words)


def _without_opener(sentence: str) -> str:
    """`sentence` without a leading label made of openers only (see :func:`said_sentences`),
    unless nothing would be left."""
    m = _LABEL.match(sentence)
    if m is None or not _openers_only(m.group(0)) or not sentence[m.end():].strip():
        return sentence
    return sentence[m.end():]


def _split_sentences(text: str) -> tuple[str, ...]:
    """:func:`sentences` of `text`, as a tuple."""
    parts = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    if len(parts) > 1 and _SPEAKER_ONLY.match(parts[0]):
        parts[:2] = [f"{parts[0]} {parts[1]}"]
    return tuple(parts)


# -- whose fact: the speaker's own or another person's -------------------------------------------
#
# "My brother lives in Paris" is as alike to "I live in Lisbon" (use: 0.48) as "We moved, I live
# in Porto now" is (0.47): the embedder hears the predicate, not whose it is. An English
# statement usually names its holder first: "I" / "we" / "my car" (the speaker's) or "my
# brother" / "a colleague" (another person, by a relation word). Two statements with different
# known holders are not one subject; an unknown holder (a name, "Helped my sister pack up")
# never vetoes.

_RELATIONS = frozenset([
    "brother", "brothers", "sister", "sisters", "sibling", "siblings", "mother", "mom", "mum",
    "father", "dad", "parents", "son", "sons", "daughter", "daughters", "kid", "kids", "child",
    "children", "baby", "wife", "husband", "partner", "spouse", "boyfriend", "girlfriend",
    "fiance", "fiancé", "fiancee", "fiancée", "cousin", "aunt", "uncle", "niece", "nephew",
    "grandmother", "grandfather", "grandma", "grandpa", "grandparents", "friend", "friends",
    "neighbour", "neighbor", "neighbours", "neighbors", "roommate", "flatmate", "housemate",
    "colleague", "colleagues", "coworker", "coworkers",
])
_SELF = frozenset(["i", "i'm", "i've", "i'd", "i'll", "im", "we", "we're", "we've", "we'd", "we'll"])
# Pronouns and the like that the stop words leave out: never a name, contracted or not.
_PRONOUNS = frozenset([
    "let", "here", "there", "everything", "everyone", "everybody", "something", "someone", "somebody",
    "anything", "anyone", "anybody", "nothing", "nobody", "noone", "this", "these", "those", "that",
    "it", "he", "she", "they", "you", "who", "what", "where", "when", "why", "how",
])
_OPENERS = frozenset([
    "oh", "so", "well", "also", "and", "but", "anyway", "actually", "btw", "update", "correction",
    "honestly", "by", "the", "way", "one", "more", "thing", "ok", "okay", "yes", "no", "hey",
    "fyi", "just", "quick", "note",
])
_WORD = re.compile(r"[\w][\w'’]*")
_LABEL = re.compile(r"^\s*[^\s:][^:\n]{0,63}:\s")  # "user: ", "Caroline: ", "Update: "
SELF = "self"  # the holder of the speaker's own facts (see holder)


@lru_cache(maxsize=65_536)
def holder(sentence: str) -> str | None:
    """Whose fact an (English) sentence states, from how it starts: :data:`SELF` for "I …",
    "we …", "my car …", "my wife and I …", "my best friend is Hannah" (a relation named by
    a name is the speaker's fact); the relation word for "my brother lives …", "my older
    sister's flat …", "a colleague has …"; None when it cannot tell (a name, a verb first).
    A leading label (the search text's ``user:`` / ``Caroline:``) and openers ("Oh, one more
    thing:", "Update:") are skipped."""
    raw = _WORD.findall(_LABEL.sub("", sentence, count=1))
    words = [w.lower().replace("’", "'") for w in raw]
    at = 0
    while at < len(words) and words[at] in _OPENERS:
        at += 1
    if at >= len(words):
        return None
    first = words[at]
    if first in _SELF:
        return SELF
    if _paired_with_speaker(words, at):
        return SELF  # "Jonah and I have become inseparable": the speaker's own fact, with someone
    if first not in ("my", "our", "a", "an"):
        return None
    # the relation word right after the determiner, or after one modifier ("my older sister")
    for r in (at + 1, at + 2):
        if r < len(words) and _bare(words[r]) in _RELATIONS:
            rest = words[r + 1:r + 3]
            if rest[:1] == ["and"] and "i" in words[r + 1:r + 4]:
                return SELF  # "my wife and I moved"
            if rest[:1] == ["is"] and len(raw) > r + 2 and raw[r + 2][:1].isupper():
                return SELF  # "my best friend is Hannah": who the relation is
            return _bare(words[r])
    return SELF if first in ("my", "our") else None


def _bare(word: str) -> str:
    return word[:-2] if word.endswith("'s") else word


def other_holders(a: str | None, b: str | None) -> bool:
    """Both holders known (:func:`holder`) and different: two people's facts."""
    return a is not None and b is not None and a != b


# -- what kind of value a statement gives ---------------------------------------------------------
#
# An update gives the attribute a new value of the same kind as the old one: "I own 3 bikes" →
# "I just bought another bike, so 4 now"; "My sister lives in Denver" → "she is settled in Austin
# for good"; "Yoga is on Tuesday" → "I signed up for the Thursday session". A later statement on
# the same thing that gives no value of that kind is another detail of it, not its new value —
# "I'm planning a long bike ride this weekend", "My sister's birthday is next Friday", "The cat
# needs her vaccinations in spring", "I dropped my phone and cracked the case" — however alike
# the two sentences are to an embedder.

NUMBER, NAME, CALENDAR, TRAVEL, ROLE = "number", "name", "calendar", "travel", "role"
_CALENDAR_WORDS = frozenset([
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
    "january", "february", "march", "april", "june", "july", "august", "september", "october",
    "november", "december",
])
# means of travel: a common noun that is the whole value of "how do I get there" ("I take the
# bus to work" -> "Switched to the train"): no capital and no digit, so no other kind reads it.
# Each word maps to its singular, so "bikes" and "bike" are one value.
_TRAVEL_WORDS = {
    **{w: w for w in ("bus", "train", "tram", "subway", "metro", "underground", "ferry", "car", "bike",
                      "bicycle", "scooter", "motorbike", "motorcycle", "taxi", "cab", "carpool", "plane",
                      "boat", "coach", "shuttle")},
    # not "foot" nor "flight": said of anything else as often ("my foot hurts", "my flight is late")
    **{"buses": "bus", "trains": "train", "trams": "tram", "ferries": "ferry", "cars": "car", "bikes": "bike",
       "bicycles": "bicycle", "scooters": "scooter", "taxis": "taxi", "cabs": "cab", "planes": "plane",
       "boats": "boat"},
    # the verb that names one ("I cycle in every morning"); not "drive", said of anything that
    # pushes ("my passion is driving me", LoCoMo conv-30)
    **dict.fromkeys(("cycle", "cycles", "cycling", "cycled"), "bike"),
}
# a role: the noun phrase a speaker says they are or work as ("I've been an architect for six
# years" -> "from next week I'm a nurse", "I work as a software engineer" -> "a new position as
# a data analyst"): common nouns, so no other kind reads them. Read after a first-person copula
# or "as"/"job is", one or two words after the article, and only where the phrase ends there
# (end of sentence or a preposition): "I'm a big fan of pottery" and "I'm a bit tired" name no role.
_ROLE = re.compile(
    r"\b(?:i'?m|i am|i've been|i have been|i was|i'll be|i will be|(?:job|role|position|occupation) is|"
    r"(?:work|works|worked|working|employed|job|position|role|career|hired|trained) as)"
    r"\s+(?:now\s+|still\s+|currently\s+)?an?\s+([a-z][a-z-]*(?:\s+[a-z][a-z-]*)?)"
    r"(?=\s*(?:$|[.,;:!?)]|\s(?:at|in|for|with|from|on|by|since|now|these|this|again|too)\b))",
    re.IGNORECASE)
_INTERJECTION = re.compile(r"\s*[\w'’]+\s*[,!?…]")  # the first word, then a comma or a mark
_NO_ROLE = frozenset(("bit", "little", "lot", "few", "couple", "kind", "sort", "part", "fan"))
_NUMBER_WORDS = frozenset([
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "twenty", "thirty", "forty", "fifty", "hundred", "thousand", "dozen", "half", "another",
    "first", "second", "third", "once", "twice", "single", "double", "both", "none", "no",
])


def value_kinds(sentence: str, *, generous: bool = False) -> frozenset[str]:
    """The kinds of value an (English) sentence gives: :data:`NUMBER` (a word with a digit:
    "3", "$1955", "6:30", "Pixel 7"), :data:`CALENDAR` (a weekday or month name),
    :data:`TRAVEL` (a means of travel: "the bus", "my bike", "I cycle") and :data:`ROLE` (what the
    speaker is or works as: "I'm a nurse", "I work as a data analyst") — values only where they
    change, :func:`new_noun_value` — and :data:`NAME` (another capitalised word: a place, a
    person, a brand). A leading label
    (``user:``), "I", stop words and openers are not values; nor is the first word (capitalised
    by position), unless `generous`, which also counts number words ("two", "another") as
    numbers. The older statement's kinds are read
    strictly and the newer one's generously, so a doubt never vetoes an update. Both readings
    are made in one pass over the words and remembered by sentence."""
    return _both_kinds(sentence)[1 if generous else 0]


@lru_cache(maxsize=65_536)
def _both_kinds(sentence: str) -> tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]:
    """(:func:`value_kinds` of `sentence` read strictly, read generously; the
    :func:`value_words` of the strict reading; the :func:`noun_values` among them)."""
    text = _LABEL.sub("", sentence, count=1)
    raw = _WORD.findall(text)
    strict: set[str] = set()
    generous: set[str] = set()
    words: set[str] = set()
    nouns = _role_words(text)
    if nouns:
        strict.add(ROLE)
        generous.add(ROLE)
    # a reply with no content — a first word that punctuation ends (an interjection, a
    # greeting) and at most one other word that names anything: "Haha, true.", "Morning!",
    # "Wow, lucky you" — gives no name, however generously read: "Haha, true." gave a name
    # "value" and corrected "Jonah and I have become inseparable". A sentence that goes on
    # ("Yeah, our trip got off to a bad start.") is read as before.
    exclaimed = _content_free(text, raw)
    for at, word in enumerate(raw):
        low = word.lower().replace("’", "'")
        # a letter is never a digit: an all-letter word (most words) needs no digit scan
        if not word.isalpha() and any(ch.isdigit() for ch in word):
            named = any(ch.isalpha() for ch in word)
            for kinds in (strict, generous):
                kinds.add(NUMBER)
                if named:
                    kinds.add(NAME)  # "4B", "S21", "5k": a number that names a thing
            words.add(low)
            continue
        counted = low in _NUMBER_WORDS  # a number word: a number when read generously
        if counted:
            generous.add(NUMBER)  # "one" names nothing
        calendar = low in _CALENDAR_WORDS
        if low in _TRAVEL_WORDS:
            for kinds in (strict, generous):
                kinds.add(TRAVEL)
            nouns.add(_TRAVEL_WORDS[low])
            continue
        # a stop word or opener is capitalised by position ("…: The cat …")
        name = word[:1].isupper() and not _plain(low)
        if calendar and at > 0:
            strict.add(CALENDAR)
            words.add(low)
        elif name and (at > 0 or _named_first(raw)):  # a first word may be a name all the same
            strict.add(NAME)
            if not calendar:  # a weekday or month opening a sentence is no value word
                words.add(low)
        if calendar and not counted:
            generous.add(CALENDAR)
        elif name and not counted and (at > 0 or not exclaimed or _named_first(raw)):
            generous.add(NAME)
    return frozenset(strict), frozenset(generous), frozenset(words | nouns), frozenset(nouns)


def _content_free(text: str, raw: Sequence[str]) -> bool:
    """Whether `text` (its words `raw`) is a reply with no content: its first word ends at a
    comma or a mark (:data:`_INTERJECTION`) and at most one later word is not :func:`_plain`."""
    if _INTERJECTION.match(text) is None:
        return False
    return sum(1 for w in raw[1:] if not _plain(w.lower().replace("’", "'"))) <= 1


def _role_words(text: str) -> set[str]:
    """The words of the roles `text` says the speaker has (lower-cased; see :data:`_ROLE`)."""
    out: set[str] = set()
    for m in _ROLE.finditer(text):
        words = m.group(1).lower().split()
        if words[0] not in _NO_ROLE and not any(w in STOP_WORDS for w in words):
            out.update(words)
    return out


def value_words(sentence: str) -> frozenset[str]:
    """The words (lower-cased) that give the values :func:`value_kinds` reads strictly: those
    with a digit ("3", "$1955", "6:30"), weekday and month names after the first word, and the
    other capitalised words that are no stop word, opener or "I" ("Jonah", "Austin"): what a
    new value of the same kind must change. Read in :func:`value_kinds`' pass."""
    return _both_kinds(sentence)[2]


def _plain(low: str) -> bool:
    """Whether a lower-cased word names nothing: a stop word, an opener, the speaker ("I",
    "we've"), or a contraction of one ("It's", "That's", "Let's", "Everything's" — read as
    possessive names before, which linked chit-chat as updates of a name)."""
    stem = low.split("'", 1)[0]
    return any(w in STOP_WORDS or w in _OPENERS or w in _SELF or w in _PRONOUNS for w in (low, stem))


def _named_first(raw: Sequence[str]) -> bool:
    """Whether a sentence's first word (capitalised by position) is a name all the same: a
    possessive ("Marta's class is on Thursday") or one of a pair with the speaker ("Amara and I
    have become inseparable", "Hannah and me"): a verb or an adverb opening a sentence is
    neither ("Bought two more ferns", "Honestly Jonah is …")."""
    first = raw[0].lower().replace("’", "'") if raw else ""
    if first.endswith("'s") and len(first) > 2 and not _plain(first):
        return True
    return _paired_with_speaker([w.lower() for w in raw[:3]], 0)


def _paired_with_speaker(words: Sequence[str], at: int) -> bool:
    """Whether lower-cased `words` pair the word at `at` with the speaker: "Amara and I",
    "Hannah and me", "Jonah and I've"."""
    return words[at + 1:at + 2] == ["and"] and words[at + 2:at + 3] in (["i"], ["me"], ["i've"], ["i'm"])


def gives_new_value(older: str, newer: str) -> bool:
    """Whether `newer` can be the new value of what `older` states: `older` gives no value
    (:func:`value_kinds`, read strictly: "I take the bus to work") or `newer` gives one of the
    same kind (read generously), or says that something changed (:func:`says_it_changed`). "My
    sister's birthday is next Friday" gives no new value of
    "My sister lives in Denver"; "Helped my sister pack up, she is settled in Austin" does.
    The same sentence said again gives nothing new ("I'll think about it." twice)."""
    if older.strip() == newer.strip():
        return False
    return not value_kinds(older) or _same_kind_or_changed(older, newer)


def answer_link(older: str, newer: str, share_a_word: bool) -> bool:
    """Whether two of a speaker's best answers to a query, alike only at the lower answer
    cosine, are one subject: they share a subject word, or give values of one kind (read
    strictly for `older`, generously for `newer`: "I use a Pixel 7" / "Upgraded to a Fairphone
    4"), or `newer` says that something changed (:func:`says_it_changed`: "Switched to the
    train, much less stressful" after "I take my bike to work")."""
    return share_a_word or _same_kind_or_changed(older, newer)


def gives_value_on_subject(older: str, newer: str, share_a_word: bool) -> bool:
    """Whether `newer` states a value of a kind `older` gives, both read strictly
    (:func:`value_kinds`; amounts in the same units, :func:`amount_units`), and the two share a
    subject word (`share_a_word`): "My sister took a job in Boston" of "My sister has an
    apartment in Denver", not "Lessons are getting harder this month" of "I take Spanish
    lessons on Thursdays" (a capitalised first word is no value read strictly)."""
    return share_a_word and gives_value_of_kind(older, newer)


def gives_value_of_kind(older: str, newer: str) -> bool:
    """Whether `newer` states a value of a kind `older` gives, both read strictly
    (:func:`value_kinds`; amounts in the same units, :func:`amount_units`), and is not the same
    sentence: "Bought two more ferns, 5 in total." of "I have 3 houseplants."; not "One of my
    plants has yellow leaves." (a number word is no value read strictly) nor "My office moved
    to the fifth floor." of "I take the train to work." (neither gives a value)."""
    if older.strip() == newer.strip():
        return False
    return _one_thing(value_kinds(older) & value_kinds(newer), older, newer)


def gives_typed_value(older: str, newer: str) -> bool:
    """Whether `newer` states a value of a kind `older` gives other than a name (a number, a
    weekday or month, a means of travel, a role), both read strictly (:func:`value_kinds`;
    amounts in the same units, common nouns changed: :func:`gives_value_of_kind`): "Got the
    offer! I'll be working as a pharmacist." of "From next week I'm an architect."; not "Our
    cat is called Tiger." of "I've had a Fairphone for two years." (names only)."""
    if older.strip() == newer.strip():
        return False
    kinds = (value_kinds(older) & value_kinds(newer)) - {NAME}
    return _one_thing(kinds, older, newer)


def _same_kind_or_changed(older: str, newer: str) -> bool:
    """Whether `newer` gives a value of one of the kinds `older` gives (`older` read strictly,
    `newer` generously) or says that something changed: the evidence :func:`gives_new_value`
    and :func:`answer_link` share."""
    return _one_thing(value_kinds(older) & value_kinds(newer, generous=True), older, newer) \
        or says_it_changed(newer)


def _one_thing(kinds: frozenset[str], older: str, newer: str) -> bool:
    """Whether `kinds`, the value kinds `older` and `newer` have in common, can be values of
    one thing: some kind, and numbers alone only when the two sentences' amounts are not in
    different units (:func:`amount_units`: "$1515 a month" and "16 km a week" are two
    quantities)."""
    if kinds & _NOUN_KINDS and not new_noun_value(older, newer):
        kinds = kinds - _NOUN_KINDS
    return bool(kinds) and (kinds != {NUMBER} or _units_agree(older, newer))


_NOUN_KINDS = frozenset((TRAVEL, ROLE))  # common-noun values: a value only where they change


def noun_values(sentence: str) -> frozenset[str]:
    """The common-noun values `sentence` gives (lower-cased): the means of travel it names
    (singular: "bus", "bike") and the words of the role the speaker says they have ("data",
    "analyst")."""
    return _both_kinds(sentence)[3]


def new_noun_value(older: str, newer: str) -> bool:
    """Whether `newer` gives a common-noun value `older` does not: a means of travel or a role
    changes only then ("I take the bus" -> "I use the train", "I'm a nurse" -> "I work as an
    architect"); "My bike helmet strap broke" names the bike of "that's bike number 3" again and
    gives no new value of that kind."""
    return bool(noun_values(newer) - noun_values(older))


MONEY, TIME_OF_DAY, DISTANCE, WEIGHT, DURATION, PERCENT = (
    "money", "time of day", "distance", "weight", "duration", "percent",
)
_UNIT_WORDS = {
    **dict.fromkeys(("dollar", "dollars", "euro", "euros", "bucks", "usd", "eur", "gbp"), MONEY),
    **dict.fromkeys(("am", "pm", "a.m", "p.m", "o'clock"), TIME_OF_DAY),
    **dict.fromkeys(("km", "kms", "kilometres", "kilometers", "mi", "mile", "miles", "m", "metres", "meters",
                     "k"), DISTANCE),
    **dict.fromkeys(("kg", "kgs", "kilos", "lb", "lbs", "g", "grams"), WEIGHT),
    **dict.fromkeys(("year", "years", "month", "months", "week", "weeks", "day", "days", "hour", "hours",
                     "hrs", "h", "minute", "minutes", "mins", "min", "seconds"), DURATION),
    **dict.fromkeys(("%", "percent", "per cent"), PERCENT),
}
_AMOUNT = re.compile(r"([$€£¥])?\s?(\d+(?:[.,:]\d+)*)\s?(%|[A-Za-z][\w.']*)?")
_AT_END = re.compile(r"(?:^|\W)at\s*$", re.IGNORECASE)  # "… at " right before a number


@lru_cache(maxsize=65_536)
def amount_units(sentence: str) -> frozenset[str] | None:
    """The kinds of unit of the amounts written with digits in `sentence`: :data:`MONEY` ("$1515",
    "40 euros"), :data:`TIME_OF_DAY` ("6:30", "7 pm", "at 6"), :data:`DISTANCE` ("25 km", "5k"),
    :data:`WEIGHT`, :data:`DURATION` ("six years" is no digit; "3 weeks"), :data:`PERCENT`.
    None when some amount has no unit of these ("3 bikes", "5 in total", "room 4B": a count or a
    name, which any unit may be a count of) or there is no amount."""
    kinds: set[str] = set()
    found = False
    for m in _AMOUNT.finditer(sentence):
        currency, number, after = m.groups()
        start = m.start(2)
        if start > 0 and (sentence[start - 1].isalpha() or sentence[start - 1] in "-_"):
            continue  # a digit inside a name: "S21", "db-7"
        found = True
        if currency:
            kinds.add(MONEY)
        elif ":" in number:
            kinds.add(TIME_OF_DAY)
        elif after is not None and after.lower().rstrip(".") in _UNIT_WORDS:
            kinds.add(_UNIT_WORDS[after.lower().rstrip(".")])
        elif _AT_END.search(sentence, 0, m.start()):
            kinds.add(TIME_OF_DAY)  # "I train at 6 now": a bare number after "at" is a clock time
        else:
            return None
    return frozenset(kinds) if found else None


def _units_agree(older: str, newer: str) -> bool:
    """False only when both sentences' amounts all have units (:func:`amount_units`) and no kind
    of unit is shared: a doubt never vetoes."""
    a, b = amount_units(older), amount_units(newer)
    return a is None or b is None or bool(a & b)


_CHANGE_WORDS = frozenset([
    "now", "changed", "change", "changes", "switched", "switch", "moved", "replaced", "upgraded",
    "renamed", "instead", "anymore", "longer", "became", "become", "updated", "update", "correction",
    "actually", "nowadays",
])


@lru_cache(maxsize=65_536)
def says_it_changed(sentence: str) -> bool:
    """Whether an (English) sentence says that something changed ("New race target: a
    marathon", "I changed my running goal to a marathon", "… instead", "no longer …", "… now"):
    such a
    sentence may give the new value in words of another kind than the old one ("5k" → "a
    marathon"), so :func:`gives_new_value` does not ask it for a value of the old kind."""
    words = [w.lower() for w in _WORD.findall(sentence)]
    # "new" opening a sentence announces ("New race target: …", "My new phone is …"; a speaker
    # label may come first); further in it is any adjective ("My car needs new tyres")
    return "new" in words[:2] or any(w in _CHANGE_WORDS for w in words)


_TOKEN = re.compile(r"[^\W_](?:[\w-]*[^\W_])?")


@lru_cache(maxsize=65_536)
def identifiers(text: str) -> frozenset[str]:
    """The names with a number in them that `text` holds, lower-cased: words that start with a
    letter and contain a digit ("db-7", "A320", "PR-1234", "node3", "B12"). They name one
    thing among several of its kind (a host, a model, a ticket, a room); a value is written
    number first ("64 GB", "5pm", "10k", "3rd") and is not one."""
    return frozenset(
        w.lower() for w in _TOKEN.findall(text) if w[0].isalpha() and any(ch.isdigit() for ch in w)
    )


def names_another(named: frozenset[str], older: str, newer: str) -> bool:
    """Whether `older` and `newer` are about two things for a query naming `named`
    (:func:`identifiers` of the query): the query names a thing one of them names and the
    other does not, and the other names one of its own instead. "Server db-8 has 128 GB of
    RAM" is no correction of "Server db-7 has 64 GB of RAM" for "How much RAM does db-7 (or
    db-8) have?", however alike the two sentences are; "db-7 was upgraded to 128 GB" or "It
    has 128 GB now" could be. A query naming nothing vetoes nothing ("We moved from room B12
    to C14" may well correct "We meet in room B12")."""
    if not named:
        return False
    old, new = identifiers(older), identifiers(newer)
    return (bool((named & old) - new) and bool(new - old)) or (bool((named & new) - old) and bool(old - new))


@lru_cache(maxsize=65_536)
def subject_terms(text: str) -> frozenset[str]:
    """The stemmed content words of `text` (stop words dropped, English stemmed, CJK bigrams):
    two statements about one subject share at least one (the entity or the old value)."""
    return frozenset(stem_words(query_terms(text)))


def choose_followup(to_anchor: Sequence[float], mutual: np.ndarray, *, similarity: float) -> int | None:
    """Which of an anchor statement's later statements (oldest first) is its current value.

    The closest one to the anchor (cosine at least `similarity`), or a later one alike at
    least `similarity` to the anchor and, to that closest one, at least as much as the
    closest is to the anchor (an update of the update: the newest such). A later statement
    alike only to the anchor does not take over: "I bought a new yoga mat" is near "I do
    yoga on Thursdays" but it is not the studio's new day; nor does one alike to both only
    as much as anything said about the thing ("I'm planning a long bike ride this weekend"
    after "I own 3 bikes" and "I just bought another bike, so 4 now").

    Args:
        to_anchor: length n, each later statement's cosine to the anchor.
        mutual: (n, n) cosines among the later statements.
        similarity: the threshold (0 < similarity ≤ 1).
    Returns:
        The index of the current value in `to_anchor`, or None when none is close enough.
    Raises:
        ValueError: the shapes disagree or `similarity` is outside (0, 1].
    """
    n = len(to_anchor)
    if mutual.shape != (n, n):
        raise ValueError(f"mutual must be ({n}, {n}), got {mutual.shape}")
    if not 0 < similarity <= 1:
        raise ValueError(f"similarity must be in (0, 1], got {similarity}")
    close = [j for j in range(n) if to_anchor[j] >= similarity]
    if not close:
        return None
    closest = max(close, key=lambda j: (float(to_anchor[j]), j))
    link = max(similarity, float(to_anchor[closest]))
    chain = [j for j in close if j > closest and mutual[closest, j] >= link]
    return chain[-1] if chain else closest


def followup_texts(text: str) -> list[str]:
    """The texts :func:`find_followups` may embed for a statement `text`, as anchor or as a
    later statement: its sentences, and the whole text when it is one sentence (distinct,
    in order). Embedding them ahead of a query (see
    :meth:`~mindpalace.retrieval.hybrid.HybridRetriever.sync_embeddings`) leaves the query
    only its own vector to embed."""
    parts = list(said_sentences(text))
    return parts if len(parts) > 1 else list(dict.fromkeys([text, *parts]))


class _SentenceVectors:
    """The vectors of the texts one :func:`find_followups` call compares, each embedded once
    per call; the anchors' sentences are loaded in one `embed` call (a call's fixed cost is
    most of embedding a few short sentences)."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray]) -> None:
        self._embed = embed
        self._held: dict[str, np.ndarray] = {}

    def load(self, texts: Sequence[str]) -> None:
        """Embed those of `texts` not held yet (each once), in one call."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._held]
        if missing:
            self._held.update(zip(missing, self._embed(missing), strict=True))

    def matrix(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim): the rows of `texts`, in order (an `embed` with a memo)."""
        self.load(texts)
        if not texts:
            return self._embed(texts)
        return np.stack([self._held[t] for t in texts])


def best_sentence(
    text: str, query_vector: np.ndarray, embed: Callable[[list[str]], np.ndarray],
    repeated: frozenset[str] = frozenset(),
) -> str:
    """The sentence of `text` closest to the query (the whole text when it is one sentence):
    the part of a long message that the query retrieved it for. Sentences in `repeated` are
    passed over unless every sentence is one (text pasted into several messages), and so are
    questions unless the text only asks (a question states nothing: "What's a sensible way to
    split chores? There are 2 bikes in our garage." is compared on the bikes)."""
    every = list(said_sentences(text))
    parts = [p for p in every if p not in repeated] or every
    # a question states nothing: "Can you help me plan a dinner? … Oh, one more thing: my rent
    # is $1450" is compared on what it states (unless it only asks)
    parts = [p for p in parts if not p.rstrip().endswith(_QUESTION_MARKS)] or parts
    if len(parts) <= 1:
        # one sentence left once the repeated ones are passed over is the one compared (the
        # whole text would bring the pasted sentences back); a one-sentence text is compared whole
        return parts[0] if parts and len(every) > 1 else text
    vectors = embed(parts)
    return parts[int(np.argmax(vectors @ query_vector))]


def followup_similarity(
    terms: frozenset[str], anchor_vector: np.ndarray, later: str, embed: Callable[[list[str]], np.ndarray],
    repeated: frozenset[str] = frozenset(), whose: str | None = None, older: str | None = None,
) -> float:
    """Cosine between the anchor sentence (`anchor_vector`) and the closest sentence of
    `later` that shares one of the anchor's subject `terms` (stemmed, see
    :func:`subject_terms`) with it (-inf when none does): an update inside a long message is
    compared on its own sentence, not on the message's average. Sentences in `repeated` (the
    anchor's own, verbatim) are skipped: the same pasted text in two messages says nothing
    about an update; so are those stating another person's fact than `whose` (the anchor
    sentence's :func:`holder`), and, when the anchor sentence `older` is given, those giving no
    new value of it (:func:`gives_new_value`: "My sister's birthday is next Friday" after "My
    sister lives in Denver"); questions state nothing and are skipped too."""
    parts = [
        s for s in said_sentences(later)
        if subject_terms(s) & terms and s not in repeated and not other_holders(whose, holder(s))
        and not s.rstrip().endswith(_QUESTION_MARKS) and (older is None or gives_new_value(older, s))
    ]
    if not parts:
        return float("-inf")
    return float(np.max(embed(parts) @ anchor_vector))


FollowupKey = tuple[int, str, int | None, tuple[int, ...]]  # see find_followups' `answers`


def find_followups(
    anchors: Sequence[Document],
    query_vector: np.ndarray,
    *,
    search: Callable[[Document, str], list[Document]],
    same_speaker: Callable[[Document, Document], bool],
    later: Callable[[Document, Document], bool],
    states: Callable[[Document], bool],
    embed: Callable[[list[str]], np.ndarray],
    similarity: float,
    uses: Callable[[Document, Sequence[str]], Sequence[int]] | None = None,
    max_uses: int = 0,
    known: dict[int, Document] | None = None,
    depth: int = 1,
    answers: MutableMapping[FollowupKey, tuple[Document, np.ndarray] | None] | None = None,
    speaker_terms: Callable[[Document], Iterable[str]] | None = None,
    prefetch_uses: Callable[[Sequence[tuple[Document, Sequence[str]]]], None] | None = None,
    prefetch_search: Callable[[Sequence[tuple[Document, str]]], None] | None = None,
    neighbours: Callable[[Document, np.ndarray], list[Document]] | None = None,
    vector_similarity: float | None = None,
    retrieved: Sequence[Document] = (),
) -> dict[int, Document]:
    """For each anchor (a statement the query retrieved), its current value among the
    speaker's later statements, if one is about the same subject.

    For anchor A: the sentence of A closest to the query; its subject words are its content
    words that the speaker uses in at most `max_uses` statements (``uses(A, words)``): a word
    the speaker says all the time ("my violin lessons start next week", "my garden tomatoes
    start next week": start, next, week) names no subject, so sharing it makes no follow-up.
    ``search(A, words)`` (a keyword search for the subject words, in the scopes the query may
    read) gives the candidates; those by the same speaker, later, and stating something, are
    compared with :func:`followup_similarity` on the subject words (sentences A holds
    verbatim passed over: the same pasted text in two messages says nothing about an
    update); :func:`choose_followup` picks the current value. The current value F of A is
    then looked up the same way from F's sentence closest to A's (its own subject words), up
    to `depth` steps, so a chain ends at its newest update even when that one shares no word
    with A.

    Args:
        anchors: documents, best first.
        query_vector: the query's unit vector (dim,).
        search / same_speaker / later / states: the store search and the speaker, order and
            statement tests (the caller's, so scopes and speakers mean what they mean there).
        embed: texts → (n, dim) unit vectors.
        similarity: the cosine threshold of :func:`choose_followup`.
        uses / max_uses: how many of the anchor speaker's statements contain each of the
            words (the caller's counts, one per word, in the same scopes; asked for all of a
            sentence's words at once, so a store answers them in one read); None or
            `max_uses` 0 = every content word is a subject word.
        known: ``{anchor id: a later statement already taken as its correction}`` (the
            caller's choice among the retrieved statements): one more candidate, compared on
            the same terms, so a closer statement found by the search replaces it.
        depth: follow-up steps from each anchor (≥ 1).
        speaker_terms: the words of a statement's speaker label (its name or role, as the
            search text's ``speaker:`` prefix holds them): never subject words, else every
            statement of a speaker with few statements shares one.
        answers: ``{(statement id, its sentence compared, the extra candidate's id or None,
            the ids of the `retrieved` statements it may read): its current value and that
            value's sentence vector, or None}`` — a step's answer depends on nothing else (then
            store reads), so a caller that keeps this while the
            store is unchanged (and `search`, `uses`, `similarity` the same) computes each
            once; new answers are added.
        prefetch_uses / prefetch_search: told, before any step runs, the (anchor, words)
            each anchor's first step will pass to `uses` and then the (anchor, words) it will
            pass to `search` (anchors whose first answer is in `answers` left out), so that a
            caller can read them for every anchor at once (one store read, not one per
            anchor) and answer the calls from that; they must not change what the calls return.
        neighbours / vector_similarity: the vector follow-up, for an anchor whose keyword
            search finds none (an update sharing no word with what it updates: "I have 3
            houseplants." → "Bought two more ferns, 5 in total."). ``neighbours(doc, vector)``
            gives the stored statements nearest to a sentence vector (dim,) of `doc` in the
            scopes the query may read (any speaker and time: filtered here). A later statement
            of the speaker is the anchor's current value when one of its sentences gives a
            value of a kind the anchor sentence gives, both read strictly
            (:func:`gives_value_of_kind`) and a value word the anchor sentence does not
            (:func:`value_words`; the speakers' names, `speaker_terms`, and their short forms
            are no values: "Thanks, Melanie!" → "Cool, thanks Mel!" changes nothing), at a
            cosine of at least `vector_similarity` to it,
            and the anchor is that sentence's closest earlier statement of the speaker giving
            a value of its kind (mutual nearest: "My doctor is Dr. Reyes" is near "My best
            friend is Carlos", but nearer still to "I see Dr. Okafor for checkups"); a later
            one that is in turn mutually nearest to the current value updates it (a chain).
            Either None: no vector follow-up.
        retrieved: the statements the query retrieved; the speaker's later ones are candidates
            of the vector follow-up besides the neighbours: a long message is stored as one
            vector, far from the sentence an update in it is alike to ("I take the car to
            work." → "I need to write a speech … Oh, one more thing: Since the move I ride the
            ferry into town every morning." is 0.12 alike whole and not among the sentence's
            neighbours, 0.28 on its own sentence), but the query may reach it all the same.
    Returns:
        ``{anchor document id: the later document that is its current value}``.
    """
    vectors = _SentenceVectors(embed)
    embed = vectors.matrix
    vectors.load([p for a in anchors if len(parts := said_sentences(a.text)) > 1 for p in parts])

    def step(anchor: Document, towards: np.ndarray, extra: Document | None) -> tuple[Document, np.ndarray] | None:
        """The current value of `anchor` (its sentence closest to `towards`) among its speaker's
        later statements, with the vector of that sentence; None when there is none."""
        sentence = best_sentence(anchor.text, towards, embed)
        key = (anchor.id, sentence, extra.id if extra is not None else None, pool(anchor))
        if answers is not None and key in answers:
            return answers[key]
        got = _step(anchor, sentence, extra)
        if answers is not None:
            answers[key] = got
        return got

    def pool(anchor: Document) -> tuple[int, ...]:
        """The ids of the `retrieved` statements the vector follow-up of `anchor` reads."""
        if neighbours is None:
            return ()
        return tuple(sorted(d.id for d in retrieved if same_speaker(anchor, d) and later(anchor, d)))

    def candidate_words(anchor: Document, sentence: str) -> tuple[list[str], list[str]]:
        """(the speaker label's words in `sentence`, its other words): the second are asked
        to `uses`."""
        # the speaker's own name / role (the search text's "speaker:" prefix) names no subject
        own_label = frozenset(speaker_terms(anchor)) if speaker_terms is not None else frozenset()
        said = query_terms(sentence)
        label = [w for w in said if w in own_label]  # kept in the search: it favours the speaker's statements
        return label, [w for w in said if w not in own_label and len(w) > 1]

    def subject_words(anchor: Document, sentence: str) -> tuple[list[str], list[str]]:
        """(label words, subject words) of `sentence`: the search is for both."""
        label, words = candidate_words(anchor, sentence)
        if uses is not None and max_uses > 0 and words:
            words = [w for w, n in zip(words, uses(anchor, words), strict=True) if n <= max_uses]
        return label, words

    def _step(anchor: Document, sentence: str, extra: Document | None) -> tuple[Document, np.ndarray] | None:
        got = _keyword_step(anchor, sentence, extra)
        return got if got is not None else _vector_step(anchor, sentence)

    def value_sentence(
        older: str, vector: np.ndarray, doc: Document, skip: frozenset[str], newer: bool,
    ) -> tuple[float, str, np.ndarray] | None:
        """The sentence of `doc` closest to `vector` (of the sentence `older`, or of the newer
        one when `newer` is False: `doc` is then the earlier statement) that can be the other
        side of an update with it: a value of one kind read strictly, the same holder, no
        question, not in `skip`. (cosine, sentence, its vector), or None."""
        whose = holder(older)
        parts = [
            p for p in said_sentences(doc.text)
            if p not in skip and not p.rstrip().endswith(_QUESTION_MARKS) and not other_holders(whose, holder(p))
            and (gives_value_of_kind(older, p) if newer else gives_value_of_kind(p, older))
        ]
        if not parts:
            return None
        rows = embed(parts)
        sims = rows @ vector
        at = int(np.argmax(sims))
        return float(sims[at]), parts[at], rows[at]

    def closest_earlier(doc: Document, sentence: str, vector: np.ndarray, head: Document) -> bool:
        """Whether `head` is the closest of the speaker's statements before `doc` giving a
        value of the kind `sentence` (of `doc`) gives (among `doc`'s neighbours and `head`)."""
        assert neighbours is not None
        best_id, best = None, float("-inf")
        pool = {d.id: d for d in neighbours(doc, vector)}
        pool.setdefault(head.id, head)
        for d in pool.values():
            if d.id == doc.id or not same_speaker(doc, d) or not later(d, doc) or not states(d):
                continue
            got = value_sentence(sentence, vector, d, frozenset(), newer=False)
            if got is not None and (got[0], d.id == head.id) > (best, best_id == head.id):
                best_id, best = d.id, got[0]
        return best_id == head.id

    def _vector_step(anchor: Document, compared: str) -> tuple[Document, np.ndarray] | None:
        if neighbours is None or vector_similarity is None:
            return None
        # the anchor's sentence giving a value that is closest to the one compared: what an
        # update can change ("I look after 5 houseplants." in a message whose sentence closest
        # to "How many green things…" is an aside on "a green salad")
        valued = [p for p in said_sentences(anchor.text)
                  if value_kinds(p) and not p.rstrip().endswith(_QUESTION_MARKS)]
        if not valued:
            return None
        rows = embed(valued)
        at = 0 if len(valued) == 1 else int(np.argmax(rows @ embed([compared])[0]))
        sentence, anchor_vector = valued[at], rows[at]
        own_sentences = frozenset(said_sentences(anchor.text))
        close: list[tuple[Document, str, np.ndarray]] = []
        near = neighbours(anchor, anchor_vector)
        reached = {d.id for d in near}
        near += [d for d in retrieved if d.id not in reached and d.id in pool(anchor)]
        # the speakers' names (and their short forms: "Mel" of "Melanie") are no values: a
        # speaker addressed by name ("Thanks, Melanie!") states no new value of anything
        names = frozenset(w for d in (anchor, *near) for w in (speaker_terms(d) if speaker_terms else ()))
        old = value_words(sentence)
        for d in near:
            if d.id == anchor.id or not same_speaker(anchor, d) or not later(anchor, d) or not states(d):
                continue
            got = value_sentence(sentence, anchor_vector, d, own_sentences, newer=True)
            if got is None or got[0] < vector_similarity:
                continue
            # an update changes the value: it gives one the anchor sentence does not
            new = [w for w in value_words(got[1]) - old
                   if not any(n.startswith(w) or w.startswith(n) for n in names if len(w) >= 3)]
            if new:
                close.append((d, got[1], got[2]))
        # the closest to the anchor whose mutual nearest the anchor is, then its updates in turn
        close.sort(key=lambda c: -float(c[2] @ anchor_vector))
        current = next(((d, v) for d, said, v in close if closest_earlier(d, said, v, anchor)), None)
        if current is None:
            return None
        close.sort(key=lambda c: (c[0].meta.get("timestamp") or c[0].created_at.isoformat(), c[0].id))
        for d, said, vector in close:
            head, head_vector = current
            if later(head, d) and float(vector @ head_vector) >= vector_similarity \
                    and closest_earlier(d, said, vector, head):
                current = (d, vector)
        return current

    def _keyword_step(anchor: Document, sentence: str, extra: Document | None) -> tuple[Document, np.ndarray] | None:
        label, words = subject_words(anchor, sentence)
        if not words:
            return None
        terms = frozenset(stem_words(words))
        found = [
            d for d in search(anchor, " ".join([*label, *words]))
            if d.id != anchor.id and same_speaker(anchor, d) and later(anchor, d) and states(d)
        ]
        if extra is not None and all(d.id != extra.id for d in found):
            found.append(extra)
        if not found:
            return None
        found.sort(key=lambda d: (d.meta.get("timestamp") or d.created_at.isoformat(), d.id))
        anchor_vector = embed([sentence])[0]
        own_sentences = frozenset(said_sentences(anchor.text))
        whose = holder(sentence)
        to_anchor = [
            followup_similarity(terms, anchor_vector, d.text, embed, own_sentences, whose, sentence) for d in found
        ]
        keep = [i for i, s in enumerate(to_anchor) if s >= similarity]
        if not keep:
            return None
        kept = [found[i] for i in keep]
        own = embed([best_sentence(d.text, anchor_vector, embed, own_sentences) for d in kept])
        chosen = choose_followup([to_anchor[i] for i in keep], own @ own.T, similarity=similarity)
        if chosen is None:
            return None
        return kept[chosen], own[chosen]

    if prefetch_uses is not None or prefetch_search is not None:
        firsts = []  # (anchor, its sentence closest to the query) of each first step to run
        for anchor in anchors:
            extra = (known or {}).get(anchor.id)
            sentence = best_sentence(anchor.text, query_vector, embed)
            if answers is None or (anchor.id, sentence, extra.id if extra is not None else None, pool(anchor)) \
                    not in answers:
                firsts.append((anchor, sentence))
        if prefetch_uses is not None and uses is not None and max_uses > 0:
            asked = [(a, words) for a, s in firsts if (words := candidate_words(a, s)[1])]
            if asked:
                prefetch_uses(asked)
        if prefetch_search is not None:
            queries = [(a, " ".join([*label, *words])) for a, s in firsts
                       for label, words in [subject_words(a, s)] if words]
            if queries:
                prefetch_search(queries)

    out: dict[int, Document] = {}
    for anchor in anchors:
        got = step(anchor, query_vector, (known or {}).get(anchor.id))
        seen = {anchor.id}
        # an update of the update (found from its own subject words: "The cat goes by Saffron,
        # Olive never stuck" → "The cat goes by Mochi, Saffron never stuck") is the current value
        while got is not None and got[0].id not in seen and len(seen) <= depth:
            out[anchor.id] = got[0]
            seen.add(got[0].id)
            got = step(got[0], got[1], None)
    return out
