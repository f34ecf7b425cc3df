"""Build and run the MCP server (official ``mcp`` SDK 2.x, ``MCPServer``) over stdio or
streamable HTTP.

HTTP is served stateless (the 2026-07-28 protocol revision: every request self-contained, no
``Mcp-Session-Id``; legacy clients get a fresh transport per request) with JSON responses:
the server keeps no per-connection state — all of it is in the workspace's store — so any
number of server processes can serve one workspace.

Auth (I10): HTTP requires a bearer API key (``mindpalace keys create``) and scopes every call
to the key's tenant; only a server bound to loopback may drop it, and only when told
(``--no-auth``). stdio is a local child process of the host: it runs as the server's
``--tenant``.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from dataclasses import dataclass
from typing import Literal, TextIO

from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict

from mindpalace import __version__
from mindpalace.aio import AsyncMemory
from mindpalace.errors import ConfigError
from mindpalace.mcpserver.keys import ApiKeyVerifier
from mindpalace.mcpserver.resources import knowledge_resources
from mindpalace.mcpserver.tools import MemoryTools, ToolDefaults

__all__ = ["HttpOptions", "build_server", "is_loopback", "serve_http", "serve_stdio"]

MCP_PATH = "/mcp"
INSTRUCTIONS = (
    "mindpalace: durable memory for this agent. remember facts (entity:attribute keys) and "
    "recall them; read_records reads any id recall returns in full; record_step / checkpoint / "
    "task_status keep a long task resumable; set_constraint keeps what the user asked for "
    "verbatim. Pass an idempotency_key on writes you may retry."
)


@dataclass(frozen=True)
class HttpOptions:
    """Where and how the HTTP transport listens.

    Attributes:
        host / port: the address (port 0 = any free port; the bound one is printed).
        auth: require a bearer API key on every request (False only on loopback).
    """

    host: str = "127.0.0.1"
    port: int = 8765
    auth: bool = True

    def check(self) -> HttpOptions:
        """Return self, or raise ConfigError when auth is off on a non-loopback address or the
        port is out of range."""
        if not 0 <= self.port <= 65_535:
            raise ConfigError("mcp", "port", f"{self.port} is not a TCP port (0-65535)")
        if not self.auth and not is_loopback(self.host):
            raise ConfigError("mcp", "no_auth", f"--no-auth is allowed only on a loopback address "
                              f"(127.0.0.1, ::1, localhost), not {self.host!r}: anyone who can "
                              "reach it could read every tenant's memory")
        return self


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_server(
    memory: AsyncMemory, defaults: ToolDefaults, *, http: HttpOptions | None = None
) -> MCPServer:
    """The ``mindpalace`` MCP server over `memory`: the nine memory tools
    (:mod:`mindpalace.mcpserver.tools`), the knowledge resources (none yet), and — for HTTP
    with auth — the API-key bearer check.

    Args:
        memory: the root workspace handle (closed by the caller).
        defaults: scope defaults of the tools; its tenant serves calls without a key.
        http: the HTTP options (None = stdio, no auth).
    """
    auth = http is not None and http.auth
    tools = MemoryTools(memory, defaults)
    server: MCPServer = MCPServer(
        "mindpalace", version=__version__, instructions=INSTRUCTIONS,
        resources=knowledge_resources(memory),
        tools=[_strict(Tool.from_function(
            fn, name=name, description=(fn.__doc__ or "").strip(), structured_output=True,
            annotations=ToolAnnotations(read_only_hint=read_only, destructive_hint=name == "forget",
                                        idempotent_hint=read_only, open_world_hint=False),
        )) for name, fn, read_only in tools.all()],
        token_verifier=ApiKeyVerifier(memory) if auth else None,
        auth=AuthSettings(issuer_url=f"http://{http.host}:{http.port}",
                          resource_server_url=None) if auth and http is not None else None,
        log_level="WARNING",
    )
    return server


def _strict(tool: Tool) -> Tool:
    """`tool` with unknown arguments refused (``additionalProperties: false`` in its schema, a
    tool error naming the argument), as REST refuses unknown fields: the SDK's argument model
    drops them, so a misspelt ``importnace`` or ``idempotencyKey`` silently took the default."""
    base = tool.fn_metadata.arg_model
    strict: type[BaseModel] = type(base.__name__, (base,), {
        "__module__": base.__module__, "__doc__": base.__doc__,
        "model_config": ConfigDict(**{**base.model_config, "extra": "forbid"}),
    })
    metadata = tool.fn_metadata.model_copy(update={"arg_model": strict})
    return tool.model_copy(update={"fn_metadata": metadata,
                                   "parameters": strict.model_json_schema(by_alias=True)})


async def serve_stdio(memory: AsyncMemory, defaults: ToolDefaults) -> None:
    """Serve over stdin/stdout until the host closes them."""
    await memory.run(lambda: None)  # build the shared services once before any request
    await build_server(memory, defaults).run_stdio_async()


async def serve_http(
    memory: AsyncMemory, defaults: ToolDefaults, http: HttpOptions, *,
    announce: TextIO = sys.stderr, log_level: Literal["warning", "info", "debug"] = "warning",
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted; the bound address
    is printed to `announce` as ``mindpalace mcp: listening on <url>`` once it accepts.

    Raises:
        ConfigError: see :meth:`HttpOptions.check`. OSError: the address cannot be bound.
    """
    import uvicorn

    http.check()
    await memory.run(lambda: None)
    app = build_server(memory, defaults, http=http).streamable_http_app(
        streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host=http.host,
        max_request_body_size=memory.memory.settings.server.max_body_bytes)  # 413 over it, as on REST
    family = socket.AF_INET6 if ":" in http.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((http.host, http.port))
    sock.listen(128)  # connections made before uvicorn starts wait in the backlog
    port = sock.getsockname()[1]
    shown = f"[{http.host}]" if family == socket.AF_INET6 else http.host
    announce.write(f"mindpalace mcp: listening on http://{shown}:{port}{MCP_PATH}\n")
    announce.flush()
    config = uvicorn.Config(app, log_level=log_level, lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])
