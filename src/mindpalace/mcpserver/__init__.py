"""The MCP server: mindpalace's memory as tools for any MCP host (Claude Desktop, IDEs, agent
frameworks), on the official ``mcp`` SDK 2.x — thin over the async facade.

Run it with ``mindpalace mcp -w WS`` (stdio) or ``mindpalace mcp -w WS --transport http``
(streamable HTTP, API keys). Named ``mcpserver`` so that ``import mcp`` always means the SDK.
Needs the ``[mcp]`` extra (``pip install 'mindpalace[mcp]'``).
"""

from __future__ import annotations

from mindpalace.mcpserver.server import HttpOptions, build_server, serve_http, serve_stdio
from mindpalace.mcpserver.tools import TOOL_NAMES, MemoryTools, ToolDefaults

__all__ = ["TOOL_NAMES", "HttpOptions", "MemoryTools", "ToolDefaults", "build_server",
           "serve_http", "serve_stdio"]
