"""Bearer API keys for the HTTP MCP transport: the SDK's ``TokenVerifier`` over
:class:`mindpalace.auth.ApiKeys` (DESIGN.md I10).

The SDK's bearer middleware calls :meth:`ApiKeyVerifier.verify_token` on every request and
answers 401 (with ``WWW-Authenticate``) when it returns None; the verified key's tenant rides
in the access token's claims, and every tool call reads it from there (:func:`caller_tenant`)
— a tool argument can never name a tenant.
"""

from __future__ import annotations

from typing import Final

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from mindpalace.aio import AsyncMemory
from mindpalace.auth import ApiKeys
from mindpalace.errors import AuthError, PermissionDeniedError

__all__ = ["TENANT_CLAIM", "ApiKeyVerifier", "caller_key"]

TENANT_CLAIM: Final = "mindpalace_tenant"


class ApiKeyVerifier:
    """``TokenVerifier``: a live ``mp_<id>_<token>`` key → an :class:`AccessToken` with the
    key id as ``client_id``, its scopes (``read`` / ``write``) and its tenant as a claim.

    Args:
        memory: the workspace handle whose store holds the keys (checked in a worker thread).
    """

    def __init__(self, memory: AsyncMemory) -> None:
        self._memory = memory
        self._keys = ApiKeys(memory.memory.store)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await self._memory.run(self._keys.verify, token)
        except AuthError:
            return None  # the SDK answers 401 invalid_token
        return AccessToken(token=token, client_id=key.id, scopes=list(key.scopes),
                           claims={TENANT_CLAIM: key.tenant})


def caller_key(need: str) -> tuple[str, str] | None:
    """(tenant, key id) of the verified key of the current request, or None on a transport
    without keys (stdio, or HTTP on loopback with ``--no-auth``).

    Raises:
        PermissionDeniedError: the key lacks the scope `need` (``read`` or ``write``).
    """
    token = get_access_token()
    if token is None:
        return None
    if need not in token.scopes:
        raise PermissionDeniedError(token.client_id, need, tuple(token.scopes))
    tenant = (token.claims or {}).get(TENANT_CLAIM)
    if not isinstance(tenant, str):  # a token this verifier did not make: refuse, never guess
        raise AuthError("the access token names no tenant")
    return tenant, token.client_id
