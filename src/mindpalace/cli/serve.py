"""CLI: `mindpalace serve` — the REST server over a workspace (needs the `server` extra)."""

from __future__ import annotations

from pathlib import Path

import typer

from mindpalace.cli.app import WorkspaceOpt, app


@app.command()
def serve(
    workspace: Path = WorkspaceOpt,
    host: str | None = typer.Option(None, "--host", help="Interface to bind (default server.host, 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", "-p", help="TCP port (default server.port, 8765)."),
    no_auth: bool = typer.Option(False, "--no-auth", help="Serve without API keys (loopback only)."),
    tenant: str = typer.Option("default", "--tenant", "-t", help="Tenant of every request with --no-auth."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
    access_log: bool = typer.Option(True, "--access-log/--no-access-log",
                                    help="Log one line per request."),
) -> None:
    """Serve the REST API (OpenAPI at /openapi.json); every /v1 request needs an API key
    (`mindpalace keys create TENANT`) unless bound to loopback with --no-auth."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise typer.BadParameter(
            f"the REST server needs the server extra: pip install 'mindpalace[server]' ({exc})"
        ) from exc
    from mindpalace.memory import Memory
    from mindpalace.rest.server import check_auth
    from mindpalace.rest.server import serve as run

    with Memory.open(workspace, create=False) as mem:  # validates the folder and reads [server]
        settings = mem.settings.server.model_copy()
    if host is not None:
        settings.host = host
    if port is not None:
        settings.port = port
    check_auth(settings.host, not no_auth)
    run(workspace, settings, auth=not no_auth, tenant=tenant, log_level=log_level,
        access_log=access_log)
