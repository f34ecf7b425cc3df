"""The REST application: ``create_app(workspace_or_memory, settings)`` → a FastAPI app.

Thin over the facade (DESIGN.md §2, §7): every route parses a pydantic body, makes one facade
call on the caller's tenant handle and returns JSON; errors are problem+json
(:mod:`mindpalace.rest.problems`). Endpoints are plain ``def`` functions, run in FastAPI's
thread pool — the facade is synchronous and thread-safe (the store serialises writers).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mindpalace.auth import require_tenant
from mindpalace.memory import Memory
from mindpalace.rest import inspector, problems
from mindpalace.rest.body import BodyLimit
from mindpalace.rest.deps import TenantPool
from mindpalace.rest.routes import ROUTERS
from mindpalace.settings import ServerSettings

API_TITLE = "mindpalace"


def create_app(
    workspace_or_memory: Memory | str | os.PathLike[str],
    settings: ServerSettings | None = None,
    *,
    auth: bool = True,
    tenant: str = "default",
) -> FastAPI:
    """Build the REST API over one workspace.

    Args:
        workspace_or_memory: an open :class:`Memory` (the caller closes it) or a workspace
            folder (opened now with ``create=False``, closed when the app shuts down).
        settings: the ``[server]`` section; default the workspace's own.
        auth: require an API key on every ``/v1`` route (see ``mindpalace keys``); False
            serves every request as `tenant` — only :func:`mindpalace.rest.server.serve`
            decides when that is allowed (loopback, asked for explicitly).
        tenant: the tenant of every request when `auth` is False.

    Raises:
        WorkspaceError: the folder is not a workspace. ValidationError: a bad tenant name.
    """
    from mindpalace import __version__

    require_tenant(tenant)
    owned = not isinstance(workspace_or_memory, Memory)
    memory = (workspace_or_memory if isinstance(workspace_or_memory, Memory)
              else Memory.open(workspace_or_memory, create=False))
    server = settings or memory.settings.server

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if owned:
            memory.close()

    app = FastAPI(title=API_TITLE, version=__version__, lifespan=lifespan,
                  description="Memory for long-horizon LLM agents, scoped per tenant by API key.")
    app.state.pool = TenantPool(memory)
    app.state.auth = auth
    app.state.tenant = tenant
    app.state.server_settings = server
    app.state.max_body_bytes = server.max_body_bytes
    problems.install(app)
    app.add_middleware(BodyLimit, max_body_bytes=server.max_body_bytes)
    for router in ROUTERS:
        app.include_router(router, responses=problems.RESPONSES if router.prefix else None)
    inspector.install(app)  # /ui: the web inspector, same keys and tenants
    return app
