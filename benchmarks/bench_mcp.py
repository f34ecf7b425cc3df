"""The MCP server over streamable HTTP vs the same calls in-process: recall and context, 16 clients.

Same workspace and queries as ``bench_server`` (LoCoMo conv-26 under ``MINDPALACE_SHARED_DATA``,
its questions as queries; a seeded synthetic chat when the data is absent). Two calls, each
with `clients` concurrent callers issuing at most `requests` calls in total and stopping after
`seconds`:

- ``recall``: ``Session.recall(question, k=5)`` / MCP tool ``recall`` (limit 5).
- ``context``: ``Session.context(budget, query=question)`` / MCP tool ``get_context``.

Modes, measured in the same run on the same workspace and queries:

- ``sync, threads``: the baseline — threads calling the sync facade directly.
- ``async facade``: coroutines on :class:`mindpalace.aio.AsyncMemory` (worker threads under
  its limiter) — what the servers run on.
- ``MCP HTTP``: one SDK ``Client`` per caller (streamable HTTP, bearer API key) against
  ``mindpalace mcp --transport http`` in its own process.

Columns: completed calls, errors, calls/s (completed / wall seconds), p50 and p95 latency (ms).

    python benchmarks/bench_mcp.py --fast
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import (
    BUDGET_TOKENS,
    TENANT,
    Row,
    arguments,
    drive,
    prepared,
    report,
    row,
    session_calls,
    start_process,
    stop_process,
)
from mindpalace import Memory
from mindpalace.aio import AsyncMemory

Result = tuple[int, int, float, list[float]]


async def adrive(clients: int, requests: int, seconds: float,
                 calls: list[Callable[[int], Awaitable[Any]]]) -> Result:
    """`clients` coroutines until `requests` calls are done or `seconds` pass (as ``drive``)."""
    latencies: list[float] = []
    errors = 0
    counter = iter(range(requests))
    deadline = time.perf_counter() + seconds

    async def worker(call: Callable[[int], Awaitable[Any]]) -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            n = next(counter, None)
            if n is None:
                return
            t0 = time.perf_counter()
            try:
                await call(n)
            except Exception:  # counted, never hidden: the table shows errors
                errors += 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for call in calls[:clients]:
            tg.start_soon(worker, call)
    return len(latencies), errors, time.perf_counter() - started, latencies


def start_server(root: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    return start_process(
        [sys.executable, "-m", "mindpalace.cli", "mcp", "-w", str(root), "--transport", "http", "--port", "0"],
        env, r"listening on (\S+)", "MCP server")


async def run_mcp(url: str, secret: str, args: argparse.Namespace, scope: dict[str, str],
                  q: Callable[[int], str]) -> list[Row]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    rows: list[Row] = []
    async with AsyncExitStack() as stack:
        clients: list[Client] = []
        for _ in range(args.clients):  # connected before the clock starts
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {secret}"}, timeout=httpx2.Timeout(120.0)))
            clients.append(await stack.enter_async_context(
                Client(streamable_http_client(url, http_client=http))))

        def caller(c: Client, tool: str) -> Callable[[int], Awaitable[Any]]:
            async def call(n: int) -> Any:
                extra = {"limit": 5} if tool == "recall" else {"budget_tokens": BUDGET_TOKENS}
                result = await c.call_tool(tool, {"query": q(n), **extra, **scope})
                if result.is_error:
                    raise RuntimeError(str(result.content))
                return result
            return call

        for op, tool in (("recall", "recall"), ("context", "get_context")):
            rows.append(row(op, "MCP HTTP", args.clients, await adrive(
                args.clients, args.requests, args.seconds, [caller(c, tool) for c in clients])))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__.split("\n")[0])
    rows: list[Row] = []
    session_id = "session_1"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        user, agent, q, secret = prepared(root, args.seed)
        scope = {"user_id": user, "agent_id": agent, "session_id": session_id}
        with Memory.open(root, create=False, tenant=TENANT) as mem:
            for op in ("recall", "context"):
                make = session_calls(lambda: mem.session(session_id, user=user, agent=agent), op, q)
                rows.append(row(op, "sync, threads", args.clients,
                                drive(args.clients, args.requests, args.seconds, make)))

            async def in_async() -> None:
                amem = AsyncMemory(mem, max_threads=args.clients)
                s = amem.session(session_id, user=user, agent=agent)

                async def recall(n: int) -> Any:
                    return await s.recall(q(n), 5)

                async def context(n: int) -> Any:
                    return await s.context(BUDGET_TOKENS, query=q(n))

                for op, fn in (("recall", recall), ("context", context)):
                    rows.append(row(op, "async facade", args.clients, await adrive(
                        args.clients, args.requests, args.seconds, [fn] * args.clients)))

            anyio.run(in_async)

        proc, url = start_server(root, {**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            rows += anyio.run(run_mcp, url, secret, args, scope, q)
        finally:
            stop_process(proc)

    return report(rows, f"MCP over streamable HTTP vs in-process — {args.clients} concurrent "
                        f"clients, ≤ {args.requests} calls / ≤ {args.seconds:g} s each, embed={args.embed}",
                  {"sync, threads": 0, "async facade": 1, "MCP HTTP": 2}, args.json)


if __name__ == "__main__":
    sys.exit(main())
