"""The REST application: ``create_app(workspace_or_memory, settings)`` → a FastAPI app.

Thin over the facade (DESIGN.md §2, §7): every route parses a pydantic body, makes one facade
call on the caller's tenant handle and returns JSON; errors are problem+json
(:mod:`mindpalace.rest.problems`). Endpoints are ``async`` over the async facade
(:mod:`mindpalace.aio`): each call runs the sync facade in a worker thread under one bounded
limiter (``max_threads``), so the event loop never blocks on SQLite, an embedder or a model.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from mindpalace.aio import DEFAULT_MAX_THREADS, AsyncMemory
from mindpalace.auth import require_tenant
from mindpalace.memory import Memory
from mindpalace.rest import inspector, problems
from mindpalace.rest.body import BodyLimit, StrictUrl
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
    max_threads: int = DEFAULT_MAX_THREADS,
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
        max_threads: facade calls running at once in worker threads (≥ 1).

    Raises:
        WorkspaceError: the folder is not a workspace. ValidationError: a bad tenant name.
    """
    from mindpalace import __version__

    require_tenant(tenant)
    owned = not isinstance(workspace_or_memory, Memory)
    memory = (workspace_or_memory if isinstance(workspace_or_memory, Memory)
              else Memory.open(workspace_or_memory, create=False))
    server = settings or memory.settings.server
    root = AsyncMemory(memory, max_threads=max_threads)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await root.run(lambda: None)  # build the shared services before the first request
        yield
        if owned:
            await root.aclose()

    app = FastAPI(title=API_TITLE, version=__version__, lifespan=lifespan,
                  description="Memory for long-horizon LLM agents, scoped per tenant by API key.")
    app.state.pool = TenantPool(root)
    app.state.auth = auth
    app.state.tenant = tenant
    app.state.server_settings = server
    app.state.max_body_bytes = server.max_body_bytes
    problems.install(app)
    app.add_middleware(BodyLimit, max_body_bytes=server.max_body_bytes)
    app.add_middleware(StrictUrl)
    for router in ROUTERS:
        app.include_router(router, responses=problems.RESPONSES if router.prefix else None)
    inspector.install(app)  # /ui: the web inspector, same keys and tenants
    return app
