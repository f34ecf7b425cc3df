"""The offline extractive summarizer: deterministic, keeps ids, numbers, dates and constraints.

Used when no LLM is configured (DESIGN.md §5), so the embedded default runs fully offline. It
never invents text: it picks whole source sentences (seed 004's erased-budget failure is why
constraint sentences win) and appends a compact ``Key facts:`` line with the identifiers,
numbers with units, money and dates of the sentences that did not fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mindpalace.blocks import LINE_BREAK_MARK
from mindpalace.checks import require_int
from mindpalace.errors import ValidationError
from mindpalace.providers.llm.base import (
    Completion,
    LLMProvider,
    Message,
    TokenBudget,
    Usage,
)
from mindpalace.settings import LLMSettings
from mindpalace.textsafe import require_text
from mindpalace.tokens import TokenCounter

MODEL_NAME = "extractive"
KEY_FACTS_LABEL = "Key facts:"
KEY_FACTS_SHARE = 0.25  # at most this share of the limit is reserved for the Key facts line
MIN_SPLIT_TOKENS = 24  # a unit longer than max(limit/2, this) is split into clauses
MIN_DENSITY_TOKENS = 12  # "Hey Mel!" must not out-rank a sentence carrying a date and an id

# --- what makes a sentence worth keeping -----------------------------------------------------

# Strong constraint markers: the words users state hard limits with (seed 004's budget).
_CONSTRAINT_EN = re.compile(
    r"\b(?:must(?!\s+(?:have|be)\b|'ve)|never|do not|don't|does not|doesn't|not allowed|forbidden|required?|budget|"
    r"at most|at least|no more than|no less than|not exceed|deadline|due by)\b",
    re.IGNORECASE,
)
# Encouragement addressed at the listener, in a constraint's words: "Don't give up!", "Never
# stop dreaming!", "You must try it!" — no limit on anything. A marker opening one of these
# phrases does not make a constraint (is_constraint); "Don't give up our seats", "Never stop
# the backup job" and any sentence with a number still do.
_CHEER_AFTER_NEGATION = re.compile(
    r"\s+(?:ever\s+)?(?:give\s+up\b(?!\s+(?:the|your|my|our|their|his|her|a|an|this|that|these|those|any)\b)"
    r"|quit\b(?=\s*(?:now\s*)?[!.,]|\s*$)|stop\s+[a-z]+ing\b|worry\b|fret\b|panic\b|despair\b|lose\s+(?:hope|heart|faith)\b"
    r"|doubt\s+yourself\b|hesitate\b"
    r"|be\s+(?:so\s+|too\s+)?(?:afraid|scared|shy|sad|nervous|discouraged|a\s+stranger|hard\s+on\s+yourself)\b"
    r"|let\s+(?:[\w']+\s+){1,6}?(?:get\s+to|bring|stop|tell|discourage|hold|drag|keep|get)\s+you\b"
    r"|let\s+(?:anyone|anybody|them|it|that|this)\s+(?:get|bring|stop|tell|discourage|hold)\b"
    r"|forget\s+to\s+(?:smile|have\s+fun|enjoy|relax|take\s+care|breathe)\b"
    r"|forget\s+(?:your|how)\s+(?:passion|dreams?|worth|strength|roots|talent|love|amazing|special|far)\b)",
    re.IGNORECASE,
)
_CHEER_AFTER_MUST = re.compile(  # a recommendation, and only as an exclamation: "You must try it!"
    r"\s+(?:(?:really|definitely|totally|absolutely)\s+)?(?:try|see|visit|come|taste|watch|meet"
    r"|check\s+(?:it|this|that|them)\s+out|go\s+(?:see|try|visit))\b",
    re.IGNORECASE,
)
# Rule words that open no cheer: a sentence holding one of them is no mere encouragement.
_OTHER_RULE_WORD = re.compile(
    r"\b(?:always|should|shall|only|make sure|from now on|remember to|avoid|forbidden|required?)\b",
    re.IGNORECASE,
)
_CONSTRAINT_ZH = re.compile(r"不要|必须|预算|不能|至多|至少|最多|最少|不超过|不得|禁止|务必|只能|截止|一定要|不可|不允许")
# Weak markers: often constraints, often just conversation ("I cannot wait").
_HINT_EN = re.compile(
    r"\b(?:only|always|cannot|can't|should not|shouldn't|limit|avoid|maximum|minimum)\b",
    re.IGNORECASE,
)
_HINT_ZH = re.compile(r"仅|别|限制|要求|避免|上限|下限|只")
_URL = re.compile(r"https?://[^\s<>\"'，。；）)\]]+[^\s<>\"'，。；）)\].,;:!?]")
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_PATH = re.compile(
    # ASCII path parts only: Chinese prose glues words to paths (文件在/var/log/app.log里).
    r"(?<![A-Za-z0-9_/.:])(?:~|\.{1,2})?/[A-Za-z0-9_.@+-]+(?:/[A-Za-z0-9_.@+-]+)+/?"  # unix
    r"|(?<![A-Za-z0-9_])[A-Za-z]:\\[A-Za-z0-9_.\\-]*[A-Za-z0-9_.]"  # windows paths
    r"|(?<![A-Za-z0-9_.-])[A-Za-z0-9_-]+\.(?:py|md|json|jsonl|txt|csv|yaml|yml|toml|js|ts|html|"
    r"pdf|log|sql|sh|db|zip)(?![A-Za-z0-9_])"
)
# Letters and digits mixed, ≥ 4 characters: TK001, u_10086, PNR7X2K9, order-7781. ASCII
# boundaries on purpose: Chinese text glues ids to words (订单号TK001) and \w would eat them.
_ID_CH = "A-Za-z0-9_-"
_IDENT = re.compile(
    rf"(?<![{_ID_CH}])(?=[{_ID_CH}]{{4}})(?=[{_ID_CH}]*[A-Za-z])(?=[{_ID_CH}]*\d)"
    rf"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*(?![{_ID_CH}])"
)
_HASH_REF = re.compile(r"#\d{2,}(?!\d)")
_MONEY = re.compile(
    r"[$¥€£￥]\s?\d[\d,]*(?:\.\d+)?(?:\s?[kKmM]\b)?"
    r"|\d[\d,]*(?:\.\d+)?\s?(?:CNY|RMB|USD|EUR|JPY|GBP|HKD|dollars?|yuan|元|块|美元|日元|欧元|万元?)"
)
_UNIT = re.compile(
    r"\d+(?:[.,]\d+)?\s?(?:%|‰|(?:km|m|cm|mm|kg|g|mg|ms|s|sec|secs|seconds?|mins?|minutes?|h|hrs?|"
    r"hours?|days?|nights?|weeks?|months?|years?|[KMGT]i?B|tokens?|people|persons?|adults?|"
    r"children|guests?|rooms?|items?|pages?|steps?)\b|晚|天|小时|分钟|秒|人|个|次|公里|米|"
    r"千克|公斤|岁|周|间|张|页|步)"
)
_DATE = re.compile(
    r"\b\d{4}[-/.]\d{1,2}[-/.]\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?"
    r"|\d{4}年\d{1,2}月(?:\d{1,2}[日号])?|\d{1,2}月\d{1,2}[日号]"
    r"|\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?)?|\d{1,2}[点时](?:\d{1,2}分|半)?"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?"
    r"(?:,?\s+\d{4})?\b"
    r"|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*"
    r"(?:\s+\d{4})?\b"
    r"|\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b|星期[一二三四五六日天]|周[一二三四五六日]"
)
_NAME = re.compile(r"(?<=[\w,;)] )[A-Z][a-z]+(?:[- ][A-Z][a-z]+)*")  # not after "Speaker: "
_NUMBER = re.compile(r"\d")
_WORD = re.compile(r"[a-z]{3,}")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
# Function words and chat filler: never content, never an instruction keyword.
_STOP_WORD_TEXT = (
    "the and for are but not you your yours all any can had her hers him his has have "
    "how its our ours out she they them their this that these those was were what when "
    "where which who why will with would could should there here then than just about "
    "also been being did does doing from into more most some such only own same very too "
    "yes yeah hey thanks thank wow really much well like get got going know think want "
    "one two great good nice cool awesome keep make please said summarize summary"
)
_STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())

# Key facts are what the agent would otherwise lose for good; order = listing priority.
_FACT_PATTERNS: tuple[re.Pattern[str], ...] = (
    _URL, _EMAIL, _PATH, _IDENT, _HASH_REF, _MONEY, _DATE, _UNIT,
)

# Weights: a constraint outranks everything; identifiers next; then quantities and dates.
W_CONSTRAINT = 8.0
W_HINT = 3.0
W_IDENTIFIER = 3.0
W_QUANTITY = 2.0
W_NAME = 1.0
W_NUMBER = 0.5
W_BOOST = 4.0  # per distinct content word of the caller's instructions
W_CONTENT = 0.3  # per rare content word (idf-weighted), at most MAX_HITS_PER_KIND
W_FIRST = 1.0  # the opening sentence usually names the topic
MAX_HITS_PER_KIND = 3  # a table row full of ids should not drown out a constraint

# --- splitting ---------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?;])\s+")
# Clause breaks for over-long sentences; ASCII ones only before a space so URLs stay whole.
_CLAUSE_END = re.compile(r"(?<=[，、：])|(?<=[,:])\s+")
# A period that ends a title, an initial or a common abbreviation ends no sentence: splitting
# there let two unrelated sentences join into "… at Dr. Nothing special." in a summary.
_ABBREVIATION_END = re.compile(
    r"(?:^|[\s(])(?:Mr|Mrs|Ms|Mx|Dr|Prof|Sr|Jr|St|Mt|Ft|Gen|Col|Capt|Lt|Sgt|Rev|Hon|vs|etc|approx|"
    r"e\.g|i\.e|cf|Vol|Fig|Inc|Ltd|Corp|Ave|Blvd|Rd|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|"
    r"Nov|Dec|[A-Z])\.$"
)
_LINE_LABEL = re.compile(r"\[\d+\] [^\n\[\]:]{1,80}:(?= |$)")  # "[12] tool:" opening a line
_LABEL_ONLY = re.compile(r"\[\d+\] [^\n\[\]:]{1,80}:")  # a message's label with nothing after it
_SPACE = re.compile(r"[ \t\u3000\r\f\v]+")
_CJK_END = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]$")


@dataclass(frozen=True)
class _Unit:
    pos: int
    text: str  # as shown alone: a later piece of a labelled line starts "[N] speaker: … "
    tokens: int
    score: float
    constraint: bool
    line: int = -1  # the message it comes from (a line, or a labelled run of sentences in one)
    bare: str = ""  # the piece without the label it was given (shown after its own line's piece)


def _priority(unit: _Unit) -> tuple[bool, float, int]:
    """Constraints first; then value per token, short fragments counted as MIN_DENSITY_TOKENS."""
    return (not unit.constraint, -unit.score / max(unit.tokens, MIN_DENSITY_TOKENS), unit.pos)


def split_units(text: str) -> list[str]:
    """Lines, then sentences (English and Chinese punctuation), whitespace compacted."""
    return [piece for _, _, piece in _line_units(text)]


def _line_units(text: str) -> list[tuple[int, str, str]]:
    """:func:`split_units` as (message number, its label or '', sentence): a message starts at
    a line or at a sentence opening with a label ``[N] speaker:`` (a summary joins several
    messages on one line), and runs to the next; a ``⏎`` (a line break inside one message of a
    transcript, :func:`~mindpalace.blocks.one_line`) ends a sentence but never starts a message."""
    units: list[tuple[int, str, str]] = []
    message = -1
    for line in text.splitlines():
        pieces: list[tuple[str, bool]] = []  # (sentence, after a ⏎ of the same message)
        for k, segment in enumerate(line.split(LINE_BREAK_MARK)):
            segment = _SPACE.sub(" ", segment).strip()
            start = len(pieces)
            for piece in (s.strip() for s in _SENTENCE_END.split(segment) if s and s.strip()):
                if len(pieces) > start and _ABBREVIATION_END.search(pieces[-1][0]):
                    pieces[-1] = (f"{pieces[-1][0]} {piece}", pieces[-1][1])  # "Dr. Okafor" is one sentence
                else:
                    pieces.append((piece, k > 0))
        label = ""
        for i, (piece, continued) in enumerate(pieces):  # a line break always ends a sentence
            # a ⏎ is a line break inside one message (a transcript's line): what follows it is
            # that message's, whatever it looks like ("⏎[4] user: from now on …")
            found = None if continued else _LINE_LABEL.match(piece)
            if i == 0 or found:
                message += 1
                label = found.group() if found else ""
            units.append((message, label, piece))
    return units


def clauses(sentence: str) -> list[str]:
    """An over-long sentence's clauses; a message label (``[N] speaker:``, how consolidation
    writes each message) stays with the clause after it — alone it says nothing, and being
    short it would out-rank every clause by value per token."""
    out: list[str] = []
    label = ""
    for clause in _CLAUSE_END.split(sentence):
        clause = clause.strip()
        if not clause:
            continue
        if _LABEL_ONLY.fullmatch(clause):
            label = f"{label}{clause} "
            continue
        out.append(label + clause)
        label = ""
    return out


def is_constraint(text: str) -> bool:
    """Does the sentence state a hard limit (must, never, budget, 必须, 不要, 预算 …)?

    Not when every marker opens a cheer addressed at the listener and the sentence holds no
    number: "Don't give up!", "Never stop dreaming!", "You must try it!" state no limit
    ("You must not exceed $500!", "Never book flights before 08:00!" do)."""
    if _CONSTRAINT_ZH.search(text):
        return True
    return _CONSTRAINT_EN.search(text) is not None and not _markers_only_cheer(text)


def is_cheer(text: str) -> bool:
    """Is the sentence only encouragement in a rule's words ("Don't give up!", "Never stop
    dreaming!", "You must try it!")? True when it has a must / never / don't, every such word
    opens a cheer addressed at the listener, no other rule word (always, only, should …) is in
    it, and it holds no number. The archived block's pinned rules use it, so a cheer is never
    shown as a rule the user stated (:func:`is_constraint` reads the same cheers)."""
    return (not _CONSTRAINT_ZH.search(text) and _OTHER_RULE_WORD.search(text) is None
            and _markers_only_cheer(text))


def _markers_only_cheer(text: str) -> bool:
    """The sentence has a must / never / don't, each opens a cheer (:func:`_opens_cheer`), and
    it holds no number: the part of a cheer that :func:`is_constraint` and :func:`is_cheer`
    share."""
    markers = list(_CONSTRAINT_EN.finditer(text))
    return bool(markers) and _NUMBER.search(text) is None and all(_opens_cheer(text, m) for m in markers)


def _opens_cheer(text: str, marker: re.Match[str]) -> bool:
    word = marker.group().casefold().replace("’", "'")
    rest = text[marker.end():]
    if word in ("never", "don't", "do not"):
        return _CHEER_AFTER_NEGATION.match(rest) is not None
    return word == "must" and "!" in rest and _CHEER_AFTER_MUST.match(rest) is not None


def score_unit(text: str, *, first: bool = False, boost: re.Pattern[str] | None = None) -> float:
    """How much a sentence is worth keeping (deterministic; higher = kept first)."""
    score = W_FIRST if first else 0.0
    if is_constraint(text):
        score += W_CONSTRAINT
    elif _HINT_EN.search(text) or _HINT_ZH.search(text):
        score += W_HINT
    ids = sum(len(p.findall(text)) for p in (_URL, _EMAIL, _PATH, _IDENT, _HASH_REF))
    score += W_IDENTIFIER * min(ids, MAX_HITS_PER_KIND)
    quantities = sum(len(p.findall(text)) for p in (_MONEY, _UNIT, _DATE))
    score += W_QUANTITY * min(quantities, MAX_HITS_PER_KIND)
    score += W_NAME * min(len(_NAME.findall(text)), MAX_HITS_PER_KIND)
    if not ids and not quantities and _NUMBER.search(text):
        score += W_NUMBER
    if boost is not None:
        hits = {m.casefold() for m in boost.findall(text)}
        score += W_BOOST * min(len(hits), MAX_HITS_PER_KIND)
    return score


def _content_words(text: str) -> set[str]:
    low = text.casefold()
    words = {w for w in _WORD.findall(low) if w not in _STOP_WORDS}
    cjk = "".join(_CJK_RUN.findall(low))
    words.update(cjk[i : i + 2] for i in range(len(cjk) - 1))  # CJK bigrams stand in for words
    return words


def _content_scores(pieces: list[str]) -> list[float]:
    """Per piece: how many of its words are rare in this text (idf-weighted, capped).

    Breaks ties among sentences without ids, numbers or constraints: "Caroline researched
    adoption agencies" beats "Hey Mel!" (seed 002's consolidation keeps decisions, not filler).
    """
    bags = [_content_words(p) for p in pieces]
    df: dict[str, int] = {}
    for bag in bags:
        for w in bag:
            df[w] = df.get(w, 0) + 1
    n = len(pieces)
    norm = math.log(n + 1)
    return [
        min(sum(math.log((n + 1) / df[w]) for w in bag) / norm, MAX_HITS_PER_KIND) for bag in bags
    ]


def key_facts(text: str) -> list[str]:
    """Identifiers, paths, URLs, e-mails, money, dates and numbers with units in `text`.

    Ordered by kind (identifiers before quantities, as in `_FACT_PATTERNS`), then by position;
    a match inside a longer one (a path inside a URL) is dropped; duplicates once.
    """
    matches = [
        (m.start(), -m.end(), rank, m.group().strip())
        for rank, pattern in enumerate(_FACT_PATTERNS)
        for m in pattern.finditer(text)
    ]
    matches.sort()  # by start, longest first
    kept: list[tuple[int, int, str]] = []
    reach = -1
    for start, neg_end, rank, fact in matches:
        if -neg_end <= reach:  # contained in an earlier, longer match
            continue
        reach = -neg_end
        kept.append((rank, start, fact))
    kept.sort()
    return list(dict.fromkeys(fact for _, _, fact in kept if fact))


class ExtractiveSummarizer:
    """Pick the highest-value sentences of a text, in source order, within a token limit.

    Args:
        count: token count of a string (the configured `TokenCounter.count`).
        truncate: longest prefix within a token count (`TokenCounter.truncate`).
    """

    def __init__(self, count: Callable[[str], int], truncate: Callable[[str, int], str]) -> None:
        self.count = count
        self.truncate = truncate

    def summarize(self, text: str, max_tokens: int, *, instructions: str | None = None) -> str:
        """At most `max_tokens` tokens of `text`: the best sentences, then a ``Key facts:`` line.

        Text already within the limit comes back with its whitespace compacted. Longer text
        always comes back shorter than `max_tokens` + 1 tokens, hence shorter than the source.
        """
        compact = "\n".join(_SPACE.sub(" ", ln).strip() for ln in text.splitlines() if ln.strip())
        if self.count(compact) <= max_tokens:
            return compact
        units = self._units(compact, max_tokens, _boost_pattern(instructions))
        all_facts = key_facts(compact)
        body = self._join(self._select(units, max_tokens))
        missing = [f for f in all_facts if f not in body]
        if missing:
            # Some facts did not make it: reselect leaving room for a facts line as large as
            # they need (at most a share of the limit); constraint sentences may still use it.
            reserve = min(self.count(self._facts_line(missing)), int(max_tokens * KEY_FACTS_SHARE))
            body = self._join(self._select(units, max_tokens, reserve=reserve))
            missing = [f for f in all_facts if f not in body]
        out = body
        if missing:
            room = max_tokens - self.count(body) - 1  # newline before the facts line
            line = self._fit_facts(missing, room)
            if line:
                out = f"{body}\n{line}" if body else line
        if self.count(out) > max_tokens:  # BPE merges across joins can shift counts slightly
            out = self.truncate(out, max_tokens)
        return out

    def _units(self, text: str, max_tokens: int, boost: re.Pattern[str] | None) -> list[_Unit]:
        split_above = max(max_tokens // 2, MIN_SPLIT_TOKENS)
        found: dict[str, tuple[int, str]] = {}  # piece → (line, label); repeats carry nothing new
        for line, label, unit in _line_units(text):
            if self.count(unit) > split_above:
                parts = clauses(unit)
            else:
                parts = [] if _LABEL_ONLY.fullmatch(unit) else [unit]  # a bare "[N] speaker:" says nothing
            for part in parts:
                found.setdefault(part, (line, label))
        pieces = list(found)
        content = _content_scores(pieces)
        out: list[_Unit] = []
        for pos, piece in enumerate(pieces):
            line, label = found[piece]
            # a later sentence of a message keeps who said it: picked apart from the message's
            # first one, it would read as the previous speaker's ("[1] user: … you must …" for
            # a tool's words)
            shown = piece if not label or piece.startswith(label) else f"{label} … {piece}"
            score = score_unit(piece, first=pos == 0, boost=boost) + W_CONTENT * content[pos]
            out.append(_Unit(pos, shown, self.count(shown) + 1, score, is_constraint(piece), line, piece))
        return out

    def _select(self, units: list[_Unit], limit: int, *, reserve: int = 0) -> list[_Unit]:
        """Constraint sentences first, then the rest; within each, by value per token (a
        short sentence with one id beats a long JSON blob with three), skipping what does not
        fit. Only constraint sentences may spend the last `reserve` tokens of `limit`.
        """
        chosen: list[_Unit] = []
        used = 0
        for unit in sorted(units, key=_priority):
            cap = limit if unit.constraint else limit - reserve
            if used + unit.tokens <= cap:
                chosen.append(unit)
                used += unit.tokens
        if not chosen and units:  # nothing fits whole: keep the head of the best unit
            best = min(units, key=lambda u: (-u.score, u.pos))
            head = self.truncate(best.text, max(limit - reserve - 1, 0))
            return [_Unit(best.pos, head, self.count(head), best.score, best.constraint)] if head else []
        return sorted(chosen, key=lambda u: u.pos)

    @staticmethod
    def _join(units: list[_Unit]) -> str:
        """The chosen units in source order; a piece after one of its own message drops the
        label it was given (the message's speaker is named just before)."""
        parts: list[str] = []
        previous: _Unit | None = None
        for unit in units:
            if parts and not _CJK_END.search(parts[-1]):
                parts.append(" ")
            same_line = previous is not None and unit.line >= 0 and unit.line == previous.line
            parts.append(unit.bare if same_line and unit.bare else unit.text)
            previous = unit
        return "".join(parts)

    @staticmethod
    def _facts_line(facts: list[str]) -> str:
        return f"{KEY_FACTS_LABEL} {'; '.join(facts)}"

    def _fit_facts(self, facts: list[str], room: int) -> str:
        """A facts line within `room` tokens holding as many facts as fit (cheapest first),
        listed in their original order."""
        costs = [self.count(f"; {fact}") for fact in facts]  # the separator's tokens included
        used = self.count(KEY_FACTS_LABEL)
        taken: set[int] = set()
        for i in sorted(range(len(facts)), key=lambda i: (costs[i], i)):
            if used + costs[i] <= room:
                taken.add(i)
                used += costs[i]
        line = [facts[i] for i in sorted(taken)]
        while line and self.count(self._facts_line(line)) > room:  # joins can merge tokens
            line.pop()
        return self._facts_line(line) if line else ""




def _boost_pattern(instructions: str | None) -> re.Pattern[str] | None:
    """Content words (≥ 4 letters, or CJK runs) of the caller's instructions, as one pattern."""
    if not instructions:
        return None
    found = re.findall(r"[A-Za-z]{4,}|[\u4e00-\u9fff]{2,}", instructions)
    words = sorted({w.casefold() for w in found} - _STOP_WORDS)
    if not words:
        return None
    return re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)


class ExtractiveProvider(LLMProvider):
    """The offline `LLMProvider`: ``complete`` summarizes the text of the user messages.

    Deterministic (same input, same output); finish_reason is always ``"stop"``; usage is
    counted with the configured counter (prompt = source text, completion = summary). A call
    without ``max_tokens`` uses ``llm.extractive_max_tokens``. Budgets are charged like any
    provider's, so job budgets bound offline work too.

    Raises (besides `LLMProvider.complete`'s):
        ValidationError: no user message carries text.
    """

    name = "extractive"

    def __init__(self, settings: LLMSettings, counter: TokenCounter, **kwargs: Any) -> None:
        super().__init__(settings, counter, **kwargs)
        self.summarizer = ExtractiveSummarizer(counter.count, counter.truncate)

    @property
    def model(self) -> str:
        return MODEL_NAME

    def _complete(
        self, messages: list[Message], *, max_tokens: int | None, temperature: float, **opts: Any
    ) -> Completion:
        text = "\n".join(_user_text(messages))
        if not text.strip():
            raise ValidationError("the extractive provider needs user messages with text to summarize")
        return self._summary(text, max_tokens or self.settings.extractive_max_tokens, None)

    def summarize(
        self,
        text: str,
        *,
        max_tokens: int,
        instructions: str | None = None,
        budget: TokenBudget | None = None,
    ) -> Completion:
        """Summarize `text` directly (no prompt template); `instructions` words boost sentences.

        Raises:
            InvalidTextError: empty or unsafe `text`. ValidationError: `max_tokens` < 1.
            TokenBudgetExceededError: the budget cannot pay for the source text.
        """
        require_text("text", text, allow_empty=False)
        require_int("max_tokens", max_tokens)
        limit = self._budgeted_max_tokens(budget, self.counter.count(text), max_tokens) or max_tokens
        completion = self._guarded(lambda: self._summary(text, limit, instructions))
        if budget is not None:
            budget.charge(completion.usage)
        return completion

    def _summary(self, text: str, max_tokens: int, instructions: str | None) -> Completion:
        out = self.summarizer.summarize(text, max_tokens, instructions=instructions)
        usage = Usage.of(self.counter.count(text), self.counter.count(out))
        return Completion(text=out, finish_reason="stop", usage=usage, model=MODEL_NAME)


def _user_text(messages: list[Message]) -> list[str]:
    texts: list[str] = []
    for msg in messages:
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(
                str(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
    return texts
