"""LoCoMo evidence recall@k through the product's recall path, with BM25 and dense baselines.

LoCoMo (Maharana et al., ACL 2024; ``../shared/data/locomo/locomo10.json``, CC BY-NC 4.0,
evaluation only) has 10 long conversations and 1,986 questions, each naming the turns
(``dia_id``) that hold its evidence. Each conversation is ingested into its own scope the way
an agent would (every turn a session message with the speaker as ``name`` and the session date
as timestamp; one mindpalace session per LoCoMo session; nothing from the QA is visible to
ingestion). Each question then goes through :meth:`Session.recall` and the ranked message hits
are mapped back to turn ids.

Scoring follows ``../shared/data/README.md``: evidence strings split on ``[;,\\s]+``; ids that
resolve to no turn are dropped and questions left without evidence skipped (1,981 remain).
For k in ``ks``: R@k = |evidence ∩ top-k| / |evidence| averaged over questions (the paper's
R@k), all@k = share of questions with *all* evidence in the top-k, and MRR = mean reciprocal
rank of the first evidence turn within the top max(ks). Tuning is allowed on the dev split
(conv-26, conv-30) only; the other eight are the held-out figure. Beside the product row:
the dense-only and the BM25-only lists of the same store, and the data README's plain BM25.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from mindpalace.errors import ValidationError
from mindpalace.memory import Memory
from mindpalace.retrieval.hybrid import dense_query, speaker_names
from mindpalace.scope import ANY
from mindpalace.store.textindex import STOP_WORDS

DEFAULT_KS = (1, 5, 10, 25, 50)
DEV_CONVERSATIONS = ("conv-26", "conv-30")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
AGENT = "locomo"
_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")
_BM25_TOKEN = re.compile(r"[a-z0-9]+")
BM25_K1 = 1.2  # the data README's baseline settings
BM25_B = 0.75

Progress = Callable[[str, int, int], None]
"""progress(phase, done, total) — called as ingestion and questions advance."""


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    session: int
    date: datetime
    caption: str = ""


@dataclass(frozen=True, slots=True)
class Question:
    question: str
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    skipped_ids: int = 0
    skipped_questions: int = 0


def parse_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → aware datetime (the dataset gives no zone; read as UTC).

    Raises ValidationError naming the text when it has another format."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValidationError(f"LoCoMo session date {text!r} is not like '1:56 pm on 8 May, 2023'") from exc


def split_evidence(items: Iterable[str]) -> list[str]:
    """Evidence ids from the raw list (entries like ``"D8:6; D9:17"`` hold several), in order,
    without duplicates."""
    ids = [e for item in items for e in _EVIDENCE_SPLIT.split(str(item)) if e]
    return list(dict.fromkeys(ids))


def load_locomo(path: str | Path) -> list[Conversation]:
    """Parse ``locomo10.json`` (iterating ``session_<N>`` keys, not date keys).

    Raises:
        ValidationError: the file is missing or not LoCoMo-shaped (the message says how to get it).
    """
    file = Path(path)
    if not file.is_file():
        raise ValidationError(
            f"LoCoMo data not found at {file}: download locomo10.json from the LoCoMo repository "
            "(snap-research/locomo, data/locomo10.json) and pass --data PATH"
        )
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
        return [_conversation(sample) for sample in raw]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValidationError(f"{file}: not a LoCoMo file ({exc})") from exc


def _conversation(sample: dict[str, Any]) -> Conversation:
    conv = sample["conversation"]
    numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION_KEY.fullmatch(key)))
    turns = [
        Turn(
            t["dia_id"], t["speaker"], t["text"], n, parse_date(conv[f"session_{n}_date_time"]),
            t.get("blip_caption") or "",
        )
        for n in numbers
        for t in conv[f"session_{n}"]
    ]
    known = {t.dia_id for t in turns}
    questions, skipped_ids, skipped_questions = [], 0, 0
    for qa in sample["qa"]:
        ids = split_evidence(qa.get("evidence") or [])
        good = tuple(e for e in ids if e in known)
        skipped_ids += len(ids) - len(good)
        if not good:
            skipped_questions += 1
            continue
        questions.append(Question(qa["question"], good, int(qa["category"])))
    return Conversation(sample["sample_id"], tuple(turns), tuple(questions), skipped_ids, skipped_questions)


# -- scoring ---------------------------------------------------------------------------------
@dataclass(slots=True)
class QuestionScore:
    conversation: str
    category: int
    recall: dict[int, float]
    recall_all: dict[int, float]
    reciprocal_rank: float


def score_ranking(
    conversation: str, question: Question, ranked: Sequence[str], ks: Sequence[int]
) -> QuestionScore:
    """Score one ranked list of turn ids (best first, duplicates ignored) against the evidence."""
    order = list(dict.fromkeys(ranked))
    evidence = set(question.evidence)
    recall, recall_all = {}, {}
    for k in ks:
        found = len(evidence & set(order[:k]))
        recall[k] = found / len(evidence)
        recall_all[k] = 1.0 if found == len(evidence) else 0.0
    limit = max(ks)
    rank = next((i for i, d in enumerate(order[:limit], 1) if d in evidence), None)
    return QuestionScore(conversation, question.category, recall, recall_all, 1.0 / rank if rank else 0.0)


@dataclass(slots=True)
class Summary:
    """Means (in %, MRR as 0–1) over a set of questions."""

    questions: int
    recall: dict[int, float]
    recall_all: dict[int, float]
    mrr: float

    def to_json(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "recall": {str(k): round(v, 2) for k, v in self.recall.items()},
            "recall_all": {str(k): round(v, 2) for k, v in self.recall_all.items()},
            "mrr": round(self.mrr, 4),
        }


def summarize(scores: Sequence[QuestionScore], ks: Sequence[int]) -> Summary:
    """Average question scores (R@k and all@k in percent)."""
    if not scores:
        return Summary(0, {k: 0.0 for k in ks}, {k: 0.0 for k in ks}, 0.0)
    return Summary(
        len(scores),
        {k: 100 * float(np.mean([s.recall[k] for s in scores])) for k in ks},
        {k: 100 * float(np.mean([s.recall_all[k] for s in scores])) for k in ks},
        float(np.mean([s.reciprocal_rank for s in scores])),
    )


@dataclass(slots=True)
class MethodResult:
    """One retrieval method's scores: overall, dev, held-out and per category."""

    name: str
    settings: str
    overall: Summary
    dev: Summary
    held_out: Summary
    by_category: dict[str, Summary]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "settings": self.settings,
            "overall": self.overall.to_json(),
            "dev": self.dev.to_json(),
            "held_out": self.held_out.to_json(),
            "by_category": {c: s.to_json() for c, s in self.by_category.items()},
            "seconds": round(self.seconds, 2),
        }


def method_result(
    name: str, settings: str, scores: Sequence[QuestionScore], ks: Sequence[int], seconds: float
) -> MethodResult:
    dev = [s for s in scores if s.conversation in DEV_CONVERSATIONS]
    held = [s for s in scores if s.conversation not in DEV_CONVERSATIONS]
    cats = {
        CATEGORIES.get(c, str(c)): summarize([s for s in scores if s.category == c], ks)
        for c in sorted({s.category for s in scores})
    }
    return MethodResult(name, settings, summarize(scores, ks), summarize(dev, ks), summarize(held, ks), cats, seconds)


# -- the product path ------------------------------------------------------------------------
def turn_content(turn: Turn, *, captions: bool) -> str:
    """What the agent saw of a turn: its text, plus the caption of a shared photo."""
    if captions and turn.caption:
        return f"{turn.text} [shares a photo: {turn.caption}]"
    return turn.text


def ingest(
    memory: Memory, conv: Conversation, *, captions: bool = True
) -> dict[tuple[str, str], str]:
    """Write a conversation as session messages (user = sample id, one session per LoCoMo
    session); returns {(session id, message index): dia_id} for mapping hits back."""
    by_session: dict[int, list[Turn]] = defaultdict(list)
    for t in conv.turns:
        by_session[t.session].append(t)
    where: dict[tuple[str, str], str] = {}
    for number, turns in sorted(by_session.items()):
        session = memory.session(f"session_{number}", user=conv.sample_id, agent=AGENT)
        indexes = session.messages.add_many(
            [{"role": "user", "name": t.speaker, "content": turn_content(t, captions=captions)} for t in turns],
            timestamps=[t.date for t in turns],
        )
        for t, index in zip(turns, indexes, strict=True):
            where[(session.id, str(index))] = t.dia_id
    return where


def recall_ranking(memory: Memory, conv: Conversation, question: Question, where: dict[tuple[str, str], str], k: int) -> list[str]:
    """Turn ids for `question`, best first, through ``Session.recall`` (message hits only)."""
    session = memory.session("qa", user=conv.sample_id, agent=AGENT)
    hits = session.recall(question.question, k=k)
    return [
        where[(str(h.scope.session), h.ref)] for h in hits
        if h.tier == "message" and (str(h.scope.session), h.ref) in where
    ]


def dense_ranking(memory: Memory, conv: Conversation, question: Question, where: dict[tuple[str, str], str], k: int) -> list[str]:
    """Dense-only baseline: the store's exact cosine search with the configured embedder over
    the same message documents (no keyword list, no fusion, no context scoring), for the text
    the product embeds for its vector list (:func:`~mindpalace.retrieval.hybrid.dense_query`:
    without the speaker names of the keyword hits, as a statement, per the ``facts`` settings):
    the vector list that ``Session.recall`` fuses."""
    embedder = memory.embedder
    assert embedder is not None
    scope = memory.scope(user=conv.sample_id, agent=AGENT).with_(session=ANY)
    facts = memory.settings.facts
    names = speaker_names(
        h.doc for h in memory.store.keyword_search(
            scope, question.question, k=max(k, facts.recall_candidates), kinds=["message"]
        )
    )
    text = dense_query(question.question, names, facts)
    hits = memory.store.vector_search(scope, embedder.embed_query(text), embedder.model_id, k=k, kinds=["message"])
    return [where[(str(h.doc.scope.session), h.doc.ref)] for h in hits if (str(h.doc.scope.session), h.doc.ref) in where]


def keyword_ranking(memory: Memory, conv: Conversation, question: Question, where: dict[tuple[str, str], str], k: int) -> list[str]:
    """BM25-only list of the same store (the product's keyword list: FTS5 word index, porter
    stemming, statistics of the conversation's scope), without fusion or context scoring."""
    scope = memory.scope(user=conv.sample_id, agent=AGENT).with_(session=ANY)
    hits = memory.store.keyword_search(scope, question.question, k=k, kinds=["message"])
    return [where[(str(h.doc.scope.session), h.doc.ref)] for h in hits if (str(h.doc.scope.session), h.doc.ref) in where]


# -- BM25 baseline ---------------------------------------------------------------------------
def bm25_tokens(text: str) -> list[str]:
    """Lower-case ``[a-z0-9]+`` tokens minus the short English stop list."""
    return [w for w in _BM25_TOKEN.findall(text.lower()) if w not in STOP_WORDS]


class BM25:
    """Plain Okapi BM25 in numpy (k1 1.2, b 0.75, idf = ln(1 + (N − n + 0.5)/(n + 0.5))).

    The data README's baseline; implemented here in a few lines rather than via a package so
    its settings are exactly the stated ones.
    """

    def __init__(self, docs: Sequence[str], *, k1: float = BM25_K1, b: float = BM25_B) -> None:
        self.k1, self.b = k1, b
        toks = [bm25_tokens(d) for d in docs]
        self.vocab = {w: i for i, w in enumerate(sorted({w for t in toks for w in t}))}
        self.tf = np.zeros((len(docs), len(self.vocab)), dtype=np.float32)
        for row, t in enumerate(toks):
            for w, n in Counter(t).items():
                self.tf[row, self.vocab[w]] = n
        df = (self.tf > 0).sum(axis=0)
        n_docs = len(docs)
        self.idf = np.log(1 + (n_docs - df + 0.5) / (df + 0.5))
        lengths = self.tf.sum(axis=1)
        self.norm = k1 * (1 - b + b * lengths / max(float(lengths.mean()), 1e-9))

    def scores(self, query: str) -> np.ndarray:
        cols = [self.vocab[w] for w in set(bm25_tokens(query)) if w in self.vocab]
        if not cols:
            return np.zeros(self.tf.shape[0], dtype=np.float32)
        tf = self.tf[:, cols]
        return (self.idf[cols] * tf * (self.k1 + 1) / (tf + self.norm[:, None])).sum(axis=1)


def bm25_rankings(conv: Conversation, k: int) -> list[list[str]]:
    """BM25 baseline over ``speaker: text`` turns, one ranking per question."""
    bm = BM25([f"{t.speaker}: {t.text}" for t in conv.turns])
    ids = [t.dia_id for t in conv.turns]
    out = []
    for q in conv.questions:
        s = bm.scores(q.question)
        order = np.argsort(-s, kind="stable")[:k]
        out.append([ids[i] for i in order if s[i] > 0])
    return out


# -- the whole run ---------------------------------------------------------------------------
@dataclass(slots=True)
class LocomoReport:
    data: str
    embedder: str
    ks: list[int]
    conversations: int
    questions: int
    skipped_evidence_ids: int
    skipped_questions: int
    methods: list[MethodResult] = field(default_factory=list)
    measured_at: str = ""
    ingest_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "data": self.data,
            "embedder": self.embedder,
            "ks": self.ks,
            "conversations": self.conversations,
            "questions": self.questions,
            "skipped_evidence_ids": self.skipped_evidence_ids,
            "skipped_questions": self.skipped_questions,
            "dev_conversations": list(DEV_CONVERSATIONS),
            "measured_at": self.measured_at,
            "ingest_seconds": round(self.ingest_seconds, 2),
            "methods": [m.to_json() for m in self.methods],
        }


def run_locomo(
    data: str | Path,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    embedder: str | None = None,
    conversations: Sequence[str] | None = None,
    workspace: str | Path | None = None,
    captions: bool = True,
    baselines: bool = True,
    fact_overrides: dict[str, Any] | None = None,
    embed_overrides: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> LocomoReport:
    """Run the evaluation; returns the report (the CLI prints and saves it).

    Args:
        data: path to ``locomo10.json``.
        ks: cut-offs (positive, any order).
        embedder: ``embed.provider`` override (``use``, ``e5``, ``hashing``, ``none``); None
            = the workspace default.
        conversations: sample ids to keep (None = all ten).
        workspace: where to build the store (None = a temporary folder, removed afterwards).
        captions: include the caption of shared photos in a turn's message.
        baselines: also run plain BM25 and dense-only.
        fact_overrides: ``facts`` settings for the product run (e.g. fusion weights).
        embed_overrides: ``embed`` settings (e.g. ``{"context_turns": 1}``); `embedder`, when
            given, sets the provider over them.
        progress: callback (phase, done, total).
    Raises:
        ValidationError: bad data path / format, bad ks, unknown conversation id.
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValidationError(f"--k values must be positive integers, got {ks}")
    convs = load_locomo(data)
    if conversations:
        unknown = set(conversations) - {c.sample_id for c in convs}
        if unknown:
            raise ValidationError(f"unknown conversation ids {sorted(unknown)}")
        convs = [c for c in convs if c.sample_id in set(conversations)]
    overrides: dict[str, Any] = {}
    embed = dict(embed_overrides or {})
    if embedder is not None:
        embed["provider"] = embedder
    if embed:
        overrides["embed"] = embed
    if fact_overrides:
        overrides["facts"] = fact_overrides
    with (
        tempfile.TemporaryDirectory(prefix="mindpalace-locomo-") as tmp,
        Memory.open(Path(workspace) if workspace else Path(tmp) / "ws", **overrides) as memory,
    ):
        return _run(memory, convs, ks, str(data), captions, baselines, progress)


def _run(
    memory: Memory,
    convs: list[Conversation],
    ks: list[int],
    data: str,
    captions: bool,
    baselines: bool,
    progress: Progress | None,
) -> LocomoReport:
    notify = progress or (lambda phase, done, total: None)
    emb = memory.embedder
    report = LocomoReport(
        data, emb.model_id if emb else "none", ks, len(convs),
        sum(len(c.questions) for c in convs), sum(c.skipped_ids for c in convs),
        sum(c.skipped_questions for c in convs),
        measured_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    start = time.perf_counter()
    where: dict[str, dict[tuple[str, str], str]] = {}
    total_turns = sum(len(c.turns) for c in convs)
    done = 0
    for conv in convs:
        where[conv.sample_id] = ingest(memory, conv, captions=captions)
        done += len(conv.turns)
        notify("ingest", done, total_turns)
    if emb is not None:
        notify("embed", 0, 1)
        memory.retriever.sync_embeddings()
        notify("embed", 1, 1)
    report.ingest_seconds = time.perf_counter() - start
    limit = max(ks)
    s = memory.settings.facts
    fusion = (
        f"{s.fusion} fusion (bm25 ×{s.keyword_weight}, vector ×{s.vector_weight if emb else 0}), "
        f"{s.recall_candidates} candidates/list, neighbours {s.neighbor_weights}, "
        f"speaker ×{1 + s.speaker_boost:g}, captions {'on' if captions else 'off'}"
    )
    runs: list[tuple[str, str, Callable[[Conversation, Question], list[str]]]] = [
        ("mindpalace recall", fusion,
         lambda c, q: recall_ranking(memory, c, q, where[c.sample_id], limit)),
    ]
    if baselines and emb is not None:
        runs.append((f"dense only ({emb.model_id})", "exact cosine over the same message documents ('speaker: text' + photo caption), "
                     "for the query text the product embeds (dense_query)",
                     lambda c, q: dense_ranking(memory, c, q, where[c.sample_id], limit)))
    if baselines:
        runs.append(("BM25 only (same store)", "the store's keyword list alone: FTS5 porter tokens, "
                     "Okapi BM25 k1 1.2 b 0.75 with the conversation scope's statistics",
                     lambda c, q: keyword_ranking(memory, c, q, where[c.sample_id], limit)))
    n_questions = sum(len(c.questions) for c in convs)
    for name, desc, rank in runs:
        t0, scores = time.perf_counter(), []
        for conv in convs:
            for q in conv.questions:
                scores.append(score_ranking(conv.sample_id, q, rank(conv, q), ks))
                notify(name, len(scores), n_questions)
        report.methods.append(method_result(name, desc, scores, ks, time.perf_counter() - t0))
    if baselines:
        t0, scores = time.perf_counter(), []
        for conv in convs:
            for q, ranked in zip(conv.questions, bm25_rankings(conv, limit), strict=True):
                scores.append(score_ranking(conv.sample_id, q, ranked, ks))
            notify("bm25", len(scores), n_questions)
        report.methods.append(method_result(
            "BM25 baseline (data README)", f"numpy Okapi BM25 k1 {BM25_K1}, b {BM25_B}, idf ln(1+(N-n+.5)/(n+.5)), "
            f"[a-z0-9]+ tokens, {len(STOP_WORDS)} stop words, 'speaker: text'",
            scores, ks, time.perf_counter() - t0,
        ))
    return report


def published_reference() -> dict[str, dict[int, float]]:
    """Published turn-level figures (LoCoMo paper Table 3 / data README), for the table."""
    return {"DRAGON (LoCoMo paper)": {5: 56.7, 10: 66.2, 25: 76.7, 50: 82.7}}

