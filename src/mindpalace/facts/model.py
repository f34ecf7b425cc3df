"""The fact: one structured memory item ``entity:attribute → content`` (seed 001, Recuris §4.1).

A fact is JSON-serialisable (it lives in the store's kv namespace ``facts``), has timezone-aware
UTC timestamps only, and carries the access statistics working-memory eviction and recall use.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

from mindpalace.errors import ValidationError
from mindpalace.textsafe import require_text
from mindpalace.timeutil import from_iso, require_aware, to_iso, utcnow

_SPACES = re.compile(r"\s+")
MAX_KEY_CHARS = 200  # keys are identifiers, not content; long ones are a caller bug
SECONDS_PER_DAY = 86_400.0


def normalize_key(key: str) -> str:
    """The canonical form of an ``entity:attribute`` key (seed 001 §6.1: one key rule everywhere).

    NFKC, lower case, surrounding spaces stripped, inner whitespace runs → ``_``; the part
    before the first ``:`` is the entity, the rest the attribute; spaces around that ``:`` are
    dropped. ``" User : Home City"`` → ``"user:home_city"``.

    Raises:
        ValidationError: not a string, no ``:``, an empty entity or attribute, a ``#`` (reserved
            for fact ids), NUL, or longer than 200 characters.
    """
    text = require_text("fact key", key, allow_empty=False)
    shown = text if len(text) <= 60 else text[:60] + "…"  # messages quote a bounded prefix
    text = unicodedata.normalize("NFKC", text).strip().lower()
    entity, sep, attribute = text.partition(":")
    entity, attribute = _SPACES.sub("_", entity.strip()), _SPACES.sub("_", attribute.strip())
    if not sep or not entity or not attribute:
        raise ValidationError(f"fact key {shown!r} must look like 'entity:attribute', e.g. 'user:uid'")
    if "#" in entity or "#" in attribute:
        raise ValidationError(f"fact key {shown!r} must not contain '#' (reserved for fact ids)")
    out = f"{entity}:{attribute}"
    if len(out) > MAX_KEY_CHARS:
        raise ValidationError(f"fact key {shown!r} is over {MAX_KEY_CHARS} characters ({len(out)})")
    return out


def normalize_content(content: str) -> str:
    """Content as compared for de-duplication: NFKC with whitespace runs collapsed and stripped."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", content)).strip()


def require_importance(value: float) -> float:
    """`value` as a float in [0, 1]; raises ValidationError otherwise (NaN included)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValidationError(f"importance must be a number between 0 and 1, got {value!r}")
    return float(value)


@dataclass(slots=True)
class Fact:
    """One fact (seed 001 ``MemoryItem``, extended with provenance and history).

    Attributes:
        key: normalized ``entity:attribute`` key.
        content: the value, as text.
        importance: 0–1; at or above ``facts.importance_threshold`` it is kept long-term.
        source: where it came from (a message index, step id or tool-call id; free text).
        id: ``"<key>#<n>"`` once stored long-term (n counts the key's versions from 1 and is
            never reused); ``""`` for a working-memory-only item.
        created_at / last_access_at: aware UTC datetimes.
        access_count: recall hits so far.
        valid_from: since when the value holds (defaults to created_at).
        superseded_by: id of the newer value of the same key, if any (then not current).
        deleted_at: tombstone time, if forgotten (then never current again).
    """

    key: str
    content: str
    importance: float = 0.5
    source: str = ""
    id: str = ""
    created_at: datetime = field(default_factory=utcnow)
    last_access_at: datetime | None = None
    access_count: int = 0
    valid_from: datetime | None = None
    superseded_by: str | None = None
    deleted_at: datetime | None = None

    def __post_init__(self) -> None:
        self.key = normalize_key(self.key)
        self.content = require_text("fact content", self.content, allow_empty=False)
        self.importance = require_importance(self.importance)
        self.source = require_text("fact source", self.source)
        self.created_at = require_aware("created_at", self.created_at)
        self.last_access_at = require_aware(
            "last_access_at", self.last_access_at or self.created_at
        )
        self.valid_from = require_aware("valid_from", self.valid_from or self.created_at)
        if self.deleted_at is not None:
            self.deleted_at = require_aware("deleted_at", self.deleted_at)

    @property
    def current(self) -> bool:
        """True when neither superseded nor deleted (the value recall may return)."""
        return self.superseded_by is None and self.deleted_at is None

    def same_value(self, key: str, content: str) -> bool:
        """True when (`key`, `content`) is this fact after normalization (de-duplication)."""
        return self.key == normalize_key(key) and normalize_content(self.content) == normalize_content(content)

    def touched(self, now: datetime) -> Fact:
        """A copy with one more access at `now` (recall hit / promotion)."""
        return replace(self, access_count=self.access_count + 1, last_access_at=now)

    def effective_importance(self, now: datetime, half_life_days: float) -> float:
        """Importance decayed by time since last access: ``importance · 0.5^(age / half_life)``.

        ``half_life_days <= 0`` disables decay (the default). Seed 001 §7.4: long-term memory
        with time decay and forgetting.
        """
        if half_life_days <= 0:
            return self.importance
        age_days = max(0.0, (now - (self.last_access_at or self.created_at)).total_seconds())
        return self.importance * math.pow(0.5, age_days / SECONDS_PER_DAY / half_life_days)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (ISO 8601 timestamps)."""
        # Built by hand: dataclasses.asdict deep-copies every field (it dominated recall time).
        data: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        for name in ("created_at", "last_access_at", "valid_from", "deleted_at"):
            if data[name] is not None:
                data[name] = to_iso(data[name])
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fact:
        """Inverse of :meth:`to_json`."""
        values = dict(data)
        for name in ("created_at", "last_access_at", "valid_from", "deleted_at"):
            if values.get(name) is not None:
                values[name] = from_iso(values[name])
        return cls(**values)


_FIELDS = tuple(f.name for f in fields(Fact))
