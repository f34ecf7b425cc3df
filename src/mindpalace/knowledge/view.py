"""One session's view of the knowledge base: its user's and its agent's scopes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mindpalace.errors import KnowledgeError
from mindpalace.knowledge.base import KnowledgeBase, SyncReport
from mindpalace.knowledge.gitstore import Commit
from mindpalace.knowledge.layout import KnowledgeScope
from mindpalace.knowledge.patches import Patch
from mindpalace.scope import Scope

Whose = Literal["user", "agent"]


@dataclass(frozen=True)
class SessionKnowledge:
    """``Session.knowledge``: the knowledge base seen from one session — the scope of its user
    (``user``) and of its agent (``agent``); either is None when the session has no user /
    agent.

    Attributes:
        base: the workspace's :class:`KnowledgeBase` (every scope).
    """

    base: KnowledgeBase
    user: KnowledgeScope | None
    agent: KnowledgeScope | None

    @classmethod
    def of(cls, base: KnowledgeBase, scope: Scope) -> SessionKnowledge:
        user = KnowledgeScope.user(str(scope.user), scope.tenant) if scope.user else None
        agent = KnowledgeScope.agent(str(scope.agent), scope.tenant) if scope.agent else None
        return cls(base, user, agent)

    @property
    def scopes(self) -> list[KnowledgeScope]:
        """The agent's scope, then the user's (prompt order: agent-wide first)."""
        return [s for s in (self.agent, self.user) if s is not None]

    def scope(self, whose: Whose = "user") -> KnowledgeScope:
        """The user's or the agent's scope. Raises KnowledgeError when the session has none."""
        found = self.user if whose == "user" else self.agent if whose == "agent" else None
        if found is None:
            raise KnowledgeError(f"this session has no {whose!r} scope (give Memory.session "
                                 f"a {whose}=…) — or whose must be 'user' or 'agent'")
        return found

    def read(self, file: str, *, whose: Whose = "user") -> str | None:
        """The committed text of `file` in the user's (or agent's) scope; None when absent."""
        return self.base.read(self.scope(whose), file)

    def apply(self, patches: Sequence[Patch], *, whose: Whose = "user", author: str = "api",
              message: str, dream_cursor: int | None = None) -> Commit | None:
        """:meth:`KnowledgeBase.apply` on the user's (or agent's) scope."""
        return self.base.apply(self.scope(whose), patches, author=author, message=message,
                               dream_cursor=dream_cursor)

    def sync(self, *, wait: bool = True) -> list[SyncReport]:
        """:meth:`KnowledgeBase.sync` of both scopes (hand edits noticed, committed, indexed);
        with ``wait=False`` a scope another writer holds is skipped."""
        return [r for r in (self.base.sync(s, wait=wait) for s in self.scopes) if r is not None]
