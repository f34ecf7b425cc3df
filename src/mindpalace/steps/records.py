"""Named raw records of a session (seed 000's RecordStore): step, info and snapshot records.

A record is stored through :meth:`Store.put_record` (so its body is also keyword-searchable as
kind = record type) and rendered for the model as markdown with a YAML front matter
(``name, description, type, step_id, created_at`` plus any extra metadata such as the names a
snapshot covers). Names are validated with :func:`mindpalace.textsafe.require_name` and every
read and write is filtered by the session scope (I10).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mindpalace.errors import InvalidNameError, ValidationError
from mindpalace.scope import Scope
from mindpalace.store import Record, Store
from mindpalace.textsafe import clean_text, require_name, require_text
from mindpalace.timeutil import to_iso

STEP: Final = "step"
INFO: Final = "info"
SNAPSHOT: Final = "snapshot"
OUTPUT: Final = "output"  # a tool output too long for its step record, kept whole
RECORD_TYPES: Final = frozenset({STEP, INFO, SNAPSHOT, OUTPUT})

SNAPSHOT_DESCRIPTION: Final = "Pre-summarization snapshot of recent memory at step {step}"
SUMMARY_SNAPSHOT_DESCRIPTION: Final = "Pre-summarization snapshot of summary memory at step {step}"


def step_record_name(step_id: int) -> str:
    """``step_N`` — the record of step N."""
    return f"step_{step_id}"


def output_record_name(step_id: int, index: int) -> str:
    """``step_N.output_I`` — the whole I-th (1-based) tool output of step N, when it was too
    long to keep in full in ``step_N``."""
    return f"step_{step_id}.output_{index}"


def snapshot_record_name(tier: str, step_id: int) -> str:
    """``memory_snapshot_recent_step_N`` / ``memory_snapshot_summary_step_N``."""
    return f"memory_snapshot_{tier}_step_{step_id}"


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Outcome of a read-by-name: the records found (in request order) and the names not found.

    ``missing`` holds unknown names and names that are not valid record names; nothing is raised
    for them, so a model asking for a wrong name is told so by name (seed 000 read_files).
    ``problems`` says, for a missing name whose form is wrong (a message group over the size
    limit, a run backwards), what rule it broke, so the model can ask again correctly.
    """

    found: dict[str, Record] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)

    def missing_line(self) -> str:
        """``Not found: a, b (why)`` naming every missing name, with its problem if known; ""
        when nothing is missing."""
        if not self.missing:
            return ""
        return "Not found: " + ", ".join(
            f"{n} ({self.problems[n]})" if n in self.problems else n for n in self.missing)

    def render(self) -> str:
        """Full markdown of every found record, then a line naming the missing ones."""
        parts = [render_record(r) for r in self.found.values()]
        if self.missing:
            parts.append(self.missing_line())
        return "\n\n".join(parts)


def render_record(record: Record) -> str:
    """Markdown with YAML front matter, e.g.::

        ---
        name: step_12
        description: 'Step 12 (success): click Next'
        type: step
        step_id: 12
        created_at: '2026-11-30T20:01:02+00:00'
        ---
        Goal: click Next
        …
    """
    head: dict[str, Any] = {
        "name": record.name,
        "description": record.description,
        "type": record.type,
        "step_id": record.step_id,
        "created_at": to_iso(record.created_at) if record.created_at else None,
    }
    for key, value in record.meta.items():
        head.setdefault(key, value)
    import yaml  # on first use: reading a memory renders and parses no record (~1 MB)

    front = yaml.safe_dump(head, allow_unicode=True, sort_keys=False, width=10_000).strip()
    return f"---\n{front}\n---\n{record.body}"


def parse_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Inverse of :func:`render_record`: (front matter dict, body). No front matter → ({}, text)."""
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---\n", 4)
    if end < 0:
        return {}, text
    import yaml

    head = yaml.safe_load(text[4:end]) or {}
    return (head if isinstance(head, dict) else {}), text[end + 5 :]


class RecordBook:
    """The records of one session scope.

    Args:
        store: the persistence protocol.
        scope: a concrete session scope; reads and writes never leave it.
    """

    def __init__(self, store: Store, scope: Scope) -> None:
        self.store = store
        self.scope = scope.require_concrete()

    def put(
        self,
        name: str,
        type: str,
        body: str,
        *,
        description: str = "",
        step_id: int | None = None,
        meta: dict[str, Any] | None = None,
        overwrite: bool = True,
    ) -> Record:
        """Store (or replace) one record; returns it with its created_at.

        Raises:
            InvalidNameError: `name` has path separators, ``..``, is empty or over 128 chars.
            InvalidTextError: body / description are not storable text.
            ValidationError: `overwrite` is False and the name exists.
        """
        require_name(name, field="record name")
        require_text("record.type", type, allow_empty=False)
        record = Record(
            self.scope, name, type, clean_text(require_text("record.body", body)),
            clean_text(require_text("record.description", description)), step_id,
            meta=dict(meta or {}),
        )
        return self.store.put_record(record, overwrite=overwrite)

    def put_info(self, name: str, body: str, *, description: str, step_id: int | None = None) -> Record:
        """A user-provided fact (e.g. ``user_profile``) the model can load by name."""
        return self.put(name, INFO, body, description=description, step_id=step_id)

    def get(self, name: str) -> Record:
        """One record. Raises NotFoundError naming it, InvalidNameError for a bad name."""
        require_name(name, field="record name")
        return self.store.get_record(self.scope, name)

    def read(self, names: Iterable[str]) -> ReadResult:
        """Records by name, in request order (duplicates once); unknown or invalid names are
        returned in ``missing`` rather than raised. A single string is one name (as in the
        read_files protocol), never iterated character by character."""
        if isinstance(names, str):
            names = [names]
        elif not isinstance(names, Iterable):
            raise ValidationError(f"record names must be a list of names, got {type(names).__name__}")
        asked: list[str] = []
        valid: list[str] = []
        for name in names:
            name = name if isinstance(name, str) else str(name)
            if name in asked:
                continue
            asked.append(name)
            with contextlib.suppress(InvalidNameError):
                valid.append(require_name(name, field="record name"))
        got = self.store.get_records(self.scope, valid)
        found = {n: got[n] for n in asked if n in got}
        return ReadResult(found, [n for n in asked if n not in got])

    def list(self, *, type: str | None = None, limit: int | None = None) -> list[Record]:
        """Records newest first, optionally of one type and at most `limit`."""
        return self.store.list_records(self.scope, type=type, limit=limit)

    def exists(self, names: Sequence[str]) -> set[str]:
        """The subset of `names` that exist."""
        return set(self.store.get_records(self.scope, list(names)))
