"""Durable task state (seed 004): the travel agent under random SIGKILLs, append throughput, recovery.

Measured in one run:

1. **Crash safety** — ``mindpalace demo`` (320 planned steps: 8 attractions, 4 hotel nights with
   payments, a user budget correction, 3 itinerary-review rounds, noise) run once uninterrupted and
   once SIGKILLed at 200 seeded random crash points (inside tool calls, right after the booking
   system committed, around checkpoints), resumed each time. Reported: duplicate bookings or
   payments in the external world, hotel stays over the user's budget, acknowledged events
   missing from the log, whether the final state (world bookings + checkpointed artifacts +
   constraints + plan position) is identical to the uninterrupted run.
2. **Baseline** — the same scripted agent and world with seed 004's memory: a 20-message sliding
   window, tool results merged into a state dict, no ledger, nothing durable; uninterrupted and
   under the same number of crashes (it restarts from step 0: it has nothing to resume from).
3. **Appends/s** — one event per transaction through ``TaskEventStore.append`` (validation +
   snapshot check) vs raw ``Store.append_events`` (the baseline), and batches of 10.
4. **Recovery time** — ``recover(task)`` at 1k and 100k events, with snapshots (latest snapshot +
   replay of the events after it) and without (replay from event 1); median of 5.

    python benchmarks/bench_tasks.py            # full: 200 kills, 100k events
    python benchmarks/bench_tasks.py --fast     # 30 kills, 160 steps, 1k / 10k events
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.demo import fresh_config, run_baseline, run_demo
from mindpalace.store import NewEvent
from mindpalace.tasks import TaskEventStore
from mindpalace.tasks.events import (
    Checkpoint,
    StepFinished,
    StepStarted,
    ToolCallCompleted,
    ToolCallRecorded,
)

console = Console(width=132)


def crash_rows(root: Path, steps: int, kills: int, seed: int) -> list[tuple[str, str, str, str]]:
    clean = run_demo(fresh_config(root, steps=steps, seed=seed, budget_tokens=2000))
    crashed = run_demo(fresh_config(root, steps=steps, seed=seed, budget_tokens=2000), crash_every=1, max_crashes=kills)
    base = run_baseline(fresh_config(root, steps=steps, seed=seed, budget_tokens=2000, name="baseline"))
    base_crash = run_baseline(fresh_config(root, steps=steps, seed=seed, budget_tokens=2000, name="baseline-crash"),
                              crash_every=max(1, steps // 8), max_crashes=kills)
    same = "yes" if crashed.fingerprint == clean.fingerprint else "NO"
    base_same = "yes" if base_crash.fingerprint == base.fingerprint else "no"
    return [
        ("demo, uninterrupted", "steps / events / compactions",
         f"{clean.steps} / {clean.events} / {clean.compactions}", f"{base.steps} / - / -"),
        ("demo, uninterrupted", "peak prompt tokens (budget 2000)", str(clean.peak_prompt_tokens), str(base.peak_prompt_tokens)),
        ("demo, uninterrupted", "bookings / duplicates / budget violations",
         f"{clean.bookings} / {clean.duplicates} / {clean.budget_violations}",
         f"{base.bookings} / {base.duplicates} / {base.budget_violations}"),
        ("demo, uninterrupted", "guard blocks / refused constraint writes",
         f"{clean.guard_blocks} / {clean.refused_constraint_writes}", "- (no guard, no protection)"),
        (f"demo, {kills} SIGKILLs", "kills survived (recoveries)", str(crashed.recoveries), str(base_crash.recoveries)),
        (f"demo, {kills} SIGKILLs", "duplicate bookings/payments", str(crashed.duplicates), str(base_crash.duplicates)),
        (f"demo, {kills} SIGKILLs", "budget violations", str(crashed.budget_violations), str(base_crash.budget_violations)),
        (f"demo, {kills} SIGKILLs", "acknowledged events lost", str(crashed.acked_events_lost), "n/a (nothing durable)"),
        (f"demo, {kills} SIGKILLs", "unknown outcomes reconciled", str(crashed.reconciled_calls), "-"),
        (f"demo, {kills} SIGKILLs", "final state = uninterrupted run", same, base_same),
        (f"demo, {kills} SIGKILLs", "wall time (s)", f"{crashed.seconds:.1f}", f"{base_crash.seconds:.1f}"),
    ]


def sample_events(i: int) -> list:
    key = f"book:{i}"
    return [
        StepStarted(index=i, name=f"step {i}"),
        ToolCallRecorded(key=key, tool="book_ticket", args={"place": f"p{i}", "date": "2025-05-20"}),
        ToolCallCompleted(key=key, tool="book_ticket", status="completed", result={"booking_id": f"TK{i}"}),
        StepFinished(index=i, output={"text": f"booked p{i}"}),
        Checkpoint(artifacts={f"ticket:p{i % 50}": {"booking_id": f"TK{i}"}}),
    ]


def append_rows(mem: Memory, n: int) -> list[tuple[str, str, str, str]]:
    scope = mem.scope(user="bench", session="appends")
    ev = TaskEventStore(mem.store, scope, mem.settings.tasks)
    events = [e for i in range(n // 5 + 1) for e in sample_events(i)][:n]
    t = time.perf_counter()
    for e in events:
        ev.append("single", [e])
    typed = n / (time.perf_counter() - t)
    raw_events = [NewEvent("checkpoint", {"artifacts": {"k": i}}) for i in range(n)]
    t = time.perf_counter()
    for e in raw_events:
        mem.store.append_events(scope, "raw", [e])
    raw = n / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(0, n, 10):
        ev.append("batched", events[i:i + 10])
    batched = n / (time.perf_counter() - t)
    return [
        ("appends", "events/s, 1 event per transaction", f"{typed:,.0f}", f"{raw:,.0f} (raw store)"),
        ("appends", "events/s, 10 events per transaction", f"{batched:,.0f}", "-"),
    ]


def recovery_rows(mem: Memory, sizes: list[int]) -> list[tuple[str, str, str, str]]:
    rows = []
    for size in sizes:
        ev = TaskEventStore(mem.store, mem.scope(user="bench", session=f"recover-{size}"), mem.settings.tasks)
        # `size` events, then the worst case for the snapshot path: N - 1 more events after the
        # latest snapshot (appended one at a time, like an agent does).
        tail = mem.settings.tasks.snapshot_every_events - 1
        batch = 1000
        i = 0
        while ev.version("t") < size:
            chunk = [e for j in range(i, i + batch // 5) for e in sample_events(j)]
            ev.append("t", chunk[: size - ev.version("t")])
            i += batch // 5
        for e in [e for j in range(i, i + tail // 5 + 1) for e in sample_events(j)][:tail]:
            ev.append("t", [e])
        assert ev.recover("t") == ev.recover("t", use_snapshot=False)

        def timed(use_snapshot: bool, store: TaskEventStore = ev) -> float:
            runs = []
            for _ in range(5):
                t = time.perf_counter()
                store.recover("t", use_snapshot=use_snapshot)
                runs.append(time.perf_counter() - t)
            return statistics.median(runs) * 1000

        snap = ev.latest_snapshot("t")
        rows.append((f"recovery, {size:,} events", f"ms (snapshot v{snap.version if snap else 0}, replay {ev.version('t') - (snap.version if snap else 0)})",
                     f"{timed(True):.1f}", f"{timed(False):.1f} (full replay)"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="30 kills, 160 steps, 1k/10k events, 1,000 appends.")
    ap.add_argument("--kills", type=int, default=None, help="SIGKILLs of the crash run (default 200; fast 30).")
    ap.add_argument("--steps", type=int, default=None, help="Planned demo steps (default 320; fast 160).")
    ap.add_argument("--appends", type=int, default=None, help="Events for the append benchmark (default 5,000).")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    kills = args.kills or (30 if args.fast else 200)
    steps = args.steps or (160 if args.fast else 320)
    appends = args.appends or (1000 if args.fast else 5000)
    sizes = [1_000, 10_000] if args.fast else [1_000, 100_000]
    import logging

    logging.getLogger("mindpalace.steps").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = crash_rows(root / "demo", steps, kills, args.seed)
        with Memory.open(root / "ws", embed={"provider": "none"}) as mem:
            rows += append_rows(mem, appends)
            rows += recovery_rows(mem, sizes)
    snapshot_every = Memory.open(Path(tempfile.mkdtemp()), embed={"provider": "none"}).settings.tasks.snapshot_every_events
    table = Table(title=f"bench_tasks — {datetime.now(UTC):%Y-%m-%d} — seed {args.seed}, snapshot every {snapshot_every} events"
                  + (" (fast)" if args.fast else ""))
    for col in ("scenario", "metric", "mindpalace", "baseline"):
        table.add_column(col, justify="left" if col in ("scenario", "metric") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()
