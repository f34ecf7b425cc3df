"""API keys per tenant: issued once, stored hashed, verified in constant time (DESIGN.md I10).

A key's secret looks like ``mp_<key id>_<token>``: the 16-hex-digit key id finds the stored row
in one lookup, the token is 32 random bytes (URL-safe base64). Only the SHA-256 of the whole
secret is stored — a slow password hash (scrypt, argon2) protects guessable passwords, while a
256-bit random token cannot be brute-forced from its hash, and verification runs on every request.

Keys live in the store's key/value state under a reserved admin scope (tenant
``mindpalace:admin``) that no tenant can name: tenant names are letters, digits and ``_ . -``,
so no key — and no route scoped by a key — ever reaches it.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from mindpalace.errors import AuthError, PermissionDeniedError, ValidationError
from mindpalace.scope import Scope
from mindpalace.store import Store
from mindpalace.textsafe import require_text
from mindpalace.timeutil import from_iso, to_iso, utcnow

ADMIN_SCOPE: Final = Scope("mindpalace:admin")
"""Where keys are stored: a tenant name no API key can carry (``:`` is not allowed in one)."""
NAMESPACE: Final = "api_keys"
SCOPES: Final = ("read", "write")
"""``read``: every GET route and pure builds; ``write``: anything that stores or deletes."""

PREFIX: Final = "mp_"
KEY_ID_HEX: Final = 16  # 64 random bits: collisions are negligible, and it is not the secret
TOKEN_BYTES: Final = 32  # 256 bits of entropy: unguessable, so a fast hash is enough
MAX_KEY_NAME_CHARS: Final = 200
_TENANT_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SECRET_OK = re.compile(rf"^{PREFIX}([0-9a-f]{{{KEY_ID_HEX}}})_([A-Za-z0-9_-]{{20,100}})$")


def require_tenant(value: Any) -> str:
    """Return `value` when it is a tenant name an API key may carry, else raise.

    Raises:
        ValidationError: not 1–64 characters of letters, digits and ``_ . -`` starting with a
            letter or digit (so the reserved admin tenant can never be named).
    """
    if not isinstance(value, str) or not _TENANT_OK.match(value):
        raise ValidationError(
            f"tenant {value!r}: use 1-64 letters, digits and _ . - starting with a letter or digit"
        )
    return value


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key as stored (never the secret).

    Attributes:
        id: the key id (16 hex digits), also the second part of the secret.
        tenant: the tenant every request with this key is scoped to.
        name: a label for people ("ci", "planner-agent").
        scopes: what it may do, a subset of ``("read", "write")``.
        created_at / revoked_at: timezone-aware UTC; revoked_at None while the key is live.
    """

    id: str
    tenant: str
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def require(self, scope: str) -> ApiKey:
        """Return self when the key has `scope`, else raise PermissionDeniedError (HTTP 403)."""
        if scope not in self.scopes:
            raise PermissionDeniedError(self.id, scope, self.scopes)
        return self

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "tenant": self.tenant, "name": self.name,
                "scopes": list(self.scopes), "created_at": to_iso(self.created_at),
                "revoked_at": None if self.revoked_at is None else to_iso(self.revoked_at)}


class ApiKeys:
    """Create, verify, list and revoke the API keys of every tenant of one store.

    Args:
        store: the workspace's store; keys are kv rows in :data:`ADMIN_SCOPE`.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def create(
        self, tenant: str, *, name: str = "", scopes: Sequence[str] = SCOPES
    ) -> tuple[ApiKey, str]:
        """Issue a key for `tenant`; returns it with its secret, which is shown only now.

        Raises:
            ValidationError: a tenant name outside ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``, a name
                over 200 characters or with NUL / lone surrogates, an empty or unknown scope.
        """
        require_tenant(tenant)
        require_text("key name", name)
        if len(name) > MAX_KEY_NAME_CHARS:
            raise ValidationError(f"key name is longer than {MAX_KEY_NAME_CHARS} characters")
        wanted = tuple(dict.fromkeys(scopes))
        unknown = [s for s in wanted if s not in SCOPES]
        if not wanted or unknown:
            raise ValidationError(f"scopes {list(scopes)!r}: choose one or more of {list(SCOPES)}")
        key_id = secrets.token_hex(KEY_ID_HEX // 2)
        secret = f"{PREFIX}{key_id}_{secrets.token_urlsafe(TOKEN_BYTES)}"
        key = ApiKey(key_id, tenant, name, tuple(s for s in SCOPES if s in wanted), utcnow())
        self.store.kv_put(ADMIN_SCOPE, NAMESPACE, key_id, {**key.to_json(), "hash": _digest(secret)})
        return key, secret

    def verify(self, secret: str) -> ApiKey:
        """The live key whose secret this is.

        Raises:
            AuthError: the secret is not a string of the ``mp_<id>_<token>`` shape, no key has
                that id, the hash does not match (compared in constant time), or it is revoked.
        """
        match = _SECRET_OK.match(secret) if isinstance(secret, str) else None
        if match is None:
            raise AuthError("malformed key (expected mp_<key id>_<token>)")
        row = self.store.kv_get(ADMIN_SCOPE, NAMESPACE, match.group(1))
        # Compare against a dummy digest when the id is unknown so both paths cost the same.
        stored = row["hash"] if isinstance(row, dict) else _digest("")
        if not hmac.compare_digest(stored, _digest(secret)) or row is None:
            raise AuthError("unknown key")
        key = _from_row(row)
        if key.revoked_at is not None:
            raise AuthError(f"key {key.id!r} was revoked at {to_iso(key.revoked_at)}")
        return key

    def get(self, key_id: str) -> ApiKey | None:
        """The key with id `key_id` (live or revoked), or None."""
        row = self.store.kv_get(ADMIN_SCOPE, NAMESPACE, key_id)
        return None if row is None else _from_row(row)

    def list(self, tenant: str | None = None) -> builtins.list[ApiKey]:
        """Every key (revoked ones included), oldest first; only `tenant`'s when given."""
        keys = [_from_row(v) for _, _, v in self.store.kv_list(ADMIN_SCOPE, NAMESPACE)]
        keys = [k for k in keys if tenant is None or k.tenant == tenant]
        return sorted(keys, key=lambda k: (k.created_at, k.id))

    def revoke(self, key_id: str) -> bool:
        """Revoke a key for good; True when it was live and is now revoked, False when no key
        has that id or it was already revoked. Requests with it fail from the next one on."""
        with self.store.transaction():
            row = self.store.kv_get(ADMIN_SCOPE, NAMESPACE, key_id)
            if row is None or row.get("revoked_at") is not None:
                return False
            self.store.kv_put(ADMIN_SCOPE, NAMESPACE, key_id, {**row, "revoked_at": to_iso(utcnow())})
        return True


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _from_row(row: dict[str, Any]) -> ApiKey:
    revoked = row.get("revoked_at")
    return ApiKey(row["id"], row["tenant"], row.get("name", ""), tuple(row["scopes"]),
                  from_iso(row["created_at"]), None if revoked is None else from_iso(revoked))
