"""The archived-context block: one summary per archived range, rendered under a token cap (seed 002).

Seed 002 keeps only the newest consolidation summary (``_last_summary``): what the first
archive summarized leaves the prompt when the second one is written. Here every archived range
keeps its own summary (:class:`ArchivedRange`) and the block lists them oldest first, so a fact
summarized once stays until the block is over its cap. Then the consolidator merges the older
ranges into one summary through the summary gate (I3); if that fails nothing is replaced, and
:func:`render_block` hides the oldest ranges instead — raw breadcrumbs before real summaries —
each hidden range named by its message range and ``history:`` refs so it can be read back.

Rules the user stated in a message (sentences with must / never / always / only …) that a
range's summary kept are pinned on that range: a merge that drops one gets it appended verbatim,
and a hidden range's rules stay in the block while they fit. Tool output is never a source of
pinned rules (memory is data, not instructions).

Everything here is pure: no store, no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

from mindpalace.datenotes import day
from mindpalace.providers.llm.extractive import is_cheer
from mindpalace.session.directives import is_directive
from mindpalace.timeutil import from_iso
from mindpalace.tokens import TokenCounter

ARCHIVED_SUMMARY_HEADER: Final = "Archived context summary"
HIDDEN_HEADER: Final = "Not shown (read them with read_files):"
COMPACT_HIDDEN_HEADER: Final = "Not shown (read_files):"
"""The compact form (small budgets): the block's first line, in place of its header (the
memory envelope's ``source="archived summary"`` already says what the block is). Naming a
dated hidden range by its history refs and days only (without ``messages 1-414``) saved 4.5
tokens of a 1,000-token dev prompt and changed no dev evidence or answer (gap10q): not kept."""
RULES_HEADER: Final = "Rules the user stated in those ranges (verbatim):"
MAX_RULE_CHARS: Final = 300  # a longer "rule" is a paragraph, not a rule
MAX_RULES_PER_RANGE: Final = 8  # pinned per range; more rules live in the range's summary only
MAX_RANGES: Final = 16  # ranges kept in the state while merges fail; older ones are folded
_RULE = re.compile(
    r"\b(?:must|mustn't|never|always|do not|don't|should|shall|only|at most|at least|no more than|"
    r"make sure|from now on|remember to|avoid|forbidden|required?)\b|必须|不要|不能|只能|至多|至少|禁止",
    re.IGNORECASE,
)
# A marker word in a story about the past states no rule: "Never had a chance to visit it",
# "I always wanted a dog", "We only stayed two nights" (a rule is about what is to be done).
_NARRATIVE = re.compile(
    r"\b(?:never|always|only|don't|do not|didn't|did not)\s+(?:ever\s+|really\s+|even\s+)?"
    r"(?:had|was|were|did|been|got|went|saw|seen|thought|knew|felt|made|came|took|found|told|said|"
    r"heard|gone|done|used|wanted|loved|liked|[a-z]{3,}(?<!e)ed)\b",  # "never exceed" is a rule
    re.IGNORECASE,
)
_SHOWN_ONE = re.compile(r"^\[messages \d+-\d+ · history:(\d+)(?: · [^\]\n]*)?\]$", re.MULTILINE)
"""A shown range of one history entry, as :meth:`ArchivedRange.line` heads it."""
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class ArchivedRange:
    """The summary of one archived message range (or of several merged ones).

    Attributes:
        first / last: the 1-based message range archived (inclusive).
        first_cursor / last_cursor: history.jsonl cursors of the entries holding the range.
        entries: how many history entries the range covers.
        kind: ``summary`` (gated), ``raw`` (breadcrumb after a failed summary) or ``merged``.
        text: what the block shows for the range.
        rules: user rule sentences pinned on the range (each contained in `text`).
        first_at / last_at: when the range's first and last messages were written (UTC;
            None in a state stored before ranges were dated).
    """

    first: int
    last: int
    first_cursor: int
    last_cursor: int
    text: str
    kind: str = "summary"
    entries: int = 1
    rules: tuple[str, ...] = field(default_factory=tuple)
    first_at: datetime | None = None
    last_at: datetime | None = None

    @property
    def label(self) -> str:
        """``messages 1-40 · history:3 · 8–25 May 2023`` (``history:3 … history:9, 7 entries ·
        …`` for several; no date when the range is undated)."""
        if self.first_cursor == self.last_cursor:
            return self.short_label
        return f"{self._refs}, {self.entries} entries{self._dates}"

    @property
    def short_label(self) -> str:
        """The compact :attr:`label`: ``messages 1-40 · history:3 · 8–25 May 2023`` or
        ``… history:3 … history:9 · …`` (no entry count)."""
        return self._refs + self._dates

    @property
    def _refs(self) -> str:
        refs = (f"history:{self.first_cursor}" if self.first_cursor == self.last_cursor
                else f"history:{self.first_cursor} … history:{self.last_cursor}")
        return f"messages {self.first}-{self.last} · {refs}"

    @property
    def _dates(self) -> str:
        if self.first_at is None or self.last_at is None:
            return ""
        return f" · {date_span(self.first_at, self.last_at)}"

    def line(self) -> str:
        tag = " · raw excerpt, summary failed" if self.kind == "raw" else ""
        return f"[{self.label}{tag}]\n{self.text}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"first": self.first, "last": self.last, "first_cursor": self.first_cursor,
                               "last_cursor": self.last_cursor, "text": self.text, "kind": self.kind,
                               "entries": self.entries, "rules": list(self.rules)}
        if self.first_at is not None and self.last_at is not None:
            out["first_at"], out["last_at"] = self.first_at.isoformat(), self.last_at.isoformat()
        return out

    @classmethod
    def from_json(cls, data: Any) -> ArchivedRange | None:
        """The range stored as `data`, None when it is not one (a damaged state is ignored)."""
        try:
            return cls(int(data["first"]), int(data["last"]), int(data["first_cursor"]),
                       int(data["last_cursor"]), str(data["text"]), str(data.get("kind", "summary")),
                       int(data.get("entries", 1)), tuple(str(r) for r in data.get("rules") or ()),
                       _when(data.get("first_at")), _when(data.get("last_at")))
        except (KeyError, TypeError, ValueError):
            return None


def _when(value: Any) -> datetime | None:
    """A stored ISO timestamp as an aware UTC datetime; None when absent or not one."""
    if not isinstance(value, str):
        return None
    try:
        return from_iso(value)
    except ValueError:
        return None


def date_span(first: datetime, last: datetime) -> str:
    """The UTC days from `first` to `last`, as short as is unambiguous: ``8 May 2023``,
    ``8–25 May 2023``, ``8 May – 3 June 2023``, ``8 May 2023 – 2 January 2024``."""
    a, b = first.astimezone(UTC), last.astimezone(UTC)
    if a.date() == b.date():
        return day(a.date())
    if (a.year, a.month) == (b.year, b.month):
        return f"{a.day}–{b.day} {b:%B %Y}"
    if a.year == b.year:
        return f"{a.day} {a:%B} – {b.day} {b:%B %Y}"
    return f"{a.day} {a:%B %Y} – {b.day} {b:%B %Y}"


def normalize(text: str) -> str:
    """Case-folded with runs of whitespace as one space (rule containment checks)."""
    return _SPACE.sub(" ", text.casefold()).strip()


def rule_sentences(text: str) -> list[str]:
    """Sentences of `text` that state a rule (must, never, always, only, at most, 必须 …) as a
    directive: an instruction to the assistant or a limit on the work (``is_directive``).

    A question ("Do you always run?"), a story about the past ("Never had a chance to visit
    it."), a cheer ("Don't quit!", ``is_cheer``) and conversation in a rule's words ("I'm always
    here for you", "That must have been awesome") state no rule: none is pinned.
    """
    out = []
    for part in _SENTENCE_END.split(text):
        s = part.strip()
        if (s and len(s) <= MAX_RULE_CHARS and _RULE.search(s) and not s.endswith(("?", "？"))
                and not _NARRATIVE.search(s) and not is_cheer(s) and is_directive(s)
                and s not in out):
            out.append(s)
    return out


_WORD = re.compile(r"\w+")
# words a paraphrase drops or swaps freely ("never book" -> "no booking"): a rule is kept in
# substance when its other words are there
_FILLER: Final = frozenset(re.findall(r"\w+", """
    a an the and or but of to in on at for by with from as is are be been was were it its this that
    these those i me my we our you your he she they them their please must mustn should shall
    always never only do does don not no any all every make sure remember avoid required require
    now will would can could may might just"""))
_SUFFIX = re.compile(r"(?:ing|ed|es|s)$")
MIN_KEPT_SHARE: Final = 0.75  # of a rule's content words, for a summary to have kept it
MIN_CONTENT_WORDS: Final = 2  # fewer: only a verbatim copy counts as kept


def _content_stems(text: str) -> set[str]:
    return {_SUFFIX.sub("", w) if len(w) > 4 else w
            for w in _WORD.findall(text.casefold()) if w not in _FILLER}


def kept_rule(rule: str, summary: str) -> bool:
    """Whether `summary` kept `rule`: verbatim (case and spacing aside), or in substance — at
    least ``MIN_KEPT_SHARE`` of the rule's content words (stop and rule-marker words aside,
    plural and tense endings folded) are in one of its sentences, when the rule has ``MIN_CONTENT_WORDS`` or
    more. A model summarizer paraphrases ("answers must be in French" for "Always answer in
    French."): such a rule must be pinned like a copied one, or a later merge drops it."""
    if normalize(rule) in normalize(summary):
        return True
    words = _content_stems(rule)
    if len(words) < MIN_CONTENT_WORDS:
        return False
    # within one sentence: a long merged summary holds most words somewhere, the rule nowhere
    return any(len(words & _content_stems(part)) >= MIN_KEPT_SHARE * len(words)
               for part in _SENTENCE_END.split(summary))


def pinned_rules(user_texts: Sequence[str], summary: str) -> tuple[str, ...]:
    """The rule sentences of the user's messages that `summary` kept (:func:`kept_rule`: verbatim
    or in substance; at most ``MAX_RULES_PER_RANGE``, first stated first)."""
    kept: list[str] = []
    for text in user_texts:
        for rule in rule_sentences(text):
            if rule not in kept and kept_rule(rule, summary):
                kept.append(rule)
    return tuple(kept[:MAX_RULES_PER_RANGE])


def merged(ranges: Sequence[ArchivedRange], summary: str) -> ArchivedRange:
    """One range covering `ranges` (consecutive, oldest first) with text `summary`, plus every
    pinned rule the summary dropped, appended verbatim."""
    one = span(ranges)
    missing = [r for r in one.rules if not kept_rule(r, summary)]
    text = summary + ("\n" + rules_text(missing) if missing else "")
    return replace(one, text=text, kind="merged")


def merge_source(ranges: Sequence[ArchivedRange]) -> str:
    """The text a merge summarizes: each range's label and text."""
    return "\n\n".join(r.line() for r in ranges)


def rules_text(rules: Sequence[str]) -> str:
    """The pinned rules as the block shows them (``- rule`` lines under a header)."""
    return "\n".join([RULES_HEADER, *(f"- {r}" for r in rules)])


def render_block(
    ranges: Sequence[ArchivedRange], counter: TokenCounter, cap_tokens: int, *, compact: bool = False
) -> str | None:
    """The archived-context block text, at most `cap_tokens` tokens (None when nothing is archived).

    Every range is shown oldest first while the text fits. Over the cap, ranges are hidden —
    raw breadcrumbs first, then summaries, oldest first, never the newest range while another
    can go — and named on one line (message range and history refs); the rules pinned on hidden
    ranges stay (oldest dropped first when even they do not fit). The last resort cuts the text.
    `compact` (a small prompt): the hidden ranges are named on the first line, in place of the
    header and without entry counts (``Not shown (read_files): messages 1-416 · history:1 …
    history:3 · 8–25 May 2023.``); shown ranges and pinned rules are as in the full form.
    """
    if not ranges:
        return None
    order = sorted(range(len(ranges) - 1), key=lambda i: (ranges[i].kind != "raw", i))
    order.append(len(ranges) - 1)
    hidden: set[int] = set()
    dropped_rules = 0

    def compose() -> str:
        shown = [r.line() for i, r in enumerate(ranges) if i not in hidden]
        parts = [f"{ARCHIVED_SUMMARY_HEADER}:"]
        if hidden:
            gone = [ranges[i] for i in sorted(hidden)]
            runs = _runs(sorted(hidden))  # adjacent hidden ranges share one label
            if compact:
                labels = [span(ranges[a:b + 1]).short_label for a, b in runs]
                parts[0] = f"{COMPACT_HIDDEN_HEADER} " + "; ".join(labels) + "."
            else:
                labels = [span(ranges[a:b + 1]).label for a, b in runs]
                parts.append(HIDDEN_HEADER + " " + "; ".join(labels) + ".")
            rules = [x for r in gone for x in r.rules][dropped_rules:]
            if rules:
                parts.append(rules_text(rules))
        parts.extend(shown)
        return "\n".join(parts)

    text = compose()
    for i in order:
        if counter.count(text) <= cap_tokens:
            return text
        hidden.add(i)
        text = compose()
    while counter.count(text) > cap_tokens and dropped_rules < sum(len(r.rules) for r in ranges):
        dropped_rules += 1
        text = compose()
    return counter.truncate(text, cap_tokens) if counter.count(text) > cap_tokens else text


def shown_entries(block_text: str) -> frozenset[int]:
    """The history cursors whose own summary `block_text` (a :func:`render_block` text) shows:
    ranges of one entry, not merged or hidden ones. Another block quoting ``history:<N>`` for
    one of them would repeat its text."""
    return frozenset(int(n) for n in _SHOWN_ONE.findall(block_text))


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """Sorted `indexes` as (first, last) runs of consecutive values."""
    runs: list[tuple[int, int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def span(ranges: Sequence[ArchivedRange], text: str = "") -> ArchivedRange:
    """One range covering consecutive `ranges` (labels, cursors, entry count), with `text`."""
    rules: list[str] = []
    for r in ranges:
        rules.extend(x for x in r.rules if x not in rules)
    kind = "raw" if all(r.kind == "raw" for r in ranges) else "merged"
    starts = [r.first_at for r in ranges if r.first_at is not None]
    ends = [r.last_at for r in ranges if r.last_at is not None]
    dated = len(starts) == len(ends) == len(ranges)  # an undated part: the span is unknown
    return ArchivedRange(ranges[0].first, ranges[-1].last, ranges[0].first_cursor,
                         ranges[-1].last_cursor, text, kind, sum(r.entries for r in ranges),
                         tuple(rules), min(starts) if dated else None, max(ends) if dated else None)


def fold(ranges: Sequence[ArchivedRange], max_ranges: int, counter: TokenCounter,
         max_tokens: int) -> tuple[ArchivedRange, ...]:
    """At most `max_ranges` ranges: the oldest two are folded into one (texts joined and cut
    to `max_tokens`, head kept; rules kept) until they fit — the bound that holds while merges
    through the summarizer fail. Pure, no model call."""
    out = list(ranges)
    while len(out) > max(1, max_ranges):
        a, b = out[0], out[1]
        joined = "\n".join(t for t in (a.text, b.text) if t)
        out[:2] = [span([a, b], counter.truncate(joined, max_tokens))]
    return tuple(out)


def chunk_text(text: str, counter: TokenCounter, max_tokens: int) -> list[str]:
    """`text` cut into consecutive pieces of at most `max_tokens` tokens each, at a line break
    when one falls in the second half of a piece. ``"".join(chunks) == text``."""
    chunks: list[str] = []
    rest = text
    window = max(64, max_tokens * 16)  # characters looked at per piece: bounds the encode cost
    while rest:
        head = counter.truncate(rest[:window], max_tokens) or rest[:1]
        if len(head) < len(rest):
            nl = head.rfind("\n")
            if nl >= len(head) // 2:
                head = head[: nl + 1]
        chunks.append(head)
        rest = rest[len(head):]
    return chunks

