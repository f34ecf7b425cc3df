"""The REST server over loopback vs the same calls in-process: recall and context, 16 clients.

One workspace holds a LoCoMo conversation (``locomo/locomo10.json`` under
``MINDPALACE_SHARED_DATA``, conv-26: ~400 turns in 19 sessions, its questions as queries; a
seeded synthetic chat when the data is absent). Two calls are measured, each with `clients`
concurrent callers issuing at most `requests` calls in total and stopping after `seconds`:

- ``recall``: ``Session.recall(question, k=5)`` — working memory, then hybrid BM25 + vector.
- ``context``: ``Session.context(budget, query=question)`` — the pure prompt build.

Modes, measured in the same run on the same workspace and queries:

- ``in-process``: threads calling the facade directly (one Session per thread).
- ``REST``: threads with one keep-alive httpx client each against ``mindpalace serve`` in its
  own process (uvicorn, one worker, API key auth), through :mod:`mindpalace.client`.

Columns: completed calls, errors, calls/s (completed / wall seconds), p50 and p95 latency (ms).

    python benchmarks/bench_server.py --fast
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.auth import ApiKeys
from mindpalace.client import RemoteMemory

REPO = Path(__file__).resolve().parents[1]
TENANT = "bench"
CONVERSATION = "conv-26"
BUDGET_TOKENS = 4_000
STARTUP_TIMEOUT_SECONDS = 60


@dataclass
class Row:
    op: str
    mode: str
    clients: int
    completed: int
    errors: int
    per_s: float
    p50_ms: float
    p95_ms: float


def data_dir() -> Path:
    return Path(os.environ.get("MINDPALACE_SHARED_DATA", REPO.parent / "shared" / "data"))


def seed_workspace(root: Path, rng: random.Random) -> tuple[str, str, list[str]]:
    """Fill the workspace; returns (user, agent, queries)."""
    with Memory.open(root, tenant=TENANT) as mem:
        data = data_dir() / "locomo" / "locomo10.json"
        if data.exists():
            from mindpalace.eval.locomo import AGENT, ingest, load_locomo

            conv = next(c for c in load_locomo(data) if c.sample_id == CONVERSATION)
            ingest(mem, conv)
            user, agent, queries = conv.sample_id, AGENT, [q.question for q in conv.questions]
        else:  # seeded synthetic chat: 20 sessions × 20 turns
            words = ["Tokyo", "hotel", "budget", "flight", "museum", "ramen", "train", "Kyoto",
                     "ticket", "weekend", "friend", "garden", "temple", "price", "night"]
            user, agent = "u1", "bench"
            for n in range(1, 21):
                s = mem.session(f"session_{n}", user=user, agent=agent)
                s.messages.add_many([{"role": "user", "content": " ".join(rng.choices(words, k=12))}
                                     for _ in range(20)])
            queries = [" ".join(rng.choices(words, k=4)) + "?" for _ in range(200)]
        mem.sync_embeddings()
    rng.shuffle(queries)
    return user, agent, queries


def drive(clients: int, requests: int, seconds: float,
          make_call: Callable[[int], Callable[[int], Any]]) -> tuple[int, int, float, list[float]]:
    """Run `clients` threads until `requests` calls are done or `seconds` pass.
    Returns (completed, errors, wall seconds, latencies in ms)."""
    latencies: list[float] = []
    errors = 0
    counter = iter(range(requests))
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    calls = [make_call(i) for i in range(clients)]  # per-client setup outside the clock

    def worker(call: Callable[[int], Any]) -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            t0 = time.perf_counter()
            try:
                call(n)
            except Exception:  # counted, never hidden: the table shows errors
                with lock:
                    errors += 1
                continue
            with lock:
                latencies.append((time.perf_counter() - t0) * 1000)

    threads = [threading.Thread(target=worker, args=(c,)) for c in calls]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies), errors, time.perf_counter() - started, latencies


def row(op: str, mode: str, clients: int, result: tuple[int, int, float, list[float]]) -> Row:
    completed, errors, wall, lat = result
    lat = sorted(lat) or [0.0]
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
    return Row(op, mode, clients, completed, errors, round(completed / wall, 1),
               round(statistics.median(lat), 1), round(p95, 1))


def start_process(cmd: list[str], env: dict[str, str], address: str, what: str) -> tuple[subprocess.Popen[str], str]:
    """Start `cmd` and wait until a stderr line matches `address` (a regex whose group 1 is the
    URL). Raises SystemExit naming `what` if it never does within the startup timeout."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    assert proc.stderr is not None
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    # The server names the address it bound on stderr; after that only warnings follow (no
    # access log), so the unread pipe cannot fill up during the run.
    for line in proc.stderr:
        found = re.search(address, line)
        if found:
            return proc, found.group(1).strip()
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit(f"the {what} did not start")


def stop_process(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(timeout=30)
    if proc.stderr is not None:
        proc.stderr.close()


def start_server(root: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    return start_process(
        [sys.executable, "-m", "mindpalace.cli", "serve", "-w", str(root), "--port", "0", "--no-access-log"],
        env, r"running on (http://127\.0\.0\.1:\d+)", "server")


def arguments(argv: list[str] | None, description: str) -> argparse.Namespace:
    """The options both server benchmarks take (sets ``MINDPALACE_EMBED__PROVIDER``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--clients", type=int, default=16, help="concurrent callers")
    ap.add_argument("--requests", type=int, default=800, help="calls per op and mode (cap)")
    ap.add_argument("--seconds", type=float, default=30.0, help="time cap per op and mode")
    ap.add_argument("--embed", default="hashing", help="embed.provider for the workspace")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fast", action="store_true", help="CI size: 120 calls, 10 s caps")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    if args.fast:
        args.requests, args.seconds = 120, 10.0
    os.environ["MINDPALACE_EMBED__PROVIDER"] = args.embed
    return args


def prepared(root: Path, seed: int) -> tuple[str, str, Callable[[int], str], str]:
    """Seed the workspace at `root` and create an API key: (user, agent, query n → text, secret)."""
    user, agent, queries = seed_workspace(root, random.Random(seed))
    with Memory.open(root, create=False) as mem:
        _, secret = ApiKeys(mem.store).create(TENANT, name="bench")
    return user, agent, (lambda n: queries[n % len(queries)]), secret


def session_calls(open_session: Callable[[], Any], op: str,
                  q: Callable[[int], str]) -> Callable[[int], Callable[[int], Any]]:
    """A ``drive`` factory: each client opens its session, then calls recall (k=5) or context."""
    def make(_: int) -> Callable[[int], Any]:
        s = open_session()
        if op == "recall":
            return lambda n: s.recall(q(n), k=5)
        return lambda n: s.context(BUDGET_TOKENS, query=q(n))
    return make


def report(rows: list[Row], title: str, order: dict[str, int], json_path: Path | None) -> int:
    """Print the table (recall first, modes in `order`); 1 if any call failed."""
    table = Table(title=title)
    for col in ("op", "mode", "completed", "errors", "calls/s", "p50 ms", "p95 ms"):
        table.add_column(col, justify="left" if col in ("op", "mode") else "right")
    for r in sorted(rows, key=lambda r: (r.op != "recall", order[r.mode])):
        table.add_row(r.op, r.mode, str(r.completed), str(r.errors), f"{r.per_s:,.1f}",
                      f"{r.p50_ms:,.1f}", f"{r.p95_ms:,.1f}")
    Console(width=120).print(table)
    if json_path:
        json_path.write_text(json.dumps([asdict(r) for r in rows], indent=2), encoding="utf-8")
    return 1 if any(r.errors for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv, __doc__.split("\n")[0])
    rows: list[Row] = []
    session_id = "session_1"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        user, agent, q, secret = prepared(root, args.seed)
        with Memory.open(root, create=False, tenant=TENANT) as mem:
            for op in ("recall", "context"):
                make = session_calls(lambda: mem.session(session_id, user=user, agent=agent), op, q)
                rows.append(row(op, "in-process", args.clients,
                                drive(args.clients, args.requests, args.seconds, make)))

        proc, url = start_server(root, {**os.environ, "PYTHONUNBUFFERED": "1"})
        remotes: list[RemoteMemory] = []
        try:
            def remote_session() -> Any:
                client = RemoteMemory(url, secret, timeout_seconds=120)
                remotes.append(client)
                return client.session(session_id, user=user, agent=agent)

            for op in ("recall", "context"):
                rows.append(row(op, "REST", args.clients, drive(
                    args.clients, args.requests, args.seconds, session_calls(remote_session, op, q))))
        finally:
            for client in remotes:
                client.close()
            stop_process(proc)

    return report(rows, f"REST over loopback vs in-process — {args.clients} concurrent clients, "
                        f"≤ {args.requests} calls / ≤ {args.seconds:g} s each, embed={args.embed}",
                  {"in-process": 0, "REST": 1}, args.json)


if __name__ == "__main__":
    sys.exit(main())
