"""Durable agent steps against the physical floor: a bare fsync loop on the same disk.

Printed per SQLite ``synchronous`` mode (FULL: a commit returns after its fsync and survives a
power cut; NORMAL: survives a process crash), all through the public API of one workspace:

* **bare fsync loop** (the baseline, measured in the same run): rewrite one 4 KiB page of a
  file in the workspace folder and ``os.fsync`` it — what one durable commit cannot beat;
* **checkpoint per step**: ``Session.checkpoint(step=i, artifacts=…)`` — one event, one commit;
* **start + finish step**: ``Task.start_step(i)`` then ``Task.finish_step(i, output=…,
  artifacts=…)`` — two commits (the start is durable before the step runs);
* **ledger tool call + checkpoint**: ``with Session.tool_call("book", {"i": i}) as call:
  call.run(fn)`` then ``Session.checkpoint(…)`` — the ``started`` row durable before the tool
  runs, its outcome, then the checkpoint: three commits;
* **ledger tool call, run(checkpoint=…)**: ``call.run(fn, checkpoint={"step": i, "artifacts":
  …})`` — the outcome and the checkpoint in one commit: two commits per durable tool step;
* **N concurrent agents** (N = 1, 2, 4, 8): N threads over ONE ``Memory``, each its own
  ``Session`` doing ``Session.checkpoint`` in a loop; aggregate durable steps/s. Concurrent
  top-level transactions of one store share one COMMIT (group commit,
  :mod:`mindpalace.store.sqlite.group`), so one fsync acknowledges several agents' steps.

Columns: steps/s, ms per step, the step's cost in bare fsyncs (ms per step ÷ ms per bare
fsync), the process time per step (all threads, user + system: the step's CPU, steady where a
shared disk's fsync latency is not), and commits per step from the store's group-commit counter
(below 1 = shared fsyncs).
The first row runs on a just-created workspace (its WAL file still growing); every other row on
a WAL in its steady state (see :func:`steady_wal`).

    python benchmarks/bench_durable.py              # 2 s per row
    python benchmarks/bench_durable.py --fast       # 0.3 s per row (smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory

PAGE = 4096


@dataclass
class Row:
    synchronous: str
    workload: str
    agents: int
    steps: int
    seconds: float
    commits: int | None = None
    cpu_seconds: float | None = None
    """Process time (every thread, user + system) over the row: the step's CPU, which a noisy
    disk does not move."""

    @property
    def per_s(self) -> float:
        return self.steps / self.seconds

    @property
    def ms(self) -> float:
        return 1000 * self.seconds / self.steps


def bare_fsync(folder: Path, seconds: float) -> tuple[int, float]:
    """Rewrite one page of a preallocated file and fsync it, for `seconds`; (count, elapsed)."""
    path = folder / "fsync-baseline.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"\0" * PAGE * 64)
        os.fsync(fd)
        page = os.urandom(PAGE)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.pwrite(fd, page, (n % 64) * PAGE)
            os.fsync(fd)
            n += 1
        return n, time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink()


def timed(step: Callable[[int], Any], seconds: float) -> tuple[int, float, float]:
    """Run `step` for `seconds`; (steps, elapsed, process time)."""
    step(0)  # warm-up: connections, first event of the task
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        n += 1
        step(n)
    return n, time.perf_counter() - t0, time.process_time() - c0


def commits(mem: Memory) -> int | None:
    group = getattr(mem.store, "_group", None)  # the SQLite store's group-commit counters
    return None if group is None else int(group.commits)


def open_memory(folder: Path, synchronous: str) -> Memory:
    return Memory.open(folder, embed={"provider": "none"}, store={"synchronous": synchronous})


def steady_wal(workspace: Path) -> None:
    """Bring the workspace's write-ahead log to its steady state: SQLite's WAL grows until its
    first checkpoint (1,000 pages) and is then rewritten in place from the start. A growing file
    costs a file-system journal commit on every fsync on top of the data; an agent that has run
    a few hundred steps no longer pays it. Scratch pages written with synchronous=OFF, dropped,
    and the log restarted (its file keeps its size)."""
    conn = sqlite3.connect(workspace / "memory.db", isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE bench_scratch (b BLOB)")
        conn.executemany("INSERT INTO bench_scratch VALUES (?)", [(os.urandom(PAGE),)] * 1_100)
        conn.execute("COMMIT")
        conn.execute("DROP TABLE bench_scratch")
        conn.execute("PRAGMA wal_checkpoint(RESTART)")
    finally:
        conn.close()


def single_agent_rows(folder: Path, synchronous: str, seconds: float) -> list[Row]:
    rows = []
    with open_memory(folder / f"single-{synchronous}", synchronous) as mem:
        s = mem.session("agent")
        task = s.task

        def checkpoint(i: int) -> None:
            s.checkpoint(step=i, artifacts={"last": i, "note": f"step {i} done"})

        before = commits(mem)
        n, dt, cpu = timed(checkpoint, seconds)
        rows.append(Row(synchronous, "checkpoint per step, fresh WAL (file growing)", 1, n, dt,
                        None if before is None else (commits(mem) or 0) - before, cpu))
        steady_wal(folder / f"single-{synchronous}")

        def start_finish(i: int) -> None:
            task.start_step(i, f"step {i}")
            task.finish_step(i, output={"text": f"did {i}"}, artifacts={"last": i})

        def tool_and_checkpoint(i: int) -> None:
            with s.tool_call("book", {"i": i}) as call:
                if not call.done:
                    call.run(lambda i: {"booking": f"B{i}"})
            s.checkpoint(step=i, artifacts={"booked": i})

        def tool_with_checkpoint(i: int) -> None:
            with s.tool_call("book2", {"i": i}) as call:
                if not call.done:
                    call.run(lambda i: {"booking": f"B{i}"}, checkpoint={"step": i, "artifacts": {"booked": i}})

        for name, fn in (("checkpoint per step", checkpoint), ("start + finish step", start_finish),
                         ("ledger tool call + checkpoint", tool_and_checkpoint),
                         ("ledger tool call, run(checkpoint=…)", tool_with_checkpoint)):
            before = commits(mem)
            n, dt, cpu = timed(fn, seconds)
            after = commits(mem)
            rows.append(Row(synchronous, name, 1, n, dt,
                            None if before is None or after is None else after - before, cpu))
    return rows


def run_agents(sessions: list[Any], seconds: float) -> tuple[list[int], float, float]:
    """Each session checkpoints in its own thread for `seconds`; (steps per agent, elapsed,
    process time)."""
    done = [0] * len(sessions)
    start = threading.Barrier(len(sessions) + 1)
    stop = threading.Event()

    def agent(k: int) -> None:
        s = sessions[k]
        start.wait()
        while not stop.is_set():
            s.checkpoint(step=done[k], artifacts={"agent": k, "last": done[k]})
            done[k] += 1

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(len(sessions))]
    for t in threads:
        t.start()
    start.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return done, time.perf_counter() - t0, time.process_time() - c0


def concurrent_rows(folder: Path, synchronous: str, seconds: float, counts: list[int]) -> list[Row]:
    rows = []
    for agents in counts:
        with open_memory(folder / f"agents{agents}-{synchronous}", synchronous) as mem:
            sessions = [mem.session(f"agent-{k}") for k in range(agents)]
            for s in sessions:
                s.checkpoint(step=0)  # warm-up: connections, first event of each task
            steady_wal(folder / f"agents{agents}-{synchronous}")
            before = commits(mem)
            done, dt, cpu = run_agents(sessions, seconds)
            after = commits(mem)
            # every acknowledged step is in the log: nothing lost, nothing doubled
            for k, s in enumerate(sessions):
                assert s.task.version == done[k] + 1, (k, s.task.version, done[k])
            rows.append(Row(synchronous, f"{agents} concurrent agents (checkpoint)", agents,
                            sum(done), dt, None if before is None or after is None else after - before,
                            cpu))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="time per row (s)")
    ap.add_argument("--fast", action="store_true", help="0.3 s per row")
    ap.add_argument("--synchronous", nargs="+", default=["FULL", "NORMAL"], choices=["FULL", "NORMAL"])
    ap.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent agent counts")
    ap.add_argument("--folder", type=Path, default=None,
                    help="where the workspaces go (default: a temporary folder; pick the disk to measure)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    seconds = 0.3 if args.fast else args.seconds
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        folder = Path(tmp)
        n, dt = bare_fsync(folder, seconds)
        base = Row("-", "bare fsync loop (baseline)", 1, n, dt)
        rows.append(base)
        for mode in args.synchronous:
            rows += single_agent_rows(folder, mode, seconds)
            rows += concurrent_rows(folder, mode, seconds, args.agents)

    table = Table(title=f"bench_durable — {datetime.now(UTC):%Y-%m-%d} — {seconds:g} s per row, "
                        f"bare fsync = {base.ms:.3f} ms")
    for col in ("synchronous", "workload", "steps/s", "ms / step", "× bare fsync", "CPU ms / step",
                "commits / step"):
        table.add_column(col, justify="left" if col in ("synchronous", "workload") else "right")
    out = []
    for r in rows:
        ratio = r.ms / base.ms
        per_commit = "-" if r.commits is None else f"{r.commits / r.steps:.2f}"
        cpu = "-" if r.cpu_seconds is None else f"{1000 * r.cpu_seconds / r.steps:.3f}"
        table.add_row(r.synchronous, r.workload, f"{r.per_s:,.0f}", f"{r.ms:.3f}", f"{ratio:.2f}", cpu, per_commit)
        out.append({**asdict(r), "per_s": r.per_s, "ms": r.ms, "x_bare_fsync": ratio})
    Console(width=140).print(table)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
