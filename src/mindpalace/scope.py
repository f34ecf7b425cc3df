"""Scope: the tenant / user / agent / session a piece of memory belongs to (I10)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mindpalace.errors import ValidationError
from mindpalace.textsafe import require_text

SCOPE_FIELDS: Final = ("tenant", "user", "agent", "session")


class _AnyScope:
    """Sentinel: this scope field is not filtered (matches every value). Only for reads."""

    _instance: _AnyScope | None = None

    def __new__(cls) -> _AnyScope:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ANY"


ANY: Final = _AnyScope()


@dataclass(frozen=True, slots=True)
class Scope:
    """Who a row belongs to. Every table has these four columns and every query filters on them.

    A write needs a concrete scope (all four fields strings; ``""`` = not set, e.g. a
    user-level fact has ``session=""``). A read may set a field to :data:`ANY` to widen it,
    e.g. ``Scope("t", "u1", ANY, ANY)`` reads everything of user ``u1`` in tenant ``t``;
    the tenant can never be ANY.

    Raises:
        ValidationError: a field is not a string / ANY, contains NUL or a lone surrogate, is
            over 200 characters, or the tenant is ANY.
    """

    tenant: str = "default"
    user: str | _AnyScope = ""
    agent: str | _AnyScope = ""
    session: str | _AnyScope = ""

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, str):
            raise ValidationError("scope.tenant must be a concrete string (it can never be ANY)")
        for name in SCOPE_FIELDS:
            value = getattr(self, name)
            if value is ANY:
                continue
            if not isinstance(value, str):
                raise ValidationError(f"scope.{name} must be a string, got {type(value).__name__}")
            if "\x00" in value or len(value) > 200:
                raise ValidationError(f"scope.{name} must be under 200 characters without NUL")
            require_text(f"scope.{name}", value)  # lone surrogates: sqlite cannot encode them

    @property
    def concrete(self) -> bool:
        """True when no field is ANY (the scope can be written to)."""
        # the tenant is never ANY (__post_init__); spelled out: it runs on every read and write
        return self.user is not ANY and self.agent is not ANY and self.session is not ANY

    def require_concrete(self) -> Scope:
        """Return self, or raise ValidationError if a field is ANY (writes need concrete scopes)."""
        if not self.concrete:
            raise ValidationError(f"a write needs a concrete scope, got {self}")
        return self

    def with_(
        self,
        *,
        tenant: str | None = None,
        user: str | _AnyScope | None = None,
        agent: str | _AnyScope | None = None,
        session: str | _AnyScope | None = None,
    ) -> Scope:
        """A copy with some fields changed (None = unchanged), e.g. ``scope.with_(session=ANY)``."""
        return Scope(
            self.tenant if tenant is None else tenant,
            self.user if user is None else user,
            self.agent if agent is None else agent,
            self.session if session is None else session,
        )

    def values(self) -> tuple[str | _AnyScope, ...]:
        return (self.tenant, self.user, self.agent, self.session)

    def __str__(self) -> str:
        return "/".join(v or "-" if isinstance(v, str) else repr(v) for v in self.values())


def covers(wide: Scope, narrow: Scope) -> bool:
    """True when every row of `narrow` is also in `wide` (each field equal, or ANY in `wide`)."""
    return all(w is ANY or w == n for w, n in zip(wide.values(), narrow.values(), strict=True))


def add_scopes(base: list[Scope], extra: Sequence[Scope]) -> list[Scope]:
    """`base` plus the scopes of `extra` that no scope of it covers already (so a search over
    the list never reads a row twice)."""
    out = list(base)
    for scope in extra:
        if not any(covers(s, scope) for s in out):
            out.append(scope)
    return out
