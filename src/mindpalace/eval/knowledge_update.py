"""A synthetic knowledge-update set: a fact stated, then corrected turns or sessions later.

Generated deterministically from a seed (no data files, nothing LoCoMo-derived). Each
conversation belongs to one user and mixes several subjects; for each subject the user states
a value in a short message, and later — a few turns on, or in a later session — corrects it
in a short message phrased differently (sometimes naming the old value, sometimes not). Every
user message gets a long assistant reply (≈ 120–260 words) that talks around the subject
without restating the value, which is where length-unaware keyword scoring goes wrong; other
users' messages, unrelated small talk and near-miss statements (the same kind of subject about
someone else, said before the original) are the distractors.

A case passes when the correction ranks above the original statement in the retrieved list
for a question about the subject (the original may be missing; the correction may not).
``run_knowledge_update`` reports that rate and recall@k of the correction for the product
path (``Session.recall``), the dense-only list and the BM25-only list of the same store.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mindpalace.eval.knowledge_update_cases import Conversation, Message
from mindpalace.memory import Memory
from mindpalace.scope import ANY

AGENT = "ku"

# subject: (noun phrase, values, statement templates, correction templates, questions)
_SUBJECTS: list[tuple[str, list[str], list[str], list[str], list[str]]] = [
    ("dentist appointment", ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"],
     ["My dentist appointment is on {v}.", "I booked the dentist for {v}.",
      "Dentist visit this week: {v}."],
     ["Actually the dentist moved my appointment to {v}.", "Change of plan, dentist is {v} now.",
      "Update: dentist appointment is on {v}, not {o}."],
     ["When is my dentist appointment?", "Which day do I see the dentist?"]),
    ("manager", ["Priya", "Tomasz", "Keiko", "Rafael", "Ingrid", "Olumide"],
     ["My manager is {v}.", "I report to {v} at work.", "{v} is my boss now."],
     ["I have a new manager, it's {v}.", "Reorg happened, I now report to {v}.",
      "My boss changed from {o} to {v}."],
     ["Who is my manager?", "Who do I report to at work?"]),
    ("home city", ["Lisbon", "Denver", "Osaka", "Tallinn", "Montreal", "Perth"],
     ["I live in {v}.", "Home for me is {v}.", "We just settled in {v}."],
     ["We moved, I live in {v} now.", "New home: {v}.", "I relocated from {o} to {v}."],
     ["Which city do I live in?", "Where is my home now?"]),
    ("car", ["a blue Corolla", "a Tesla Model 3", "an old Volvo estate", "a red Mazda 2"],
     ["I drive {v}.", "My car is {v}.", "I got {v} last year."],
     ["I sold it, I drive {v} these days.", "Switched cars, now it's {v}.",
      "My car is {v} now, not {o}."],
     ["What car do I drive?", "Which car do I have?"]),
    ("gym schedule", ["mornings at 6", "lunchtime", "evenings after 7", "weekends only"],
     ["I go to the gym {v}.", "My gym time is {v}.", "Workouts are {v} for me."],
     ["I changed my gym time to {v}.", "Gym is {v} now.", "I train {v} now instead of {o}."],
     ["When do I go to the gym?", "What is my workout schedule?"]),
    ("favourite coffee", ["flat white", "cold brew", "espresso", "oat latte", "cortado"],
     ["My usual coffee order is a {v}.", "I always get a {v}.", "Coffee for me: {v}."],
     ["I switched my coffee order to a {v}.", "These days I order a {v}.",
      "No more {o}, I get a {v} now."],
     ["What is my usual coffee order?", "What coffee do I order?"]),
    ("project deadline", ["March 3", "April 18", "May 27", "June 9", "July 30"],
     ["The project deadline is {v}.", "Our launch deadline is {v}.", "We ship the project on {v}."],
     ["The deadline slipped to {v}.", "New project deadline: {v}.",
      "Deadline moved from {o} to {v}."],
     ["When is the project deadline?", "What is our launch date?"]),
    ("dog's name", ["Biscuit", "Pepper", "Nala", "Otis", "Juniper"],
     ["Our dog is called {v}.", "My dog's name is {v}.", "We named the puppy {v}."],
     ["We renamed the dog {v}.", "The dog answers to {v} now.", "The puppy is {v} now, not {o}."],
     ["What is my dog's name?", "What do we call our dog?"]),
    ("phone plan", ["a prepaid plan", "unlimited data", "a family plan", "a 10 GB plan"],
     ["My phone plan is {v}.", "I'm on {v} for my phone.", "Phone contract: {v}."],
     ["I changed my phone plan to {v}.", "Phone plan is {v} now.", "I switched from {o} to {v}."],
     ["What phone plan am I on?", "Which mobile plan do I have?"]),
    ("allergy", ["peanuts", "shellfish", "penicillin", "cats", "pollen"],
     ["I'm allergic to {v}.", "Careful, {v} give me an allergic reaction.",
      "My allergy is {v}."],
     ["The allergist says it's actually {v}, not {o}.", "Turns out my allergy is {v}.",
      "Correction: I'm allergic to {v}."],
     ["What am I allergic to?", "What is my allergy?"]),
    ("meeting room", ["room 4B", "the Atlas room", "room 12", "the library room"],
     ["Our weekly meeting is in {v}.", "We meet in {v} every week.", "Standup is held in {v}."],
     ["The weekly meeting moved to {v}.", "We meet in {v} now.", "Meeting room changed to {v}."],
     ["Where is our weekly meeting?", "Which room do we meet in?"]),
    ("running goal", ["a 10k", "a half marathon", "a marathon", "a 5k under 25 minutes"],
     ["My running goal this year is {v}.", "I'm training for {v}.", "Target race: {v}."],
     ["I changed my running goal to {v}.", "New race target: {v}.",
      "Dropping {o}, I'm training for {v} instead."],
     ["What is my running goal?", "What race am I training for?"]),
]
_SMALL_TALK = [
    "Thanks, that helps.", "Good morning!", "Can you remind me later?", "Haha, fair enough.",
    "I'm a bit tired today.", "What's a good podcast?", "Let me think about it.",
    "Any tips for sleeping better?", "The weather is nice today.", "Okay, next question.",
]
_FILLER = [
    "It is worth writing such details down somewhere you will see them again.",
    "Many people find that a small routine makes these things easier to keep track of.",
    "If anything changes, just tell me and I will keep the newest information in mind.",
    "A calendar reminder a day ahead usually prevents surprises.",
    "There are a few practical points to consider before the day arrives.",
    "Planning a little buffer time tends to reduce stress for everyone involved.",
    "It can also help to share the plan with anyone else who depends on it.",
    "Let me know if you would like a checklist or a short summary of the options.",
    "Small adjustments like this are common, and it is sensible to revisit them now and then.",
    "You might also compare how this fits with the rest of your week.",
    "I can suggest some questions to ask so nothing important gets missed.",
    "Keeping notes in one place makes later decisions much quicker.",
]
_OTHERS = ["my sister", "my neighbour", "a colleague", "my brother"]


@dataclass(frozen=True, slots=True)
class Case:
    """One subject of one conversation: the messages holding the original and the correction."""

    user: str
    subject: str
    question: str
    original: tuple[str, str]  # (session id, message index)
    correction: tuple[str, str]
    same_session: bool


def _reply(rng: random.Random, subject: str) -> str:
    """A long assistant reply about the subject that never states a value."""
    n = rng.randint(9, 18)
    body = " ".join(rng.choice(_FILLER) for _ in range(n))
    opener = rng.choice([f"Noted about your {subject}.", f"Thanks for telling me about the {subject}.",
                         f"Understood, the {subject} matters.", "Got it."])
    extra = rng.choice([f" Regarding the {subject}, a couple of thoughts.", "", f" About your {subject}:"])
    return f"{opener}{extra} {body}"


GENERATORS = ("classic", "varied")


def generate(
    seed: int = 7, conversations: int = 40, subjects_per_conversation: int = 4, *, generator: str = "classic"
) -> list[Conversation]:
    """Deterministic conversations (same seed and generator → same text).

    `generator`: ``classic`` (the templates above, unchanged so every seed reproduces earlier
    reports) or ``varied`` (:mod:`mindpalace.eval.knowledge_update_varied`: LongMemEval-style
    counts, places, jobs, chains, updates inside long messages, paraphrased questions).

    Raises:
        ValueError: an unknown `generator`.
    """
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r}")
    if generator == "varied":
        from mindpalace.eval.knowledge_update_varied import generate_varied

        return generate_varied(seed, conversations, subjects_per_conversation)
    rng = random.Random(seed)
    start = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
    out = []
    for c in range(conversations):
        conv = Conversation(f"user-{c:03d}")
        picked = rng.sample(_SUBJECTS, subjects_per_conversation)
        finals: list[tuple[int, str, str, str, int]] = []
        # session layout: 3 sessions; originals in session 1–2, corrections later
        sessions: list[list[tuple[str, int | None, str]]] = [[], [], []]
        positions: dict[tuple[str, int], int] = {}
        for i, (subject, values, states, corrects, questions) in enumerate(picked):
            old, new = rng.sample(values, 2)
            s_orig = rng.randint(0, 1)
            s_corr = rng.choice([s_orig, s_orig + 1, 2])
            if rng.random() < 0.4:  # a near-miss statement about someone else, said first
                who = rng.choice(_OTHERS)
                other = rng.choice([v for v in values if v not in (old, new)] or [old])
                sessions[s_orig].append(("near", None, f"By the way, {who}'s {subject} is {other}."))
            sessions[s_orig].append(("orig", i, rng.choice(states).format(v=old, o=old)))
            sessions[s_corr].append(("corr", i, rng.choice(corrects).format(v=new, o=old)))
            finals.append((i, subject, rng.choice(questions), old, s_corr))
        for sess in sessions:
            for _ in range(rng.randint(3, 6)):
                sess.insert(rng.randint(0, len(sess)), ("talk", None, rng.choice(_SMALL_TALK)))
        # a correction must come after its original inside one session
        for sess in sessions:
            order = {j: pos for pos, (kind, j, _) in enumerate(sess) if kind == "orig" and j is not None}
            for pos, (kind, j, text) in enumerate(list(sess)):
                if kind == "corr" and j is not None and j in order and pos < order[j]:
                    sess.remove((kind, j, text))
                    sess.append((kind, j, text))
        when = start + timedelta(days=7 * c)
        for n, sess in enumerate(sessions):
            when += timedelta(days=3, hours=rng.randint(0, 5))
            for kind, j, text in sess:
                subject = picked[j][0] if j is not None else rng.choice(picked)[0]
                if j is not None:
                    positions[(kind, j)] = len(conv.messages)
                conv.messages.append(Message(f"s{n + 1}", "user", text, when))
                when += timedelta(minutes=1)
                conv.messages.append(Message(f"s{n + 1}", "assistant", _reply(rng, subject), when))
                when += timedelta(minutes=2)
        for i, subject, question, _, _ in finals:
            o, k = positions[("orig", i)], positions[("corr", i)]
            conv.cases.append((subject, question, o, k, conv.messages[o].session == conv.messages[k].session))
        out.append(conv)
    return out


@dataclass(slots=True)
class MethodScore:
    name: str
    cases: int = 0
    correction_first: int = 0
    recall: dict[int, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return 100.0 * self.correction_first / max(1, self.cases)

    def recall_rate(self, k: int) -> float:
        return 100.0 * self.recall.get(k, 0) / max(1, self.cases)


@dataclass(slots=True)
class KnowledgeUpdateReport:
    embedder: str
    conversations: int
    cases: int
    messages: int
    methods: list[MethodScore]
    ingest_seconds: float
    ks: tuple[int, ...]
    marked: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "embedder": self.embedder, "conversations": self.conversations, "cases": self.cases,
            "messages": self.messages, "ingest_seconds": round(self.ingest_seconds, 2),
            "superseded_marked": self.marked,
            "methods": [
                {"name": m.name, "correction_first": round(m.rate, 1),
                 "recall": {str(k): round(m.recall_rate(k), 1) for k in self.ks}}
                for m in self.methods
            ],
        }


Ranker = Callable[[Memory, str, str], list[tuple[str, str]]]


def _product(memory: Memory, user: str, question: str, k: int) -> tuple[list[tuple[str, str]], int]:
    hits = memory.session("ask", user=user, agent=AGENT).recall(question, k=k)
    marked = sum(1 for h in hits if h.meta.get("superseded_by"))
    return [(str(h.scope.session), h.ref) for h in hits if h.tier == "message"], marked


def _dense(memory: Memory, user: str, question: str, k: int) -> list[tuple[str, str]]:
    emb = memory.embedder
    assert emb is not None
    scope = memory.scope(user=user, agent=AGENT).with_(session=ANY)
    hits = memory.store.vector_search(scope, emb.embed_query(question), emb.model_id, k=k, kinds=["message"])
    return [(str(h.doc.scope.session), h.doc.ref) for h in hits]


def _bm25(memory: Memory, user: str, question: str, k: int) -> list[tuple[str, str]]:
    scope = memory.scope(user=user, agent=AGENT).with_(session=ANY)
    hits = memory.store.keyword_search(scope, question, k=k, kinds=["message"])
    return [(str(h.doc.scope.session), h.doc.ref) for h in hits]


def run_knowledge_update(
    *,
    seed: int = 7,
    conversations: int = 40,
    embedder: str | None = None,
    ks: tuple[int, ...] = (1, 5, 10),
    fact_overrides: dict[str, Any] | None = None,
    generator: str = "classic",
) -> KnowledgeUpdateReport:
    """Generate (`generator`: see :func:`generate`), ingest (one scope per user, messages with
    timestamps) and score the set. A case passes a method when the correction is in its list
    above every older value (absent older values count as below)."""
    convs = generate(seed, conversations, generator=generator)
    overrides: dict[str, Any] = {}
    if embedder is not None:
        overrides["embed"] = {"provider": embedder}
    if fact_overrides:
        overrides["facts"] = fact_overrides
    with tempfile.TemporaryDirectory(prefix="mindpalace-ku-") as tmp, \
            Memory.open(Path(tmp) / "ws", **overrides) as memory:
        t0 = time.perf_counter()
        where: dict[str, list[tuple[str, str]]] = {}
        for conv in convs:
            refs: list[tuple[str, str]] = []
            by_session: dict[str, list[Message]] = {}
            for m in conv.messages:
                by_session.setdefault(m.session, []).append(m)
            for sid, msgs in by_session.items():
                session = memory.session(sid, user=conv.user, agent=AGENT)
                idx = session.messages.add_many(
                    [{"role": m.role, "content": m.text} for m in msgs], timestamps=[m.when for m in msgs]
                )
                refs += [(session.id, str(i)) for i in idx]
            where[conv.user] = refs
        if memory.embedder is not None:
            memory.retriever.sync_embeddings()
        ingest = time.perf_counter() - t0
        limit = max(ks)
        methods = [MethodScore("mindpalace recall")]
        if memory.embedder is not None:
            methods.append(MethodScore(f"dense only ({memory.embedder.model_id})"))
        methods.append(MethodScore("BM25 only (same store)"))
        marked = 0
        for conv in convs:
            refs = where[conv.user]
            for n_case, (_subject, question, o, c, _same) in enumerate(conv.cases):
                olds = [refs[p] for p in (conv.stale[n_case] if conv.stale else (o,))]
                correction = refs[c]
                product, n_marked = _product(memory, conv.user, question, limit)
                marked += n_marked
                lists = [product]
                if memory.embedder is not None:
                    lists.append(_dense(memory, conv.user, question, limit))
                lists.append(_bm25(memory, conv.user, question, limit))
                for score, ranked in zip(methods, lists, strict=True):
                    score.cases += 1
                    pc = ranked.index(correction) if correction in ranked else None
                    if pc is not None and all(old not in ranked[:pc] for old in olds):
                        score.correction_first += 1
                    for k in ks:
                        if pc is not None and pc < k:
                            score.recall[k] = score.recall.get(k, 0) + 1
        emb_id = memory.embedder.model_id if memory.embedder else "none"
        return KnowledgeUpdateReport(
            emb_id, len(convs), sum(len(c.cases) for c in convs),
            sum(len(c.messages) for c in convs), methods, ingest, ks, marked,
        )
