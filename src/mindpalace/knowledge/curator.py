"""The offline dream curator: deterministic promotion of durable facts into USER.md / MEMORY.md.

Seed 002's Dream asks a model to fold new history into SOUL / USER / MEMORY with small edits.
With no model configured (``llm.provider = "extractive"``) this curator does the same job by
rules, so the embedded default curates fully offline and the result is reproducible:

* **User preferences and identity → USER.md**: first-person statements of a user-side speaker
  (anyone but ``assistant`` / ``tool`` / ``system``) that state a preference, habit or stable
  fact — "I prefer …", "I always / never / usually …", "I love / like / hate …", "my <x> is …",
  "I'm a … / from … / allergic …", "I live / work / grew up / moved …", "call me …".
* **Decisions and repeated facts → MEMORY.md**: statements (never a system prompt's or a tool
  output's text — nobody said those) of a decision ("we decided …",
  "let's go with …", "decision: …") and any substantive statement (≥ ``MIN_WORDS`` words) seen
  in at least ``min_repeats`` distinct history entries, one of them new since the cursor.
* **Important long-term facts → USER.md / MEMORY.md**: current facts of the scope with
  importance ≥ the threshold (``user:*`` keys to USER.md, the rest to MEMORY.md).

Every promoted line keeps its sources — the history entries it was read in (``history:<cursor>``,
readable with ``read_records``) or the fact (``fact:<key>``) — and is written verbatim (the
speaker's own sentence, never paraphrased): ``- Caroline: I prefer aisle seats. [history:12]``.
A statement already in the file (same words, case and punctuation aside) is not promoted again,
so a second run over the same input proposes nothing (I5). At most ``max_promotions`` lines per
run (preferences first, then decisions, facts, repeats; oldest first within each), so each run
stays a small patch.

Pure: reads nothing, writes nothing — :class:`~mindpalace.knowledge.dream.Dream` gathers the
input and applies the patches.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from mindpalace.facts.model import Fact
from mindpalace.history.log import HistoryEntry
from mindpalace.knowledge.layout import MEMORY, USER
from mindpalace.knowledge.patches import Patch

MIN_WORDS: Final = 5  # a repeated "Thanks, Mel!" is chatter, not a fact
MAX_LINE_CHARS: Final = 400  # a promoted sentence longer than this is a paragraph, not a fact
NON_USER_SPEAKERS: Final = frozenset({"assistant", "tool", "system", "agent"})
NOT_SAID: Final = frozenset({"tool", "system"})  # a prompt or a tool's output: nobody said it
HEADERS: Final = {
    USER: "# USER\n\nStable facts and preferences of the user (curated by dream; sources in brackets).\n",
    MEMORY: "# MEMORY\n\nProject facts and decisions (curated by dream; sources in brackets).\n",
}

# "[12] Caroline: text" — the speaker-labelled turns the consolidator's summaries keep
_TURN = re.compile(r"(?:^|\s)\[(\d+)\]\s+([^\[\]:\n]{1,60}):\s")
_LINE_SPEAKER = re.compile(r"^\s*(?:[-*]\s+)?([A-Za-z][\w .'-]{0,40}):\s+(.*)$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\[])|\n+")
_PREFERENCE = re.compile(
    r"\bI\s+(?:really\s+|also\s+|definitely\s+|still\s+|usually\s+)?(?:prefer|always|never|usually|"
    r"love|like|enjoy|hate|dislike|can't stand|live|work|grew up|was born|moved|study|studied|"
    r"identify|have been|'ve been|plan to|want to|went|started|joined|got|have|"
    r"(?:don't|do not) (?:want|like|eat|drink|fly))\b"
    r"|\bI(?:'m| am)\b"
    r"|\bmy\s+(?:[\w-]+\s+){0,2}(?:is|are|was|were)\b|\bcall me\b|\bI have (?:a|an|two|three)\b",
    re.IGNORECASE,
)
_NOT_A_FACT = re.compile(
    r"^(?:thanks|thank you|wow|hey|hi|hello|yeah|yes|no|ok|okay|sure|cool|awesome|great|bye)\b"
    r"|\?\s*$|\bcan'?t wait\b|\bI(?:'d| would) like\b|\bI'm afraid\b|\bI'm not sure\b"
    r"|\bI (?:don't|do not|can't|cannot|didn't) (?:have|remember|know|recall)\b|\b(?:I'm (?:so |really )?(?:glad|happy|sorry|sure|excited|thrilled|proud|thinking|"
    r"wondering|curious))\b",
    re.IGNORECASE,
)
_IDENTITY = re.compile(r"\bmy\s+(?:[\w-]+\s+){0,2}(?:is|are)\b", re.IGNORECASE)  # "my user id is …"
_DECISION = re.compile(
    r"\b(?:we|I)\s+(?:have\s+)?(?:decided|agreed|chose|settled on|will use|are going with)\b"
    r"|\blet's go with\b|^\s*decision\s*:", re.IGNORECASE)
_WORD = re.compile(r"[\w']+")


@dataclass(frozen=True, slots=True)
class Statement:
    """One sentence of a history entry: who said it (``""`` when the entry names nobody)."""

    speaker: str
    text: str
    cursor: int


@dataclass
class Promotion:
    """One line the curator adds: the target file, the statement, why, and its sources."""

    file: str
    speaker: str
    text: str
    why: str
    sources: list[str] = field(default_factory=list)

    def line(self) -> str:
        who = f"{self.speaker}: " if self.speaker else ""
        return f"- {who}{self.text} [{', '.join(self.sources)}]"


@dataclass(frozen=True, slots=True)
class CuratorSettings:
    """min_repeats: distinct entries a statement must appear in to be promoted as a repeat;
    importance_threshold: long-term facts at or above it are promoted; max_promotions: lines
    per run (0 = no limit); user_file: False for an agent scope (no USER.md)."""

    min_repeats: int = 2
    importance_threshold: float = 0.6
    max_promotions: int = 40
    user_file: bool = True


def statements(entry: HistoryEntry) -> list[Statement]:
    """The sentences of one history entry with their speakers (``[N] Name: …`` turns, or
    ``Name: …`` lines; ``""`` when the entry names no speaker)."""
    out: list[Statement] = []
    text = entry.content
    marks = list(_TURN.finditer(text))
    if marks:
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            out += _sentences(m.group(2).strip(), text[m.end():end], entry.cursor)
        return out
    for raw in text.splitlines():
        line = _LINE_SPEAKER.match(raw)
        speaker, body = (line.group(1).strip(), line.group(2)) if line else ("", raw.lstrip("-* ").strip())
        out += _sentences(speaker, body, entry.cursor)
    return out


def _sentences(speaker: str, body: str, cursor: int) -> list[Statement]:
    return [Statement(speaker, s.strip(), cursor) for s in _SENTENCE.split(body.strip())
            if s.strip() and not s.strip().startswith("Key facts:")]


def norm(text: str) -> str:
    """Words only, case-folded: how statements are compared with each other and the files."""
    return " ".join(w.casefold() for w in _WORD.findall(text))


def curate(
    new: Sequence[HistoryEntry],
    seen: Sequence[HistoryEntry],
    files: Mapping[str, str | None],
    facts: Sequence[Fact] = (),
    settings: CuratorSettings | None = None,
    prompts: Sequence[str] = (),
) -> tuple[list[Patch], list[Promotion]]:
    """The patches (one insert per file) and the promotions they carry.

    Args:
        new: entries after the scope's dream cursor (only they can trigger a promotion).
        seen: every entry of the scope up to the newest one in `new` (repeat counts).
        files: current text of USER.md / MEMORY.md (None = the file does not exist yet).
        facts: current long-term facts of the scope.
        settings: thresholds and caps.
        prompts: the system prompts of the entries' sessions: a sentence taken from one (a
            summary may quote the prompt) is not something anybody said, never promoted.
    Returns:
        ``(patches, promotions)``; both empty when there is nothing new to promote.
    """
    s = settings or CuratorSettings()
    targets = (USER, MEMORY) if s.user_file else (MEMORY,)
    present = {f: norm(files.get(f) or "") for f in targets}
    picked: dict[str, Promotion] = {}  # norm(text) → promotion

    def add(file: str, text: str, speaker: str, why: str, sources: list[str]) -> None:
        if file not in targets:
            file = MEMORY
        key = norm(text)
        if not key or key in picked or _in_file(key, present[file]) or len(text) > MAX_LINE_CHARS:
            return
        picked[key] = Promotion(file, speaker, text, why, sources)

    quoted = set().union(*(_grams(norm(p)) for p in prompts)) if prompts else set()
    new_statements = [st for e in new for st in statements(e) if not _from(quoted, st.text)]
    occurrences: dict[str, set[int]] = defaultdict(set)
    for e in seen:
        for st in statements(e):
            occurrences[norm(st.text)].add(e.cursor)
    for st in new_statements:
        chatter = _NOT_A_FACT.search(st.text) and not _IDENTITY.search(st.text)
        if st.speaker.casefold() in NOT_SAID or chatter or len(_WORD.findall(st.text)) < 3:
            continue
        user_side = st.speaker.casefold() not in NON_USER_SPEAKERS
        sources = [f"history:{c}" for c in sorted(occurrences.get(norm(st.text), {st.cursor}))]
        if user_side and _PREFERENCE.search(st.text) and len(_WORD.findall(st.text)) >= 4:
            add(USER, st.text, st.speaker, "preference", sources)
        elif _DECISION.search(st.text):
            add(MEMORY, st.text, st.speaker, "decision", sources)
        elif len(occurrences.get(norm(st.text), ())) >= s.min_repeats and len(_WORD.findall(st.text)) >= MIN_WORDS:
            add(MEMORY, st.text, st.speaker, "repeated", sources)
    for fact in facts:
        if fact.current and fact.importance >= s.importance_threshold:
            file = USER if fact.key.startswith("user:") else MEMORY
            add(file, f"{fact.key} = {fact.content}", "", "important fact", [f"fact:{fact.key}"])
    order = {"preference": 0, "decision": 1, "important fact": 2, "repeated": 3}
    found = list(picked.values())
    ranked = sorted(range(len(found)), key=lambda i: (order[found[i].why], i))
    keep = sorted(ranked[: s.max_promotions] if s.max_promotions else ranked)  # reading order
    chosen = [found[i] for i in keep]
    patches = []
    for file in targets:
        lines = [p.line() for p in chosen if p.file == file]
        if not lines:
            continue
        body = "\n".join(lines) + "\n"
        if files.get(file) is None:
            body = HEADERS[file] + "\n" + body
        patches.append(Patch.insert(file, body, reason=f"dream: {len(lines)} promoted "
                                    f"{'preferences and facts' if file == USER else 'facts and decisions'}"))
    return patches, chosen


def _grams(text: str, n: int = 4) -> set[tuple[str, ...]]:
    words = text.split()
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def _from(quoted: set[tuple[str, ...]], text: str) -> bool:
    """True when most of `text` is a quote of a prompt (half its word 4-grams are in it): a
    summary flattens a prompt's lists, so a sentence may join pieces of two of its lines."""
    if not quoted:
        return False
    grams = _grams(norm(text))
    return len(grams & quoted) * 2 >= len(grams)


def _in_file(key: str, file_norm: str) -> bool:
    """True when the statement's words already stand in the file as a run of words."""
    return bool(file_norm) and f" {key} " in f" {file_norm} "
