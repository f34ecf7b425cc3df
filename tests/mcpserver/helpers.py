"""Real MCP servers for the tests: ``python -m mindpalace.cli mcp`` as a subprocess, reached
with the SDK's own client over stdio or streamable HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ENV = {**os.environ, "MINDPALACE_EMBED__PROVIDER": "hashing"}  # no model load in a test server


def cli(workspace: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "mindpalace.cli", "mcp", "-w", str(workspace), *args]


@asynccontextmanager
async def stdio_client(workspace: Path, *args: str) -> AsyncIterator[Client]:
    """The SDK client on a fresh ``mindpalace mcp`` child process (stdio transport)."""
    command = cli(workspace, *args)
    params = StdioServerParameters(command=command[0], args=command[1:], env=ENV)
    async with Client(params) as client:
        yield client


@contextmanager
def http_server(workspace: Path, *args: str) -> Iterator[str]:
    """A ``mindpalace mcp --transport http`` process on a free loopback port; yields its URL
    (read from the line it prints once its socket listens: no polling, no sleeps)."""
    proc = subprocess.Popen(cli(workspace, "--transport", "http", "--port", "0", *args),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=ENV, text=True)
    assert proc.stderr is not None
    lines: list[str] = []
    url = ""
    for line in proc.stderr:  # ends at EOF if the server dies before listening
        lines.append(line)
        if "listening on " in line:
            url = line.split("listening on ", 1)[1].strip()
            break
    drain = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    drain.start()
    try:
        assert url, "the server did not start:\n" + "".join(lines)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        drain.join(timeout=30)
        proc.stderr.close()


@asynccontextmanager
async def http_client(url: str, secret: str | None = None) -> AsyncIterator[Client]:
    """The SDK client over streamable HTTP, with ``Authorization: Bearer <secret>``."""
    headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
    async with (httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0)) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        yield client


async def call(client: Client, tool: str, /, **args: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured result."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, f"{tool}({args}) failed: {text_of(result)}"
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def refused(client: Client, tool: str, /, **args: Any) -> str:
    """Call a tool that must fail as a tool error (not a crash); its message."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool}({args}) should have failed: {result.structured_content}"
    return text_of(result)


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def names(items: Sequence[dict[str, Any]], field: str = "name") -> list[str]:
    return [item[field] for item in items]
