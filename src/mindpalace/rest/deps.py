"""Who is asking and which tenant's memory they reach: API-key auth and per-tenant handles.

Every route depends on :func:`reader` or :func:`writer`; both resolve the request's
``Authorization: Bearer <key>`` to its :class:`~mindpalace.auth.ApiKey`, check its scope, and
return the :class:`~mindpalace.memory.Memory` handle of the key's tenant. A route never sees a
tenant name from the request itself, so no path, query or body can reach another tenant (I10).
With auth disabled (loopback only, see :mod:`mindpalace.rest.server`) every request is the
server's one configured tenant.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mindpalace.auth import SCOPES, ApiKey, ApiKeys
from mindpalace.errors import AuthError
from mindpalace.memory import Memory, Session

bearer = HTTPBearer(auto_error=False, description="An API key from `mindpalace keys create`.")


class TenantPool:
    """One :class:`Memory` handle per tenant over one store, made on first use.

    Args:
        memory: the server's handle; its store, settings and services are shared by every
            tenant handle (:meth:`Memory.for_tenant`), and only it is closed.
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.keys = ApiKeys(memory.store)
        self._handles: dict[str, Memory] = {}
        self._lock = threading.Lock()

    def get(self, tenant: str) -> Memory:
        with self._lock:
            handle = self._handles.get(tenant)
            if handle is None:
                handle = self._handles[tenant] = self.memory.for_tenant(tenant)
            return handle


@dataclass(frozen=True)
class Caller:
    """The authenticated caller: its tenant and key (None when auth is off)."""

    tenant: str
    key: ApiKey | None

    def require(self, scope: str) -> None:
        if self.key is not None:
            self.key.require(scope)


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """Resolve the API key; raises AuthError (401) when it is missing or refused."""
    state = request.app.state
    if not state.auth:
        return Caller(state.tenant, None)
    if credentials is None:
        raise AuthError("missing Authorization: Bearer <key> header")
    key = state.pool.keys.verify(credentials.credentials)
    return Caller(key.tenant, key)


def _memory(request: Request, who: Caller, scope: str) -> Memory:
    who.require(scope)
    pool: TenantPool = request.app.state.pool
    return pool.get(who.tenant)


def reader(request: Request, who: Annotated[Caller, Depends(caller)]) -> Memory:
    """The caller's tenant handle, for a route that only reads (key scope ``read``)."""
    return _memory(request, who, SCOPES[0])


def writer(request: Request, who: Annotated[Caller, Depends(caller)]) -> Memory:
    """The caller's tenant handle, for a route that writes (key scope ``write``)."""
    return _memory(request, who, SCOPES[1])


SessionId = Annotated[str, Path(min_length=1, max_length=200, description="Session id.")]
UserQ = Annotated[str, Query(max_length=200, description="User id of the session scope.")]
AgentQ = Annotated[str, Query(max_length=200, description="Agent id of the session scope.")]


def read_session(
    mem: Annotated[Memory, Depends(reader)], session_id: SessionId, user: UserQ = "",
    agent: AgentQ = "",
) -> Session:
    """The session (tenant from the key; user, agent, session from the request) for reading."""
    return mem.session(session_id, user=user, agent=agent)


def write_session(
    mem: Annotated[Memory, Depends(writer)], session_id: SessionId, user: UserQ = "",
    agent: AgentQ = "",
) -> Session:
    """The session for a route that writes."""
    return mem.session(session_id, user=user, agent=agent)


ReadSession = Annotated[Session, Depends(read_session)]
WriteSession = Annotated[Session, Depends(write_session)]
ReadMemory = Annotated[Memory, Depends(reader)]
