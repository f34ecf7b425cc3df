"""The knowledge axioms of seed 003 (GenericAgent's L0 "memory management SOP"), in code.

* **No execution, no memory** (:class:`SourceVerifier`): a write to L2 or L3 names the source
  that verified it — ``ledger:<task>/<ledger key>`` (a tool call the idempotency ledger holds
  as ``completed`` in this scope) or ``record:<name>`` (an existing record, e.g. ``step_12``).
* **Verified entries are never silently deleted**: enforced by :mod:`.patches` (patch-only
  edits, a removal needs a reason) and by git (every removal is a commit naming the reason).
* **No volatile state in L1/L2** (:func:`volatile_spans`): date-times, epoch timestamps,
  session ids, UUIDs, PIDs and temporary paths are stale the moment they are written.
* **L1 is a small pointer index** (:func:`check_l1`): at most ``l1_max_lines`` lines and
  ``l1_max_tokens`` tokens, every entry ``keywords → file`` or a ``key = value`` setting,
  never a procedure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from mindpalace.errors import AxiomViolation
from mindpalace.knowledge.layout import L1, KnowledgeScope
from mindpalace.scope import ANY, Scope
from mindpalace.store import Store
from mindpalace.tasks.eventstore import LEDGER_NS
from mindpalace.tokens import TokenCounter

NO_EXECUTION_NO_MEMORY: Final = "no-execution-no-memory"
NO_SILENT_DELETION: Final = "no-silent-deletion"
NO_VOLATILE_STATE: Final = "no-volatile-state"
L1_LIMITS: Final = "l1-limits"

_VOLATILE: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("an ISO date-time", re.compile(
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")),
    ("a time of day with a date", re.compile(r"\b\d{1,2}/\d{1,2}/\d{2,4}[ ,]+\d{1,2}:\d{2}\b")),
    ("a UUID", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("a session id", re.compile(r"(?i)\bsession[ _-]?(?:id|key)\b\s*[:=#]?\s*[\w.:-]+|\bsess(?:ion)?_[A-Za-z0-9]{6,}\b")),
    ("a process id", re.compile(r"(?i)\b(?:pid|process[ _-]?id)\b\s*[:=#]?\s*\d+")),
    ("an epoch timestamp", re.compile(r"(?i)\b(?:ts|timestamp|time|epoch|created(?:_at)?|updated(?:_at)?)\b\s*[:=]\s*\d{9,13}\b")),
    ("a temporary path", re.compile(
        r"(?:(?<![\w/])|(?<=[\s\"'(=:]))(?:/tmp|/var/tmp|/private/tmp|/dev/shm|/var/folders)/\S*"
        r"|\b[A-Za-z]:\\(?:Windows\\Temp|Users\\[^\\\s]+\\AppData\\Local\\Temp)\\\S*"
        r"|\btmp[a-z0-9_]{8}\b")),
)


def volatile_spans(text: str) -> list[tuple[str, str]]:
    """(what, offending text) for every piece of volatile state in `text` (empty = clean).

    Plain calendar dates (``2024-05-01``, a birthday) are facts, not state, and pass; a date
    with a time of day is a timestamp and does not."""
    found = []
    for what, pattern in _VOLATILE:
        for m in pattern.finditer(text):
            found.append((what, m.group().strip()))
    return found


def check_volatile(file: str, text: str) -> None:
    """Raise :class:`AxiomViolation` naming the first volatile pieces of `text`."""
    found = volatile_spans(text)
    if found:
        shown = "; ".join(f"{what} {snippet!r}" for what, snippet in found[:3])
        more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
        raise AxiomViolation(
            NO_VOLATILE_STATE, file,
            f"volatile state is not knowledge: {shown}{more}; keep the stable part (a path "
            "pattern, a setting name) and leave the value to the session")


_POINTER = re.compile(r"(?:→|->|=>|:)\s*\S")
_SETTING = re.compile(r"^[\w.\- ]{1,60}=\s*\S")
_PROCEDURE = re.compile(r"^\s*(?:\d+[.)]|step\s*\d+\b|[-*]\s*(?:first|then|next|finally)\b)", re.IGNORECASE)
L1_MAX_LINE_CHARS: Final = 200  # a pointer line is short; a long line is a procedure


@dataclass(frozen=True, slots=True)
class L1Limits:
    """L1's size limits: lines (non-blank) and tokens of the whole file."""

    max_lines: int
    max_tokens: int


def check_l1(text: str, limits: L1Limits, counter: TokenCounter) -> None:
    """Refuse an L1 that is over its limits or is not a pointer index.

    Raises:
        AxiomViolation: more than ``max_lines`` non-blank lines or ``max_tokens`` tokens (the
            message gives both numbers), or a line that is not a heading, a ``keywords → file``
            pointer or a ``key = value`` setting (numbered steps, long prose lines).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    tokens = counter.count(text)
    if len(lines) > limits.max_lines or tokens > limits.max_tokens:
        raise AxiomViolation(
            L1_LIMITS, L1,
            f"L1 would have {len(lines)} lines and {tokens} tokens; the limits are "
            f"{limits.max_lines} lines and {limits.max_tokens} tokens — keep only pointers "
            "(keywords → file) and move details to L2_facts.md or L3/")
    for n, line in enumerate(text.splitlines(), start=1):
        body = line.strip()
        if not body or body.startswith("#"):
            continue
        if len(body) > L1_MAX_LINE_CHARS or _PROCEDURE.match(body) or not (
                _POINTER.search(body) or _SETTING.match(body)):
            raise AxiomViolation(
                L1_LIMITS, L1,
                f"line {n} {body[:80]!r} is not a pointer: L1 holds 'keywords → file name' "
                f"pointers and 'key = value' settings (≤ {L1_MAX_LINE_CHARS} characters), never "
                "procedures — put the steps in an L3 file and point to it")


@dataclass(frozen=True, slots=True)
class VerifiedSource:
    """A source an L2/L3 write was verified by: its reference and a one-line description."""

    ref: str
    what: str


class SourceVerifier:
    """Checks that a named source exists and succeeded in the knowledge scope (axiom a).

    ``ledger:<task>/<ledger key>``: a row of the idempotency ledger
    (:mod:`mindpalace.tasks.ledger`) in any session of the scope's user (or agent) with status
    ``completed``. ``record:<name>``: a record (``step_12``, a snapshot …) of the scope.

    Args:
        store: the store holding the ledger rows and records (read only).
        record_check: optional extra check on a record (e.g. a step record must have
            succeeded); returns a problem text or None.
    """

    def __init__(self, store: Store, record_check: Callable[[str, dict[str, object]], str | None] | None = None) -> None:
        self.store = store
        self.record_check = record_check

    def within(self, scope: KnowledgeScope) -> Scope:
        """The store scope a source of `scope` may come from (every session of it)."""
        if scope.kind == "user":
            return Scope(scope.tenant, scope.name, ANY, ANY)
        return Scope(scope.tenant, ANY, scope.name, ANY)

    def verify(self, scope: KnowledgeScope, file: str, source: str | None) -> VerifiedSource:
        """The verified source, or raise.

        Raises:
            AxiomViolation: no source, an unknown kind of source, a ledger call that does not
                exist in this scope or did not complete, a record that does not exist.
        """
        if not source or not isinstance(source, str) or not source.strip():
            raise AxiomViolation(
                NO_EXECUTION_NO_MEMORY, file,
                "a write to L2/L3 must name the source that verified it: source='ledger:<task>/"
                "<ledger key>' (a completed tool call) or source='record:<name>'")
        kind, _, ref = source.strip().partition(":")
        within = self.within(scope)
        if kind == "ledger" and ref:
            rows = [v for _, key, v in self.store.kv_list(within, LEDGER_NS, prefix=ref) if key == ref]
            if not rows:
                raise AxiomViolation(
                    NO_EXECUTION_NO_MEMORY, file,
                    f"source {source!r}: no such tool call in the ledger of {scope} "
                    "(expected ledger:<task>/<ledger key>, see `mindpalace task show`)")
            done = [r for r in rows if isinstance(r, dict) and r.get("status") == "completed"]
            if not done:
                status = rows[0].get("status") if isinstance(rows[0], dict) else "?"
                raise AxiomViolation(
                    NO_EXECUTION_NO_MEMORY, file,
                    f"source {source!r}: the tool call is {status}, not completed — only a "
                    "successful call verifies knowledge")
            return VerifiedSource(f"ledger:{ref}", f"tool call {done[0].get('tool')!r} completed")
        if kind == "record" and ref:
            records = list(self.store.get_records(within, [ref]).values())  # any session of it
            if not records:
                raise AxiomViolation(
                    NO_EXECUTION_NO_MEMORY, file, f"source {source!r}: no record named {ref!r} in {scope}")
            if self.record_check is not None:
                problem = self.record_check(ref, dict(records[0].meta))
                if problem:
                    raise AxiomViolation(NO_EXECUTION_NO_MEMORY, file, f"source {source!r}: {problem}")
            return VerifiedSource(f"record:{ref}", f"record {ref!r} ({records[0].type})")
        raise AxiomViolation(
            NO_EXECUTION_NO_MEMORY, file,
            f"source {source!r} is not a verifiable source: use 'ledger:<task>/<ledger key>' "
            "or 'record:<name>'")

