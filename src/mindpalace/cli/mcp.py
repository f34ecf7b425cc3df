"""CLI: ``mindpalace mcp`` — serve the workspace's memory to MCP hosts (stdio or streamable HTTP)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

import typer

from mindpalace.cli.app import AgentOpt, UserOpt, WorkspaceOpt, app


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


@app.command()
def mcp(
    workspace: Path = WorkspaceOpt,
    transport: Transport = typer.Option(Transport.stdio, "--transport", "-t",
                                        help="stdio (a host spawns it) or http (streamable HTTP)."),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP: address to bind."),
    port: int = typer.Option(8765, "--port", "-p", help="HTTP: port (0 = any free port)."),
    no_auth: bool = typer.Option(False, "--no-auth",
                                 help="HTTP on loopback only: accept calls without an API key."),
    tenant: str = typer.Option("default", "--tenant",
                               help="Tenant of calls without an API key (stdio, --no-auth)."),
    user: str = UserOpt,
    agent: str = AgentOpt,
    session: str = typer.Option("mcp", "--session", "-s",
                                help="Session of tool calls that name none."),
    max_threads: int = typer.Option(16, "--max-threads",
                                    help="Store calls running at once (worker threads)."),
) -> None:
    """Serve the workspace's memory as MCP tools: remember, recall, forget, read_records,
    get_context, set_constraint, record_step, checkpoint, task_status.

    HTTP needs an API key per request (`mindpalace keys create TENANT`), sent as
    `Authorization: Bearer <secret>`; every call runs in the key's tenant.
    """
    import anyio

    try:
        from mindpalace.mcpserver import HttpOptions, ToolDefaults, serve_http, serve_stdio
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise typer.BadParameter(
            f"the MCP server needs the [mcp] extra: pip install 'mindpalace[mcp]' ({exc})"
        ) from exc
    from mindpalace.aio import AsyncMemory
    from mindpalace.checks import require_scope_name, require_session_id
    from mindpalace.cli.app import open_memory
    from mindpalace.scope import Scope

    Scope(require_scope_name("tenant", tenant), require_scope_name("user", user),  # refuse a bad
          require_scope_name("agent", agent), require_session_id(session))  # default before serving
    http = HttpOptions(host=host, port=port, auth=not no_auth).check() \
        if transport is Transport.http else None
    defaults = ToolDefaults(tenant=tenant, user_id=user, agent_id=agent, session_id=session)
    root = open_memory(workspace)
    memory = AsyncMemory(root if tenant == root.tenant else root.for_tenant(tenant),
                         max_threads=max_threads)

    async def main() -> None:
        try:
            if http is None:
                await serve_stdio(memory, defaults)
            else:
                await serve_http(memory, defaults, http)
        finally:
            root.close()

    anyio.run(main)
