"""Where knowledge lives: scopes, file names, layers, and path validation (seed 003 L0–L3,
seed 002 SOUL/USER/MEMORY).

The workspace's ``knowledge/`` folder is one git repository; each scope owns one folder::

    knowledge/
    ├── README.md
    └── <tenant>/
        ├── agents/<agent>/     agent-wide files (the agent's)
        └── users/<user>/       one user's files (that user's)
            ├── SOUL.md          identity and tone
            ├── USER.md          stable user facts and preferences
            ├── MEMORY.md        project facts and decisions
            ├── L0_rules.md      the memory rules
            ├── L1_index.md      the insight index: ≤ 30 lines, pointers only (keywords → file)
            ├── L2_facts.md      environment facts: paths, ids, configuration
            ├── L3/<name>.md     task procedures: preconditions, pitfalls, key steps
            ├── L3/<name>.py|sh  task scripts
            └── .dream_cursor    the history.jsonl cursor the dream has consumed up to

Every file may exist in either scope; by convention SOUL.md and L0_rules.md are agent-wide
and USER.md is per user. Folder names are the scope names, percent-encoded when they hold
anything but letters, digits and ``_ - @ +`` (so no scope name can traverse or hide a folder).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Final, Literal
from urllib.parse import quote, unquote

from mindpalace.errors import KnowledgeError
from mindpalace.scope import Scope
from mindpalace.textsafe import require_text

ScopeKind = Literal["user", "agent"]
CURSOR_FILE: Final = ".dream_cursor"
SOUL, USER, MEMORY = "SOUL.md", "USER.md", "MEMORY.md"
L0, L1, L2 = "L0_rules.md", "L1_index.md", "L2_facts.md"
L3_DIR: Final = "L3"
TOP_FILES: Final = (SOUL, USER, MEMORY, L0, L1, L2)
INJECTED_FILES: Final = (SOUL, USER, MEMORY, L0, L1)
"""Files put in every prompt (prompt order); L2 and L3 reach it through recall or by pointer."""
L3_SUFFIXES: Final = (".md", ".py", ".sh")
MAX_FILE_BYTES: Final = 256 * 1024  # a knowledge file is curated text; larger is a mistake
_L3_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9_@+-][A-Za-z0-9_@+.-]*$")


class Layer(StrEnum):
    """What a file is, which decides the axioms its writes must keep."""

    SOUL = "soul"
    USER = "user"
    MEMORY = "memory"
    L0 = "L0"
    L1 = "L1"
    L2 = "L2"
    L3 = "L3"
    CURSOR = "cursor"


_LAYER_OF: Final = {SOUL: Layer.SOUL, USER: Layer.USER, MEMORY: Layer.MEMORY, L0: Layer.L0,
                    L1: Layer.L1, L2: Layer.L2, CURSOR_FILE: Layer.CURSOR}


@dataclass(frozen=True, slots=True)
class KnowledgeScope:
    """Whose knowledge: one user's (``kind="user"``) or one agent's (``kind="agent"``), in a
    tenant. ``str(scope)`` is ``user:<name>`` / ``agent:<name>``.

    Raises:
        KnowledgeError: empty name, unknown kind, text that cannot be stored.
    """

    tenant: str
    kind: ScopeKind
    name: str

    def __post_init__(self) -> None:
        if self.kind not in ("user", "agent"):
            raise KnowledgeError(f"knowledge scope kind must be 'user' or 'agent', got {self.kind!r}")
        for field, value in (("tenant", self.tenant), ("name", self.name)):
            try:
                require_text(f"knowledge scope {field}", value, allow_empty=False)
            except Exception as exc:
                raise KnowledgeError(f"knowledge scope {field} {value!r}: {exc}") from exc
            if len(value) > 200:
                raise KnowledgeError(f"knowledge scope {field} is over 200 characters")

    @classmethod
    def user(cls, name: str, tenant: str = "default") -> KnowledgeScope:
        return cls(tenant, "user", name)

    @classmethod
    def agent(cls, name: str, tenant: str = "default") -> KnowledgeScope:
        return cls(tenant, "agent", name)

    @classmethod
    def parse(cls, text: str, tenant: str = "default") -> KnowledgeScope:
        """``user:<name>`` or ``agent:<name>`` → a scope. Raises KnowledgeError otherwise."""
        kind, sep, name = str(text).partition(":")
        if not sep or kind not in ("user", "agent"):
            raise KnowledgeError(f"knowledge scope {text!r}: expected 'user:<name>' or 'agent:<name>'")
        return cls(tenant, kind, name)  # type: ignore[arg-type]

    @property
    def folder(self) -> str:
        """The scope's folder inside the knowledge repository, e.g. ``default/users/u1``."""
        return f"{_segment(self.tenant)}/{self.kind}s/{_segment(self.name)}"

    @property
    def store_scope(self) -> Scope:
        """Where its recall documents are indexed: ``(tenant, user, "", "")`` for a user,
        ``(tenant, "", agent, "")`` for an agent (I10: a user's knowledge is found only by
        that user's sessions)."""
        if self.kind == "user":
            return Scope(self.tenant, self.name, "", "")
        return Scope(self.tenant, "", self.name, "")

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def _segment(name: str) -> str:
    """A scope name as one safe folder name: kept when plain, else percent-encoded."""
    if _SAFE_SEGMENT.match(name) and name not in (".", ".."):
        return name
    return quote(name, safe="").replace(".", "%2E")


def segment_name(segment: str) -> str:
    """The scope name a folder name stands for (inverse of the encoding)."""
    return unquote(segment)


def check_file(name: str) -> str:
    """Validate a knowledge file name relative to its scope folder and return it normalised
    (``L3/deploy.md``). Allowed: the six top files, ``L3/<name>.md|.py|.sh`` and the cursor.

    Raises:
        KnowledgeError: absolute paths, ``..``, backslashes, empty parts, hidden files, NUL,
            or a name outside the layout (naming what is allowed).
    """
    if not isinstance(name, str) or not name:
        raise KnowledgeError(f"knowledge file name must be a non-empty string, got {name!r}")
    if "\x00" in name or "\\" in name:
        raise KnowledgeError(f"knowledge file {name!r}: NUL and backslashes are not allowed")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise KnowledgeError(f"knowledge file {name!r}: absolute paths are not allowed; "
                             "name it relative to the scope, e.g. 'L3/deploy.md'")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise KnowledgeError(f"knowledge file {name!r}: '..', '.' and empty path parts are not allowed")
    if name in TOP_FILES or name == CURSOR_FILE:
        return name
    if len(parts) == 2 and parts[0] == L3_DIR and _L3_NAME.match(parts[1]) \
            and parts[1].endswith(L3_SUFFIXES):
        return name
    raise KnowledgeError(
        f"knowledge file {name!r} is not part of the layout: use one of {', '.join(TOP_FILES)} "
        f"or L3/<name> ending in {', '.join(L3_SUFFIXES)}")


def layer_of(name: str) -> Layer:
    """The layer of a validated file name."""
    if name.startswith(L3_DIR + "/"):
        return Layer.L3
    return _LAYER_OF[name]


def scope_of_folder(folder: str) -> KnowledgeScope | None:
    """The scope a repository folder ``<tenant>/<kind>s/<name>`` belongs to, else None."""
    parts = PurePosixPath(folder).parts
    if len(parts) != 3 or parts[1] not in ("users", "agents"):
        return None
    kind: ScopeKind = "user" if parts[1] == "users" else "agent"
    return KnowledgeScope(segment_name(parts[0]), kind, segment_name(parts[2]))
