"""Durable event appends/s through SQLiteStore vs a raw sqlite3 INSERT loop, same settings, same run.

Four workloads per ``synchronous`` mode, each on a fresh database file in WAL mode with the same
pragmas and the same ``events`` table (schema and indexes created by SQLiteStore's migration):

* single — one event per transaction: ``store.append_events(scope, stream, [event])`` (reads
  the stream version, inserts, commits) vs raw ``INSERT`` in autocommit mode (one implicit
  transaction per row, the version counted in Python).
* batched — ``--batch`` events per transaction: one ``append_events`` call with the list vs raw
  ``BEGIN IMMEDIATE; executemany(INSERT); COMMIT``.

With ``synchronous=NORMAL`` (the default setting) a commit survives a process crash; with
``FULL`` it also survives power loss (an fsync per commit). Target: within 2× of raw.

    python benchmarks/bench_store.py --fast
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace.scope import Scope
from mindpalace.settings import StoreSettings
from mindpalace.store import NewEvent, SQLiteStore
from mindpalace.timeutil import to_iso, utcnow

TARGET_RATIO = 2.0  # mindpalace may be at most this many times slower than raw sqlite3
SCOPE = Scope("bench", "user-1", "agent-1", "session-1")
PAYLOAD = {"role": "tool", "content": "booked Senso-ji 2025-05-20, ref XQ7Z9K2", "tokens": 17}


def fresh_store(folder: Path, name: str, synchronous: str) -> SQLiteStore:
    return SQLiteStore(folder / f"{name}.db", settings=StoreSettings(synchronous=synchronous))


def raw_connection(folder: Path, name: str, synchronous: str) -> sqlite3.Connection:
    """A raw connection on a database whose schema SQLiteStore created, with the same pragmas."""
    fresh_store(folder, name, synchronous).close()
    conn = sqlite3.connect(folder / f"{name}.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA busy_timeout={StoreSettings().busy_timeout_ms}")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


RAW_INSERT = (
    "INSERT INTO events (tenant, user, agent, session, stream, version, type, data, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def raw_row(version: int) -> tuple[Any, ...]:
    return (*SCOPE.values(), "s", version, "tool_result", json.dumps(PAYLOAD), to_iso(utcnow()))


def mp_single(store: SQLiteStore, n: int) -> None:
    for _ in range(n):
        store.append_events(SCOPE, "s", [NewEvent("tool_result", PAYLOAD)])


def mp_batched(store: SQLiteStore, n: int, batch: int) -> None:
    for _ in range(n // batch):
        store.append_events(SCOPE, "s", [NewEvent("tool_result", PAYLOAD)] * batch)


def raw_single(conn: sqlite3.Connection, n: int) -> None:
    for v in range(1, n + 1):
        conn.execute(RAW_INSERT, raw_row(v))


def raw_batched(conn: sqlite3.Connection, n: int, batch: int) -> None:
    v = 0
    for _ in range(n // batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(RAW_INSERT, [raw_row(v + i) for i in range(1, batch + 1)])
        conn.execute("COMMIT")
        v += batch


def rate(fn: Callable[[], None], events: int) -> float:
    start = time.perf_counter()
    fn()
    return events / (time.perf_counter() - start)


def measure(folder: Path, synchronous: str, n_single: int, n_batched: int, batch: int,
            repeats: int) -> list[dict[str, Any]]:
    """Best of `repeats` runs of each workload (fresh files each time), events per second."""
    rows = []
    for mode, n in (("single", n_single), ("batched", n_batched)):
        mp_best = raw_best = 0.0
        for r in range(repeats):
            # Interleave mindpalace and raw so both see the same disk and CPU conditions.
            store = fresh_store(folder, f"mp-{synchronous}-{mode}-{r}", synchronous)
            try:
                fn = partial(mp_single, store, n) if mode == "single" else partial(mp_batched, store, n, batch)
                mp_best = max(mp_best, rate(fn, n))
                assert store.stream_version(SCOPE, "s") == n
            finally:
                store.close()
            conn = raw_connection(folder, f"raw-{synchronous}-{mode}-{r}", synchronous)
            try:
                fn = partial(raw_single, conn, n) if mode == "single" else partial(raw_batched, conn, n, batch)
                raw_best = max(raw_best, rate(fn, n))
                assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == n
            finally:
                conn.close()
        rows.append({
            "mode": mode if mode == "single" else f"batched ×{batch}",
            "synchronous": synchronous, "events": n,
            "mindpalace_per_s": round(mp_best), "raw_per_s": round(raw_best),
            "ratio": round(raw_best / mp_best, 2),
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--synchronous", nargs="+", default=["NORMAL", "FULL"],
                    choices=["OFF", "NORMAL", "FULL", "EXTRA"], help="SQLite synchronous modes")
    ap.add_argument("--single", type=int, default=5_000, help="events appended one per transaction")
    ap.add_argument("--batched", type=int, default=50_000, help="events appended in batches")
    ap.add_argument("--batch", type=int, default=100, help="events per batched transaction")
    ap.add_argument("--repeats", type=int, default=3, help="runs per workload; the best is kept")
    ap.add_argument("--fast", action="store_true", help="1,000 single / 10,000 batched, 2 repeats")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.fast:
        args.single, args.batched, args.repeats = 1_000, 10_000, 2

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        for mode in args.synchronous:
            rows += measure(Path(tmp), mode, args.single, args.batched, args.batch, args.repeats)

    table = Table(title=f"bench_store: durable event appends/s, WAL, best of {args.repeats} "
                        f"(sqlite {sqlite3.sqlite_version})")
    for col in ("workload", "synchronous", "events", "mindpalace appends/s", "raw sqlite3 /s",
                "raw ÷ mindpalace", f"within {TARGET_RATIO:g}×"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["mode"], r["synchronous"], f"{r['events']:,}", f"{r['mindpalace_per_s']:,}",
                      f"{r['raw_per_s']:,}", f"{r['ratio']:.2f}",
                      "yes" if r["ratio"] <= TARGET_RATIO else "NO")
    Console(width=160).print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0 if all(r["ratio"] <= TARGET_RATIO for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
