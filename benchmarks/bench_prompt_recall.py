"""Does the prompt carry the memory that answers the question? LoCoMo, through ``Session.prepare``.

For every LoCoMo question of categories 1–4 (multi-hop, temporal, open-domain, single-hop;
``locomo/locomo10.json``, evaluation only) the conversation is in ONE session as an agent
would have it — every turn a message (the conversation's first speaker → ``user``, the other →
``assistant``) with the speaker as ``name`` and the LoCoMo session date as its timestamp — the
question is appended last as a ``user`` message, and the prompt of the turn call
``Session.prepare(budget)`` is inspected (consolidation runs with the offline extractive
summarizer). Each conversation is ingested once per budget (its own user, so recall never sees
another copy) and its questions are appended one after another (question i's prompt also holds
questions 1…i−1 as earlier messages; the answers are never ingested).

Measures, per category and per budget, on the text of the prompt's messages:

- evidence containment: share of the question's gold evidence turns whose text is in the
  prompt verbatim (averaged over questions); ``all ev.`` = questions with every turn present;
- answer containment: the normalised gold answer (lower case, punctuation and articles
  a/an/the removed, whitespace collapsed) is a substring of the normalised prompt text.

Baselines in the same run, at the same budgets (each counted with the same token counter,
question included):

- ``newest messages``: the newest turns (then the question) that fit the budget;
- ``BM25 turns``: turns ranked by Okapi BM25 for the question (``mindpalace.eval.locomo.BM25``,
  k1 1.2, b 0.75, over ``speaker: text``) packed best first into one message until the budget;
- ``recall packed``: this engine's ``Session.recall(question, k=50)`` hits packed best first
  the same way (recalled once per question in a session holding just the conversation);
- ``whole conversation``: every turn with its session date, no budget (the ceiling).

Dev conversations (conv-26, conv-30, where the defaults were tuned) and the held-out eight are
reported apart. ``--dump PATH`` (a diagnostic, for the dev conversations) writes every prompt
of every method with the gold turns it holds (and prepare's report rows and recalled items),
to list the questions one method holds a gold turn for and another does not.

    python benchmarks/bench_prompt_recall.py --fast
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import string
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.eval.locomo import (
    BM25,
    CATEGORIES,
    DEV_CONVERSATIONS,
    Conversation,
    Turn,
    load_locomo,
    split_evidence,
    turn_content,
)
from mindpalace.providers.embed.base import Embedder
from mindpalace.recalled import human_date
from mindpalace.tokens import TokenCounter

REPO = Path(__file__).resolve().parents[1]
RECALL_K = 50
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—"})
_ARTICLES = re.compile(r"\b(a|an|the)\b")
METHODS = ("mindpalace prepare", "newest messages", "BM25 turns", "recall packed")


def normalise(text: str) -> str:
    """Lower case, punctuation and the articles a/an/the removed, whitespace collapsed."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    evidence: tuple[str, ...]
    category: int


@dataclass
class Score:
    evidence: float
    all_evidence: bool
    answer: bool
    tokens: int


@dataclass
class Results:
    # (method, budget) -> conversation -> category -> scores
    scores: dict[tuple[str, int], dict[str, dict[int, list[Score]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    prepare_ms: list[float] = field(default_factory=list)
    dump: list[dict[str, Any]] | None = None  # every prompt, scored (--dump), else None

    def record(self, method: str, budget: int, conv: str, qa: QA, text: str, found: Score,
               turns: dict[str, Turn], report: Any = None) -> None:
        """Add `found` and, with --dump, the prompt itself: which gold turns it holds, the
        prompt's rows and recalled items (prepare), to see why one method holds a turn another
        does not."""
        self.add(method, budget, conv, qa.category, found)
        if self.dump is None:
            return
        row: dict[str, Any] = {
            "method": method, "budget": budget, "conversation": conv, "question": qa.question,
            "answer": qa.answer, "evidence": list(qa.evidence), "held": [turns[e].text in text for e in qa.evidence],
            "answer_held": found.answer, "tokens": found.tokens, "text": text}
        if report is not None:
            row["blocks"] = report.blocks
            row["recalled"] = [item.ref for item in report.recalled]
        self.dump.append(row)

    def add(self, method: str, budget: int, conv: str, category: int, score: Score) -> None:
        self.scores[(method, budget)][conv][category].append(score)

    def to_json(self) -> dict[str, Any]:
        """Every question's scores, so runs over parts of the data can be merged (--merge)."""
        flat = [[m, b, c, cat, s.evidence, s.all_evidence, s.answer, s.tokens]
                for (m, b), convs in self.scores.items() for c, cats in convs.items()
                for cat, ss in cats.items() for s in ss]
        return {"scores": flat, "seconds": dict(self.seconds), "prepare_ms": self.prepare_ms}

    def merge(self, data: dict[str, Any]) -> None:
        for m, b, c, cat, ev, all_ev, ans, tokens in data["scores"]:
            self.add(m, b, c, cat, Score(ev, all_ev, ans, tokens))
        for k, v in data["seconds"].items():
            self.seconds[k] += v
        self.prepare_ms += data["prepare_ms"]


class CachingEmbedder(Embedder):
    """The configured embedder with a per-run cache by (text, query): the conversation is
    ingested once per budget, and a deterministic embedder gives the same vector for the same
    text, so each text is embedded once per run (timings exclude repeated embedding)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.batch_size = inner.batch_size
        self.cache: dict[tuple[str, bool], np.ndarray] = {}

    @property
    def dim(self) -> int:
        return self.inner.dim

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if (t, query) not in self.cache))
        if missing:
            vectors = self.inner._embed_batch(missing, query=query)
            for t, v in zip(missing, np.asarray(vectors, dtype=np.float32), strict=True):
                self.cache[(t, query)] = v
        return np.stack([self.cache[(t, query)] for t in texts])


def questions(raw: dict[str, Any], conv: Conversation) -> list[QA]:
    """Categories 1–4 with resolvable evidence and an answer, in file order."""
    known = {t.dia_id for t in conv.turns}
    out = []
    for qa in raw["qa"]:
        category = int(qa["category"])
        evidence = tuple(e for e in split_evidence(qa.get("evidence") or []) if e in known)
        if category not in (1, 2, 3, 4) or not evidence or "answer" not in qa:
            continue
        out.append(QA(qa["question"], str(qa["answer"]), evidence, category))
    return out


def score(prompt_text: str, qa: QA, turns: dict[str, Turn], tokens: int) -> Score:
    found = [turns[e].text in prompt_text for e in qa.evidence]
    answer = normalise(qa.answer)
    return Score(sum(found) / len(found), all(found), bool(answer) and answer in normalise(prompt_text), tokens)


def prompt_text(messages: Sequence[dict[str, Any]]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def pack(counter: TokenCounter, lines: Sequence[str], question: str, budget: int) -> tuple[str, int]:
    """Lines best first into one message beside the question, skipping what does not fit."""
    q = {"role": "user", "content": question}
    used = counter.count_messages([{"role": "user", "content": ""}, q])
    chosen: list[str] = []
    for line in lines:
        t = counter.count(line) + 1
        if used + t <= budget:
            chosen.append(line)
            used += t
    text = "\n".join(chosen)
    return text, counter.count_messages([{"role": "user", "content": text}, q])


def run_conversation(
    memory: Memory, raw: dict[str, Any], conv: Conversation, budgets: Sequence[int], limit: int | None,
    results: Results, *, baselines: bool = True,
) -> None:
    counter = memory.tokens
    qas = questions(raw, conv)[:limit]
    turns = {t.dia_id: t for t in conv.turns}
    first = conv.turns[0].speaker
    msgs = [{"role": "user" if t.speaker == first else "assistant", "name": t.speaker,
             "content": turn_content(t, captions=True)} for t in conv.turns]
    stamps = [t.date for t in conv.turns]
    asked_at = conv.turns[-1].date
    name = conv.sample_id
    if baselines:  # the ceiling: every turn with its session date, no budget
        by_session: dict[int, list[Turn]] = defaultdict(list)
        for t in conv.turns:
            by_session[t.session].append(t)
        whole = "\n".join(f"[{human_date(ts[0].date)}]\n" + "\n".join(
            f"{t.speaker}: {turn_content(t, captions=True)}" for t in ts) for _, ts in sorted(by_session.items()))
        whole_tokens = counter.count(whole)
        bm = BM25([f"{t.speaker}: {t.text}" for t in conv.turns])
        plain = memory.session("chat", user=f"{name}-recall", agent="locomo")
        plain.messages.add_many(msgs, timestamps=stamps)
        recalled: list[list[str]] = []
        t0 = time.perf_counter()
        for qa in qas:  # the hits do not depend on the budget: recalled once, packed per budget
            results.add("whole conversation", 0, name, qa.category, score(whole, qa, turns, whole_tokens))
            recalled.append([h.text for h in plain.recall(qa.question, k=RECALL_K)])
        results.seconds["recall packed"] += time.perf_counter() - t0
    for budget in budgets:
        session = memory.session("chat", user=f"{name}-{budget}", agent="locomo")
        t0 = time.perf_counter()
        session.messages.add_many(msgs, timestamps=stamps)
        results.seconds["ingest"] += time.perf_counter() - t0
        asked: list[dict[str, Any]] = []
        for n, qa in enumerate(qas):
            session.add_message({"role": "user", "content": qa.question}, timestamp=asked_at)
            t0 = time.perf_counter()
            built = session.prepare(budget)
            ms = (time.perf_counter() - t0) * 1000
            results.prepare_ms.append(ms)
            results.seconds["mindpalace prepare"] += ms / 1000
            assert built.report.total_tokens <= budget
            text = prompt_text(built.messages)
            results.record("mindpalace prepare", budget, name, qa, text,
                           score(text, qa, turns, built.report.total_tokens), turns, built.report)
            asked.append({"role": "user", "content": qa.question})
            if not baselines:
                continue
            t0 = time.perf_counter()  # newest messages (turns, earlier questions, the question)
            window: list[dict[str, Any]] = []
            for m in reversed(msgs + asked):
                if counter.count_messages([m, *window]) > budget:
                    break
                window.insert(0, m)
            text = prompt_text(window)
            results.record("newest messages", budget, name, qa, text,
                           score(text, qa, turns, counter.count_messages(window)), turns)
            results.seconds["newest messages"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            s = bm.scores(qa.question)
            order = [i for i in np.argsort(-s, kind="stable") if s[i] > 0]
            lines = [f"{conv.turns[i].speaker}: {conv.turns[i].text}" for i in order]
            text, tokens = pack(counter, lines, qa.question, budget)
            results.record("BM25 turns", budget, name, qa, text, score(text, qa, turns, tokens), turns)
            results.seconds["BM25 turns"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            text, tokens = pack(counter, recalled[n], qa.question, budget)
            results.record("recall packed", budget, name, qa, text, score(text, qa, turns, tokens), turns)
            results.seconds["recall packed"] += time.perf_counter() - t0


def mean(scores: list[Score], attr: str) -> float:
    return 100 * statistics.fmean(float(getattr(s, attr)) for s in scores) if scores else 0.0


def rows(results: Results, budgets: Sequence[int]) -> list[dict[str, Any]]:
    out = []
    keys = [(m, b) for b in budgets for m in METHODS if (m, b) in results.scores]
    if ("whole conversation", 0) in results.scores:
        keys.append(("whole conversation", 0))
    for method, budget in keys:
        by_conv = results.scores[(method, budget)]
        for split, convs in (("all", list(by_conv)), ("dev", [c for c in by_conv if c in DEV_CONVERSATIONS]),
                             ("held-out", [c for c in by_conv if c not in DEV_CONVERSATIONS])):
            flat = [s for c in convs for cat in by_conv[c].values() for s in cat]
            if not flat:
                continue
            row: dict[str, Any] = {
                "method": method, "budget": budget or None, "split": split, "questions": len(flat),
                "evidence": round(mean(flat, "evidence"), 1), "all_evidence": round(mean(flat, "all_evidence"), 1),
                "answer": round(mean(flat, "answer"), 1),
                "mean_tokens": round(statistics.fmean(s.tokens for s in flat)),
            }
            for cat in (1, 2, 3, 4):
                cs = [s for c in convs for s in by_conv[c].get(cat, [])]
                row[f"evidence_{CATEGORIES[cat]}"] = round(mean(cs, "evidence"), 1)
                row[f"answer_{CATEGORIES[cat]}"] = round(mean(cs, "answer"), 1)
            out.append(row)
    return out


def table(all_rows: list[dict[str, Any]], split: str, title: str) -> Table:
    t = Table(title=title)
    for col in ("method", "budget", "q", "evidence %", "all ev. %", "answer %",
                *(f"ev/ans {CATEGORIES[c]}" for c in (1, 2, 3, 4)), "mean tokens"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for r in all_rows:
        if r["split"] != split:
            continue
        t.add_row(r["method"], str(r["budget"] or "none"), str(r["questions"]), f"{r['evidence']:.1f}",
                  f"{r['all_evidence']:.1f}", f"{r['answer']:.1f}",
                  *(f"{r[f'evidence_{CATEGORIES[c]}']:.1f} / {r[f'answer_{CATEGORIES[c]}']:.1f}" for c in (1, 2, 3, 4)),
                  str(r["mean_tokens"]))
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("MINDPALACE_SHARED_DATA", REPO.parent / "shared" / "data")))
    ap.add_argument("--budgets", type=int, nargs="+", default=[1_000, 2_000, 4_000])
    ap.add_argument("--conversations", nargs="*", default=None, help="sample ids (default all ten)")
    ap.add_argument("--questions", type=int, default=None, help="first N questions per conversation")
    ap.add_argument("--embed", default=None, help="embed.provider override (default: the workspace default)")
    ap.add_argument("--context", default=None, help='JSON [context] overrides, e.g. {"recall_share": 0.6}')
    ap.add_argument("--no-baselines", action="store_true")
    ap.add_argument("--fast", action="store_true", help="conv-26, 12 questions, 2,000 tokens, hashing embedder")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    ap.add_argument("--scores", type=Path, default=None, help="write every question's scores here")
    ap.add_argument("--dump", type=Path, default=None,
                    help="write every prompt with the gold turns it holds here (JSON; a diagnostic, "
                    "for dev conversations)")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="print the tables of several --scores files (runs over parts of the data)")
    args = ap.parse_args(argv)
    file = args.data / "locomo" / "locomo10.json"
    if not file.exists():
        print(f"LoCoMo data not found at {file}", file=sys.stderr)
        return 2
    results = Results(dump=[] if args.dump else None)
    started = time.perf_counter()
    if args.merge:
        for part in args.merge:
            data = json.loads(part.read_text(encoding="utf-8"))
            results.merge(data)
            setting = data["setting"]
        return report(results, args, setting, started)
    if args.fast:
        args.conversations, args.questions, args.budgets = ["conv-26"], 12, [2_000]
        args.embed = args.embed or "hashing"
    raw = {s["sample_id"]: s for s in json.loads(file.read_text(encoding="utf-8"))}
    convs = [c for c in load_locomo(file) if not args.conversations or c.sample_id in args.conversations]
    overrides: dict[str, Any] = {}
    if args.embed:
        overrides["embed"] = {"provider": args.embed}
    if args.context:
        overrides["context"] = json.loads(args.context)
    with tempfile.TemporaryDirectory(prefix="mindpalace-prompt-recall-") as tmp, \
            Memory.open(Path(tmp) / "ws", **overrides) as memory:
        if memory.embedder is not None:
            memory.__dict__["embedder"] = CachingEmbedder(memory.embedder)
        for conv in convs:
            t0 = time.perf_counter()
            run_conversation(memory, raw[conv.sample_id], conv, args.budgets, args.questions, results,
                             baselines=not args.no_baselines)
            print(f"{conv.sample_id}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        embedder = memory.embedder.model_id if memory.embedder else "none"
        ctx = memory.settings.context
    setting = (f"embedder {embedder}; recall_share {ctx.recall_share}, recall_candidates "
               f"{ctx.recall_candidates}, item ≤ {ctx.recall_item_max_tokens} tokens, memory_role {ctx.memory_role}")
    if args.dump and results.dump is not None:
        args.dump.write_text(json.dumps(results.dump, ensure_ascii=False), encoding="utf-8")
    if args.scores:
        args.scores.write_text(json.dumps({"setting": setting, **results.to_json()}), encoding="utf-8")
    return report(results, args, setting, started)


def report(results: Results, args: argparse.Namespace, setting: str, started: float) -> int:
    budgets = sorted({b for _, b in results.scores if b})
    out = rows(results, budgets)
    console = Console(width=200)
    for split, title in (("all", "all conversations"), ("dev", "dev (conv-26, conv-30)"),
                         ("held-out", "held-out (the other eight)")):
        if any(r["split"] == split for r in out):
            console.print(table(out, split, f"Prompt recall on LoCoMo, {title} — evidence / answer containment"))
    p = sorted(results.prepare_ms)
    timing = {k: round(v, 1) for k, v in results.seconds.items()}
    console.print(f"{setting}\nwall {time.perf_counter() - started:.0f} s; seconds per method {timing}; "
                  f"prepare per question p50 {p[len(p) // 2]:.0f} ms, p95 {p[int(len(p) * 0.95)]:.0f} ms")
    if args.json:
        args.json.write_text(json.dumps({"setting": setting, "timing": timing, "rows": out}, indent=2,
                                        ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
