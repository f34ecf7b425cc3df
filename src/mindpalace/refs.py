"""References the model can read back: parse, format and resolve (seed 000's read_files protocol).

Every item a prompt shows that is not the full raw text carries a reference string; the model
asks for it with ``{"read_files": {"files": ["message:17"]}}`` and :class:`RefResolver` loads
the full raw text. Grammar:

- ``message:<N>``            message N (1-based index) of this session
- ``message:<N>@<session>``  message N of another session of the same tenant / user / agent
- ``message:<A>–<B>,<C>[@<session>]`` several messages of one session, as the recalled block's
  date lines and the message-dates note list them (en dash or hyphen; at most
  :data:`MAX_GROUP_MESSAGES`), read as one record of ``[N] speaker: text`` lines
- ``history:<cursor>``       the history.jsonl entry with that cursor (raw archive of a range)
- ``fact:<entity:attribute>`` the current value of a fact
- ``archive:<hash>``         an exchange of the L4 archive (:mod:`mindpalace.archive`), read
  back verbatim from its monthly file (same tenant / user / agent, any session)
- ``knowledge:<user|agent>/<file>`` a committed knowledge file of the session's user or agent
  (``knowledge:user/L2_facts.md``, ``knowledge:agent/L3/deploy.md``)
- anything else              a step / info / snapshot record name exactly as today (``step_12``)

Unknown, malformed or out-of-scope references come back in ``ReadResult.missing`` (never
raised), like unknown record names. A reference never reads another user's data (I10): the
session scope fixes tenant, user and agent; ``@session`` and history entries of other sessions
are read only within them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from mindpalace.archive.exchanges import HASH_CHARS
from mindpalace.archive.sessions import SessionArchive
from mindpalace.errors import MindPalaceError, ValidationError
from mindpalace.history.log import DOC_KIND as HISTORY_KIND
from mindpalace.history.log import HistoryLog
from mindpalace.scope import Scope
from mindpalace.session.messages import MessageLog, StoredMessage, message_text
from mindpalace.steps.records import ReadResult, RecordBook
from mindpalace.store import Record, Store

MESSAGE: Final = "message"
HISTORY: Final = "history"
FACT: Final = "fact"
ARCHIVE: Final = "archive"
_MESSAGE = re.compile(r"message:([1-9][0-9]{0,17})(?:@(.+))?\Z", re.DOTALL)
_MESSAGES = re.compile(r"message:([1-9][0-9]{0,17}(?:\s*[–-]\s*[1-9][0-9]{0,17})?"
                       r"(?:\s*,\s*[1-9][0-9]{0,17}(?:\s*[–-]\s*[1-9][0-9]{0,17})?)*)(?:@(.+))?\Z", re.DOTALL)
MAX_GROUP_MESSAGES: Final = 200
"""Messages one group reference may name (a longer list is malformed: read it in parts)."""
_HISTORY = re.compile(r"history:([1-9][0-9]{0,17})\Z")
_FACT = re.compile(r"fact:(\S+:\S+)\Z")
_ARCHIVE = re.compile(rf"archive:([0-9a-f]{{{HASH_CHARS}}})\Z")
KNOWLEDGE: Final = "knowledge"
_KNOWLEDGE = re.compile(r"knowledge:(user|agent)/(\S+)\Z")


@dataclass(frozen=True, slots=True)
class MessageRef:
    """``message:<index>`` (this session) or ``message:<index>@<session>``."""

    index: int
    session: str | None = None


@dataclass(frozen=True, slots=True)
class MessagesRef:
    """``message:<a>–<b>,<c>`` (``@<session>``): runs of messages of one session, each
    ``(first, last)`` inclusive, in the order written."""

    runs: tuple[tuple[int, int], ...]
    session: str | None = None


@dataclass(frozen=True, slots=True)
class HistoryRef:
    """``history:<cursor>``: one history.jsonl entry."""

    cursor: int


@dataclass(frozen=True, slots=True)
class FactRef:
    """``fact:<entity:attribute>``: the current value of a fact."""

    key: str


@dataclass(frozen=True, slots=True)
class ArchiveRef:
    """``archive:<hash>``: one exchange of the L4 archive."""

    key: str


@dataclass(frozen=True, slots=True)
class RecordRef:
    """A step / info / snapshot record name (``step_12``)."""

    name: str


@dataclass(frozen=True, slots=True)
class KnowledgeRef:
    """``knowledge:<user|agent>/<file>``: a committed knowledge file of the session's user or agent."""

    whose: str
    file: str


Ref = MessageRef | MessagesRef | HistoryRef | FactRef | ArchiveRef | KnowledgeRef | RecordRef
"""A parsed reference."""


def parse_ref(text: str) -> Ref | None:
    """The reference `text` names, or None when it is malformed.

    A string starting with ``message:``, ``history:``, ``fact:`` or ``archive:`` must follow
    that kind's grammar (``message:0``, ``history:x``, ``fact:city`` and ``archive:zz`` are
    malformed); any other string is
    a record name (whether such a record exists is the resolver's question).

    Example:
        >>> parse_ref("message:17@trip-41")
        MessageRef(index=17, session='trip-41')
    """
    if not isinstance(text, str) or not text:
        return None
    kind = text.split(":", 1)[0]
    if kind == MESSAGE:
        m = _MESSAGE.match(text)
        if m is not None:
            return MessageRef(int(m.group(1)), m.group(2)) if m.group(2) != "" else None
        return _messages_ref(text)
    if kind == HISTORY:
        h = _HISTORY.match(text)
        return HistoryRef(int(h.group(1))) if h else None
    if kind == FACT:
        f = _FACT.match(text)
        return FactRef(f.group(1)) if f else None
    if kind == ARCHIVE:
        a = _ARCHIVE.match(text)
        return ArchiveRef(a.group(1)) if a else None
    if kind == KNOWLEDGE:
        k = _KNOWLEDGE.match(text)
        return KnowledgeRef(k.group(1), k.group(2)) if k else None
    return RecordRef(text)


def _messages_ref(text: str) -> MessagesRef | None:
    """A group reference ``message:<a>–<b>,<c>[@<session>]``, None when malformed (a run
    backwards, an empty session, more than :data:`MAX_GROUP_MESSAGES` messages)."""
    g = _MESSAGES.match(text)
    if g is None or g.group(2) == "":
        return None
    runs: list[tuple[int, int]] = []
    for item in g.group(1).split(","):
        first, _, last = item.replace("–", "-").partition("-")
        lo, hi = int(first), int(last or first)
        if hi < lo:
            return None
        runs.append((lo, hi))
    return MessagesRef(tuple(runs), g.group(2)) if _group_fits(runs) else None


def _group_fits(runs: Sequence[tuple[int, int]]) -> bool:
    """Whether well-ordered `runs` name at most :data:`MAX_GROUP_MESSAGES` messages."""
    return sum(hi - lo + 1 for lo, hi in runs) <= MAX_GROUP_MESSAGES


def group_problem(text: str) -> str | None:
    """Why `text`, shaped like a message group (``message:<a>–<b>,<c>[@<session>]``), is not
    one :func:`parse_ref` reads — a run backwards, an empty session, more than
    :data:`MAX_GROUP_MESSAGES` messages —; None when it is not that shape or is readable."""
    g = _MESSAGES.match(text)
    if g is None or _messages_ref(text) is not None:
        return None
    return (f"a message group needs runs that go forward (5–9, not 9–5), at most {MAX_GROUP_MESSAGES} "
            "messages in all (read a longer range in parts) and, after @, a session id")


def format_ref(ref: Ref) -> str:
    """The string form of `ref` (``parse_ref(format_ref(r)) == r`` for every valid ref).

    Raises:
        ValidationError: a message index or history cursor below 1, an empty session or a
            fact key without ``entity:attribute``.
    """
    if isinstance(ref, MessageRef):
        if ref.index < 1 or ref.session == "":
            raise ValidationError(f"a message reference needs an index ≥ 1 and a non-empty session, got {ref}")
        return f"message:{ref.index}" + (f"@{ref.session}" if ref.session is not None else "")
    if isinstance(ref, MessagesRef):
        if (not ref.runs or ref.session == "" or any(lo < 1 or hi < lo for lo, hi in ref.runs)
                or not _group_fits(ref.runs)):
            raise ValidationError(f"a message group needs runs of indexes ≥ 1, at most {MAX_GROUP_MESSAGES} "
                                  f"messages and a non-empty session, got {ref}")
        runs = ",".join(str(lo) if lo == hi else f"{lo}–{hi}" for lo, hi in ref.runs)
        return f"message:{runs}" + (f"@{ref.session}" if ref.session is not None else "")
    if isinstance(ref, HistoryRef):
        if ref.cursor < 1:
            raise ValidationError(f"a history cursor is ≥ 1, got {ref.cursor}")
        return f"history:{ref.cursor}"
    if isinstance(ref, FactRef):
        if _FACT.match(f"fact:{ref.key}") is None:
            raise ValidationError(f"a fact reference needs an entity:attribute key, got {ref.key!r}")
        return f"fact:{ref.key}"
    if isinstance(ref, ArchiveRef):
        if _ARCHIVE.match(f"archive:{ref.key}") is None:
            raise ValidationError(f"an archive reference needs a {HASH_CHARS}-hex-digit hash, got {ref.key!r}")
        return f"archive:{ref.key}"
    if isinstance(ref, KnowledgeRef):
        if _KNOWLEDGE.match(f"knowledge:{ref.whose}/{ref.file}") is None:
            raise ValidationError(f"a knowledge reference is knowledge:<user|agent>/<file>, got {ref}")
        return f"knowledge:{ref.whose}/{ref.file}"
    return ref.name


def message_ref(index: int, session: str | None = None) -> str:
    """``message:<index>`` (``@<session>`` for another session)."""
    return format_ref(MessageRef(index, session))


def history_ref(cursor: int) -> str:
    """``history:<cursor>``."""
    return format_ref(HistoryRef(cursor))


def archive_ref(key: str) -> str:
    """``archive:<hash>``."""
    return format_ref(ArchiveRef(key))


KnowledgeReader = Callable[[str, str], str | None]
"""``reader(whose, file)`` → the committed text of the user's / agent's knowledge file, None when
absent (it may raise a MindPalaceError for a bad name: the reference is then missing)."""
FactReader = Callable[[str], object | None]
"""Returns the current fact of a key (anything with ``key``, ``content``, ``id``,
``created_at``), None when unknown; :meth:`mindpalace.facts.FactMemory.get` is one."""


class RefResolver:
    """Loads the full raw text behind references, scoped to one session (I10).

    Example:
        >>> r = RefResolver(store, scope, history=history, facts=fact_memory.get)  # doctest: +SKIP
        >>> r.read(["message:17", "history:3", "step_12", "nope"]).missing          # doctest: +SKIP
        ['nope']

    Args:
        store: the store protocol (messages, records, the history index).
        scope: the concrete session scope; references resolve inside its tenant / user / agent.
        history: the history.jsonl log (read when an entry is not in the store's index).
        facts: reads the current value of a fact key; None = ``fact:`` refs are missing.
        archive: the tenant's L4 archive; None = ``archive:`` refs are missing.
        knowledge: reads a committed knowledge file; None = ``knowledge:`` refs are missing.
    """

    def __init__(
        self, store: Store, scope: Scope, *, history: HistoryLog | None = None,
        facts: FactReader | None = None, archive: SessionArchive | None = None,
        knowledge: KnowledgeReader | None = None,
    ) -> None:
        self.knowledge = knowledge
        self.store = store
        self.scope = scope.require_concrete()
        self.history = history
        self.facts = facts
        self.archive = archive
        self.records = RecordBook(store, self.scope)

    def read(self, names: Iterable[str]) -> ReadResult:
        """The records behind `names`, in request order (duplicates once), as
        :class:`~mindpalace.store.Record` s named by the asked string; everything not found,
        malformed or out of scope is in ``missing``. A single string is one name.

        Raises:
            ValidationError: `names` is not a string or an iterable of names.
        """
        if isinstance(names, str):
            names = [names]
        elif not isinstance(names, Iterable):
            raise ValidationError(f"record names must be a list of names, got {type(names).__name__}")
        asked: list[str] = []
        for name in names:
            name = name if isinstance(name, str) else str(name)
            if name not in asked:
                asked.append(name)
        found: dict[str, Record] = {}
        plain: list[str] = []
        for name in asked:
            ref = parse_ref(name)
            if isinstance(ref, RecordRef):
                plain.append(name)
            elif ref is not None and (record := self._resolve(name, ref)) is not None:
                found[name] = record
        if plain:
            found.update(self.records.read(plain).found)
        missing = [n for n in asked if n not in found]
        problems = {n: why for n in missing if (why := group_problem(n))}
        return ReadResult({n: found[n] for n in asked if n in found}, missing, problems)

    def _resolve(self, name: str, ref: Ref) -> Record | None:
        try:
            if isinstance(ref, MessageRef):
                return self._message(name, ref)
            if isinstance(ref, MessagesRef):
                return self._messages(name, ref)
            if isinstance(ref, HistoryRef):
                return self._history(name, ref)
            if isinstance(ref, FactRef):
                return self._fact(name, ref)
            if isinstance(ref, ArchiveRef):
                return self._archive(name, ref)
            if isinstance(ref, KnowledgeRef):
                return self._knowledge(name, ref)
        except MindPalaceError:  # a session id or key the scope / fact rules refuse: not found
            return None
        return None

    def _message(self, name: str, ref: MessageRef) -> Record | None:
        scope = self.scope if ref.session is None else self.scope.with_(session=ref.session)
        got = MessageLog(self.store, scope).list(from_index=ref.index, to_index=ref.index)
        if not got:
            return None
        m = got[0]
        msg = m.message
        content = msg.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        body = content if isinstance(content, str) else ""
        meta = {k: msg[k] for k in ("role", "name", "tool_call_id") if msg.get(k)}
        if msg.get("tool_calls"):
            meta["tool_calls"] = msg["tool_calls"]
        return Record(scope, name, MESSAGE, body,
                      description=f"message {m.index} ({msg.get('role')}) of session {scope.session}",
                      created_at=m.timestamp, meta=meta)

    def _messages(self, name: str, ref: MessagesRef) -> Record | None:
        """The messages a group names, as ``[N] speaker: text`` lines in the order named (each
        once); None when none of them exists."""
        scope = self.scope if ref.session is None else self.scope.with_(session=ref.session)
        log = MessageLog(self.store, scope)
        found: dict[int, StoredMessage] = {}
        for lo, hi in ref.runs:
            for m in log.list(from_index=lo, to_index=hi):
                found.setdefault(m.index, m)
        if not found:
            return None
        shown = list(found.values())
        body = "\n".join(f"[{m.index}] {message_text(m.message)}" for m in shown)
        return Record(scope, name, MESSAGE, body,
                      description=f"messages {format_ref(replace(ref, session=None))[len(MESSAGE) + 1:]} "
                                  f"of session {scope.session}",
                      created_at=shown[0].timestamp, meta={"messages": [m.index for m in shown]})

    def _history(self, name: str, ref: HistoryRef) -> Record | None:
        within = self.scope.with_(session="")  # same tenant / user / agent, any session
        doc = self.store.get_documents_by_ref(self.scope, HISTORY_KIND, [str(ref.cursor)]).get(
            str(ref.cursor))
        if doc is not None:  # the common case: an entry of this session, from the store's index
            return self._history_record(name, doc.scope, doc.text, doc.meta)
        entries = self.history.read(ref.cursor - 1, limit=1) if self.history else []
        entry = entries[0] if entries and entries[0].cursor == ref.cursor else None
        if entry is None or entry.scope.values()[:3] != within.values()[:3]:
            return None
        meta: dict[str, object] = {"kind": entry.kind,
                                   "messages": list(entry.messages) if entry.messages else None}
        return self._history_record(name, entry.scope, entry.content, meta)

    @staticmethod
    def _history_record(name: str, scope: Scope, text: str, meta: dict[str, object]) -> Record:
        rng = meta.get("messages")
        what = f"messages {rng[0]}-{rng[1]}" if isinstance(rng, list) and len(rng) == 2 else "a range"
        return Record(scope, name, HISTORY, text,
                      description=f"history entry ({meta.get('kind')}) archiving {what} of session "
                                  f"{scope.session}",
                      meta={k: v for k, v in meta.items() if k in ("kind", "messages") and v})

    def _fact(self, name: str, ref: FactRef) -> Record | None:
        if self.facts is None:
            return None
        fact = self.facts(ref.key)
        if fact is None:
            return None
        content = getattr(fact, "content", None)
        if not isinstance(content, str):
            return None
        return Record(self.scope, name, FACT, content,
                      description=f"current value of {getattr(fact, 'key', ref.key)}",
                      created_at=getattr(fact, "created_at", None),
                      meta={"id": getattr(fact, "id", "") or "working memory"})

    def _archive(self, name: str, ref: ArchiveRef) -> Record | None:
        if self.archive is None:
            return None
        found = self.archive.read(self.scope, ref.key)
        if found is None:
            return None
        return Record(self.scope.with_(session=found.session), name, ARCHIVE, found.text(),
                      description=f"archived exchange (messages {found.first}-{found.last} of "
                                  f"session {found.session}, {found.month})",
                      created_at=found.started_at,
                      meta={"month": found.month, "messages": [found.first, found.last],
                            "turns": [t.to_json() for t in found.turns]})

    def _knowledge(self, name: str, ref: KnowledgeRef) -> Record | None:
        if self.knowledge is None:
            return None
        text = self.knowledge(ref.whose, ref.file)
        if text is None:
            return None
        return Record(self.scope, name, KNOWLEDGE, text,
                      description=f"knowledge file {ref.file} of the session's {ref.whose} (last commit)")
