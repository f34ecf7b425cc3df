"""Who is asking and which tenant's memory they reach: API-key auth and per-tenant handles.

Every route depends on :func:`reader` or :func:`writer`; both resolve the request's
``Authorization: Bearer <key>`` to its :class:`~mindpalace.auth.ApiKey`, check its scope, and
return the :class:`~mindpalace.aio.AsyncMemory` handle of the key's tenant (the async facade:
every call runs the sync facade in a worker thread under one bounded limiter, and sessions
stay warm between requests). A route never sees a
tenant name from the request itself, so no path, query or body can reach another tenant (I10).
With auth disabled (loopback only, see :mod:`mindpalace.rest.server`) every request is the
server's one configured tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mindpalace.aio import AsyncMemory, AsyncSession
from mindpalace.auth import SCOPES, ApiKey, ApiKeys
from mindpalace.errors import AuthError

bearer = HTTPBearer(auto_error=False, description="An API key from `mindpalace keys create`.")


class TenantPool:
    """The async handle of every tenant over one store (:meth:`AsyncMemory.for_tenant`: one
    store, one set of services, one thread limiter), and the API keys of that store.

    Args:
        root: the server's handle; only it is closed.
    """

    def __init__(self, root: AsyncMemory) -> None:
        self.root = root
        self.keys = ApiKeys(root.memory.store)

    def get(self, tenant: str) -> AsyncMemory:
        return self.root.for_tenant(tenant)

    async def verify(self, secret: str) -> ApiKey:
        """:meth:`ApiKeys.verify` in a worker thread (a store read)."""
        return await self.root.run(self.keys.verify, secret)


@dataclass(frozen=True)
class Caller:
    """The authenticated caller: its tenant and key (None when auth is off)."""

    tenant: str
    key: ApiKey | None

    def require(self, scope: str) -> None:
        if self.key is not None:
            self.key.require(scope)


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """Resolve the API key; raises AuthError (401) when it is missing or refused."""
    state = request.app.state
    if not state.auth:
        return Caller(state.tenant, None)
    if credentials is None:
        raise AuthError("missing Authorization: Bearer <key> header")
    key = await state.pool.verify(credentials.credentials)
    return Caller(key.tenant, key)


def _memory(request: Request, who: Caller, scope: str) -> AsyncMemory:
    who.require(scope)
    pool: TenantPool = request.app.state.pool
    return pool.get(who.tenant)


async def reader(request: Request, who: Annotated[Caller, Depends(caller)]) -> AsyncMemory:
    """The caller's tenant handle, for a route that only reads (key scope ``read``)."""
    return _memory(request, who, SCOPES[0])


async def writer(request: Request, who: Annotated[Caller, Depends(caller)]) -> AsyncMemory:
    """The caller's tenant handle, for a route that writes (key scope ``write``)."""
    return _memory(request, who, SCOPES[1])


SessionId = Annotated[str, Path(min_length=1, max_length=200, description="Session id.")]
UserQ = Annotated[str, Query(max_length=200, description="User id of the session scope.")]
AgentQ = Annotated[str, Query(max_length=200, description="Agent id of the session scope.")]


async def read_session(
    mem: Annotated[AsyncMemory, Depends(reader)], session_id: SessionId, user: UserQ = "",
    agent: AgentQ = "",
) -> AsyncSession:
    """The session (tenant from the key; user, agent, session from the request) for reading."""
    return mem.session(session_id, user=user, agent=agent)


async def write_session(
    mem: Annotated[AsyncMemory, Depends(writer)], session_id: SessionId, user: UserQ = "",
    agent: AgentQ = "",
) -> AsyncSession:
    """The session for a route that writes."""
    return mem.session(session_id, user=user, agent=agent)


ReadSession = Annotated[AsyncSession, Depends(read_session)]
WriteSession = Annotated[AsyncSession, Depends(write_session)]
ReadMemory = Annotated[AsyncMemory, Depends(reader)]
