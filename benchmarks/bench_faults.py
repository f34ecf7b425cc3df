"""Outside faults (issue 11): kill -9 from a parent at random wall-clock times, and concurrent
writer processes on one workspace.

Three scenarios, each from outside the library (subprocesses; the kills are not instrumented
points, they land wherever the process happens to be — imports, SQLite commits, fsyncs):

1. **demo** — ``mindpalace demo -w WS`` is SIGKILLed at a random time in [0, T) (T = the time of
   an uninterrupted run), then ``mindpalace demo -w WS --resume`` again and again; after the last
   kill it runs to completion. Checked: acknowledged task events lost, duplicate bookings or
   payments (side effects repeated), final state (world + artifacts + constraints + position)
   vs an uninterrupted run, ``PRAGMA integrity_check``, history.jsonl parseable, raw (non
   MindPalaceError) tracebacks.
2. **writer** — an API writer process runs a seeded list of operations as the steps of a task
   (a message, ``remember`` below and above the long-term threshold, ``forget``, a
   side-effecting tool call through the ledger, a checkpoint) and prints each acknowledged
   operation; it is killed at random times and resumed. Checked against a model of the
   operations: acknowledged writes lost, side effects repeated (the tool appends to an
   outside effects file), forgotten facts resurrected, final state vs an uninterrupted run,
   integrity, history, raw exceptions.
3. **concurrent** — N writer processes for a bounded time on one workspace, half on one shared
   session and half on their own (turns under the session lease): acknowledged writes lost,
   lock errors (StoreBusyError past the retry budget), duplicate message ids, pairing
   violations in the stored logs and the built prompts, raw exceptions.

Baseline in the same run: the uninterrupted demo and writer (their final state is the reference).

    python benchmarks/bench_faults.py            # 220 outside kills, 8 writers for 20 s
    python benchmarks/bench_faults.py --fast     # CI: 2 + 2 kills, 2 writers for 2 s
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
CLI = [sys.executable, "-m", "mindpalace.cli"]
WRITER_OPTS: dict[str, Any] = {"embed": {"provider": "none"}, "facts": {"working_capacity": 100}}
KEYS = [f"user:pref{i}" for i in range(6)]  # a small pool: remembers supersede, forgets bite
# working capacity 100 (the maximum): nothing is evicted, so a missing fact is a lost write


# -- the API writer (runs in a child process) ---------------------------------------------------
def writer_ops(seed: int, n: int) -> list[dict[str, Any]]:
    """The seeded operation list of the API writer (the same list on every resume)."""
    rng = random.Random(f"ops:{seed}")
    kinds = ["msg", "fact_low", "fact_high", "forget", "tool", "ckpt"]
    ops = []
    for i in range(n):
        kind = rng.choice(kinds)
        key = rng.choice(KEYS)
        ops.append({"i": i, "kind": kind, "key": key, "value": f"value {i} of {key}",
                    "text": f"op {i}: message {rng.randrange(10**6)}"})
    return ops


def _effects(ws: Path) -> Path:
    return ws / "effects.log"


def _send(ws: Path, key: str) -> dict[str, Any]:
    """The outside side effect: one line per real execution (O_APPEND + fsync, like a mail
    server's log); duplicates in this file are repeated side effects."""
    with open(_effects(ws), "a", encoding="utf-8") as fh:
        fh.write(key + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return {"sent": key}


def _reconcile(ws: Path) -> Any:
    from mindpalace.tasks import NOT_RUN

    def hook(entry: Any) -> Any:  # "did my call go through?" — ask the outside system
        key = entry.args.get("key")
        path = _effects(ws)
        seen = path.exists() and key in path.read_text(encoding="utf-8").split("\n")
        return {"sent": key} if seen else NOT_RUN

    return hook


def run_writer(ws: Path, seed: int, n: int) -> None:
    from mindpalace import Memory

    ops = writer_ops(seed, n)
    with Memory.open(ws, **WRITER_OPTS) as mem:
        s = mem.session("writer", user="u1", agent="w")
        task = s.task
        task.ledger.reconciler("send", _reconcile(ws))
        if task.version == 0:
            task.plan([f"op{i}" for i in range(n)])
        nxt = task.resume().next_step
        while nxt is not None:
            op = ops[nxt.index]
            if not nxt.retry:
                task.start_step(op["i"], f"op{op['i']}")
            _apply(s, ws, op, retry=nxt.retry)
            task.finish_step(op["i"])
            nxt = task.resume().next_step
    print("done", flush=True)


def _apply(s: Any, ws: Path, op: dict[str, Any], *, retry: bool) -> None:
    i, kind, key = op["i"], op["kind"], op["key"]
    if kind == "msg":
        last = s.messages.list(from_index=max(1, s.messages.count()))
        if not (retry and last and last[-1].message.get("content") == op["text"]):
            s.add_message({"role": "user", "content": op["text"]})
        print(f"ack msg {i}", flush=True)
    elif kind in ("fact_low", "fact_high"):
        s.remember(key, op["value"], importance=0.3 if kind == "fact_low" else 0.9)
        print(f"ack {kind} {i}", flush=True)
    elif kind == "forget":
        s.forget(key)
        print(f"ack forget {i}", flush=True)
    elif kind == "tool":
        with s.tool_call("send", {"key": f"op{i}"}) as call:
            if not call.done:
                call.run(lambda key: _send(ws, key))
        print(f"ack tool {i}", flush=True)
    else:
        s.checkpoint(artifacts={f"op{i}": i})
        print(f"ack ckpt {i}", flush=True)


def writer_model(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The state the operations must leave: messages in order, facts, sends, artifacts."""
    facts: dict[str, str | None] = {}
    for op in ops:
        if op["kind"] in ("fact_low", "fact_high"):
            facts[op["key"]] = op["value"]
        elif op["kind"] == "forget":
            facts[op["key"]] = None
    return {
        "messages": [op["text"] for op in ops if op["kind"] == "msg"],
        "facts": facts,
        "sends": sorted(f"op{op['i']}" for op in ops if op["kind"] == "tool"),
        "artifacts": {f"op{op['i']}": op["i"] for op in ops if op["kind"] == "ckpt"},
    }


def writer_state(ws: Path) -> dict[str, Any]:
    from mindpalace import Memory

    with Memory.open(ws, create=False, **WRITER_OPTS) as mem:
        s = mem.session("writer", user="u1", agent="w")
        facts = {}
        for key in KEYS:
            fact = s.facts.get(key)
            facts[key] = None if fact is None else fact.content
        effects = _effects(ws).read_text(encoding="utf-8").split() if _effects(ws).exists() else []
        return {
            "messages": [m.message.get("content") for m in s.messages.list()],
            "facts": facts,
            "sends": sorted(effects),
            "artifacts": s.task.state().artifacts,
        }


# -- the concurrent writer (a child process) -----------------------------------------------------
def run_concurrent(ws: Path, wid: int, seconds: float) -> None:
    from mindpalace import Memory
    from mindpalace.errors import MindPalaceError, StoreBusyError
    from mindpalace.session.lease import SessionBusyError

    deadline: float | None = None  # the clock starts after the first turn (imports, caches)
    with Memory.open(ws, **WRITER_OPTS) as mem:
        name = "shared" if wid % 2 == 0 else f"own-{wid}"
        s = mem.session(name, user="u1", agent="a")
        j = 0
        while deadline is None or time.monotonic() < deadline:
            if j == 1 and deadline is None:
                deadline = time.monotonic() + seconds
            try:
                with s.lease(holder=f"w{wid}"):
                    _turn(s, ws, name, wid, j)
                j += 1
            except SessionBusyError:
                print("busy", flush=True)
                time.sleep(0.002)
            except StoreBusyError as exc:
                print(f"lockerr {type(exc).__name__} {' '.join(str(exc).split())[:200]}", flush=True)
            except MindPalaceError as exc:
                print(f"err {type(exc).__name__} {' '.join(str(exc).split())[:200]}", flush=True)
    print("done", flush=True)


def _turn(s: Any, ws: Path, name: str, wid: int, j: int) -> None:
    tag = f"w{wid}-t{j}"
    idx = s.add_message({"role": "user", "content": f"{tag}: next turn"})
    print(f"ack msg {name} {idx} {tag}:u", flush=True)
    call_id = f"call-{tag}"
    idx = s.add_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "send", "arguments": json.dumps({"key": tag})}}]})
    print(f"ack msg {name} {idx} {tag}:a", flush=True)
    with s.tool_call("send", {"key": tag}) as call:
        result = call.result if call.done else call.run(lambda key: _send(ws, key))
    print(f"ack tool {name} {tag}", flush=True)
    idx = s.add_message({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
    print(f"ack msg {name} {idx} {tag}:t", flush=True)
    key = f"w{wid}:k{j % 4}"
    if j % 5 == 4:
        s.forget(key)
        print(f"ack forget {name} {key}", flush=True)
    else:
        value = f"{tag} value"
        s.remember(key, value, importance=0.3 if j % 2 else 0.9)
        print(f"ack fact {name} {key} {value}", flush=True)
    s.checkpoint(artifacts={tag: j})
    print(f"ack ckpt {name} {tag}", flush=True)


# -- the parent: kills and checks ----------------------------------------------------------------
@dataclass
class Outcome:
    """Counts of one scenario (summed over its trials)."""

    scenario: str
    trials: int = 0
    kills: int = 0
    acked: int = 0
    lost: int = 0
    repeated_effects: int = 0
    resurrected: int = 0
    state_differs: int = 0
    integrity_failures: int = 0
    history_damaged: int = 0
    raw_exceptions: int = 0
    library_errors: int = 0
    lock_errors: int = 0
    duplicate_ids: int = 0
    pairing_violations: int = 0
    lease_busy: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _raw_tracebacks(stderr: str) -> int:
    return stderr.count("Traceback (most recent call last)")


def _health(ws: Path, out: Outcome) -> None:
    from mindpalace.history import HistoryLog
    from mindpalace.store.sqlite.doctor import check_database

    check = check_database(ws / "memory.db")
    if not check.ok:
        out.integrity_failures += 1
        out.notes.append(f"{ws.name}: integrity {check.problems[:2]}")
    out.history_damaged += len(HistoryLog(ws / "history").scan().damaged)


def _run_and_kill(cmd: list[str], after: float | None, env: dict[str, str]) -> tuple[bool, str, str]:
    """Start `cmd`; SIGKILL it `after` seconds later (None: let it finish). (killed, out, err)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    killed = False
    if after is not None:
        try:
            proc.wait(timeout=after)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            killed = True
    out, err = proc.communicate()
    return killed, out, err


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPT.parent.parent), env.get("PYTHONPATH", "")]))
    env["MINDPALACE_EMBED__PROVIDER"] = "none"
    return env


def _kill_window(timed: float, fixed: float, per_trial: int) -> float:
    """Kill times are drawn uniformly in [0, fixed + 2·work/per_trial): a process start (imports,
    open) plus about 1/per_trial of the work, so a trial sees about `per_trial` kills and some
    of them land before the first write."""
    return fixed + 2 * max(0.05, timed - fixed) / per_trial


def demo_scenario(root: Path, total_kills: int, per_trial: int, steps: int, seed: int) -> Outcome:
    out = Outcome("demo")
    t0 = time.perf_counter()
    env = _env()
    base = [*CLI, "demo", "--no-baseline", "--json", "--steps", str(steps), "--seed", str(seed)]
    timing = [*base, "-w", str(root / "reference"), "--resume"]
    start = time.perf_counter()
    _k, stdout, _e = _run_and_kill(timing, None, env)
    span = time.perf_counter() - start  # an uninterrupted CLI run: the baseline final state
    reference = json.loads(stdout)["reports"][0]["fingerprint"]
    start = time.perf_counter()
    _run_and_kill(timing, None, env)
    fixed = time.perf_counter() - start  # the same on a finished run: start-up and report only
    window = _kill_window(span, fixed, per_trial)
    rng = random.Random(f"demo-kills:{seed}")
    trial = 0
    while out.kills < total_kills:
        ws = root / f"demo-{trial}"
        trial += 1
        out.trials += 1
        for _ in range(per_trial):
            killed, _o, err = _run_and_kill([*base, "-w", str(ws), "--resume"], rng.uniform(0, window), env)
            out.kills += killed
            out.raw_exceptions += _raw_tracebacks(err)
            if not killed:
                break
        _k, stdout, err = _run_and_kill([*base, "-w", str(ws), "--resume"], None, env)
        out.raw_exceptions += _raw_tracebacks(err)
        try:
            data = json.loads(stdout)
            report = data["reports"][0]
        except (ValueError, KeyError, IndexError):
            out.library_errors += 1
            out.notes.append(f"{ws.name}: final resume failed: {err.strip()[-300:]}")
            continue
        acks = ws / "demo" / f"{data['session']}-acks.log"
        out.acked += len(acks.read_text(encoding="utf-8").splitlines()) if acks.exists() else 0
        out.lost += report["acked_events_lost"] or 0
        out.repeated_effects += report["duplicates"]
        if report["fingerprint"] != reference:
            out.state_differs += 1
            out.notes.append(f"{ws.name}: final state differs from the uninterrupted run")
        _health(ws, out)
    out.seconds = time.perf_counter() - t0
    return out


def writer_scenario(root: Path, total_kills: int, per_trial: int, n: int, seed: int) -> Outcome:
    out = Outcome("API writer")
    t0 = time.perf_counter()
    env = _env()
    model = writer_model(writer_ops(seed, n))
    cmd = [sys.executable, str(SCRIPT), "--writer", "--ops", str(n), "--seed", str(seed)]
    timing = [*cmd, "--ws", str(root / "writer-reference")]
    start = time.perf_counter()
    _k, _o, err = _run_and_kill(timing, None, env)
    span = time.perf_counter() - start
    start = time.perf_counter()
    _run_and_kill(timing, None, env)
    window = _kill_window(span, time.perf_counter() - start, per_trial)
    reference = writer_state(root / "writer-reference")
    if reference != model or _raw_tracebacks(err):
        out.notes.append(f"the uninterrupted writer differs from the model: {err.strip()[-300:]}")
    rng = random.Random(f"writer-kills:{seed}")
    trial = 0
    while out.kills < total_kills:
        ws = root / f"writer-{trial}"
        trial += 1
        out.trials += 1
        acks: list[str] = []
        for _ in range(per_trial):
            killed, stdout, err = _run_and_kill([*cmd, "--ws", str(ws)], rng.uniform(0, window), env)
            out.kills += killed
            acks += [line for line in stdout.splitlines() if line.startswith("ack ")]
            out.raw_exceptions += _raw_tracebacks(err)
            out.library_errors += sum(1 for line in stdout.splitlines() if line.startswith("err "))
            if not killed:
                break
        _k, stdout, err = _run_and_kill([*cmd, "--ws", str(ws)], None, env)
        acks += [line for line in stdout.splitlines() if line.startswith("ack ")]
        out.raw_exceptions += _raw_tracebacks(err)
        if "done" not in stdout.split():
            out.library_errors += 1
            out.notes.append(f"{ws.name}: final run failed: {(stdout + err).strip()[-300:]}")
            continue
        state = writer_state(ws)
        out.acked += len(acks)
        lost = _writer_losses(acks, writer_ops(seed, n), state)
        out.lost += lost
        effects = Counter(state["sends"])
        out.repeated_effects += sum(c - 1 for c in effects.values() if c > 1)
        out.resurrected += sum(1 for k, v in model["facts"].items() if v is None and state["facts"].get(k) is not None)
        if state != reference:
            out.state_differs += 1
            diff = [k for k in state if state[k] != reference[k]]
            out.notes.append(f"{ws.name}: final state differs from the uninterrupted run in {diff}")
        _health(ws, out)
    out.seconds = time.perf_counter() - t0
    return out


def _writer_losses(acks: list[str], ops: list[dict[str, Any]], state: dict[str, Any]) -> int:
    """Acknowledged operations whose effect is missing from the final state (a later op on the
    same fact key may legitimately replace a remembered value)."""
    lost = 0
    messages = Counter(state["messages"])
    last_op_on_key = {op["key"]: op["i"] for op in ops if op["kind"] in ("fact_low", "fact_high", "forget")}
    for i in sorted({int(a.split()[2]) for a in acks}):
        op = ops[i]
        if op["kind"] == "msg":
            lost += messages[op["text"]] == 0
        elif op["kind"] in ("fact_low", "fact_high") and last_op_on_key[op["key"]] == i:
            lost += state["facts"].get(op["key"]) != op["value"]
        elif op["kind"] == "tool":
            lost += f"op{i}" not in state["sends"]
        elif op["kind"] == "ckpt":
            lost += state["artifacts"].get(f"op{i}") != i
    return lost


def concurrent_scenario(root: Path, writers: int, seconds: float) -> Outcome:
    from mindpalace import Memory
    from mindpalace.session.pairing import check_pairing

    out = Outcome(f"concurrent ({writers} writers, {seconds:g} s)")
    t0 = time.perf_counter()
    ws = root / "concurrent"
    from mindpalace.workspace import Workspace

    Workspace.init(ws)
    Memory.open(ws, **WRITER_OPTS).close()
    env = _env()
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), "--concurrent-writer", str(w), "--ws", str(ws),
                               "--seconds", str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for w in range(writers)]
    lines: list[str] = []
    for p in procs:
        stdout, err = p.communicate()
        lines += stdout.splitlines()
        out.raw_exceptions += _raw_tracebacks(err)
        if "done" not in stdout.split():
            out.notes.append(f"a writer did not finish: {err.strip()[-300:]}")
    out.trials = 1
    acks = [line.split(" ", 4) for line in lines if line.startswith("ack ")]
    out.acked = len(acks)
    out.library_errors = sum(1 for line in lines if line.startswith("err "))
    lock_errors = sum(1 for line in lines if line.startswith("lockerr "))
    busy = sum(1 for line in lines if line == "busy")
    out.notes += [line for line in lines if line.startswith(("err ", "lockerr "))][:5]
    with Memory.open(ws, create=False, **WRITER_OPTS) as mem:
        sessions = sorted({a[2] for a in acks})
        stored = {name: {m.index: m.message for m in mem.session(name, user="u1", agent="a").messages.list()}
                  for name in sessions}
        msg_ids = Counter((a[2], int(a[3])) for a in acks if a[1] == "msg")
        duplicates = sum(c - 1 for c in msg_ids.values() if c > 1)
        lost_by: Counter[str] = Counter()
        for a in acks:
            kind, name = a[1], a[2]
            if kind == "msg":
                tag = a[4].rsplit(":", 1)[0]
                msg = stored[name].get(int(a[3]), {})
                content = msg.get("content") or json.dumps(msg.get("tool_calls") or "")
                lost_by["message"] += tag not in str(content) and tag not in str(msg.get("tool_call_id", ""))
        final_fact: dict[tuple[str, str], str | None] = {}
        for a in acks:
            if a[1] == "fact":
                final_fact[(a[2], a[3])] = a[4]
            elif a[1] == "forget":
                final_fact[(a[2], a[3])] = None
        resurrected = 0
        for (name, key), value in final_fact.items():
            fact = mem.session(name, user="u1", agent="a").facts.get(key)
            got = None if fact is None else fact.content
            if value is None and got is not None:
                resurrected += 1
            elif value is not None and got != value:
                lost_by["fact" if got is None else "fact (older value)"] += 1
        artifacts = {name: mem.session(name, user="u1", agent="a").task.state().artifacts for name in sessions}
        lost_by["checkpoint"] += sum(1 for a in acks if a[1] == "ckpt" and a[3] not in artifacts[a[2]])
        effects = Counter(_effects(ws).read_text(encoding="utf-8").split()) if _effects(ws).exists() else Counter()
        lost_by["tool call"] += sum(1 for a in acks if a[1] == "tool" and effects[a[3]] == 0)
        lost = sum(lost_by.values())
        if lost:
            out.notes.append("acked writes lost by kind: " + ", ".join(
                f"{k} {v}" for k, v in sorted(lost_by.items()) if v))
        pairing = 0
        for name in sessions:
            pairing += len(check_pairing(list(stored[name].values())))
            pairing += len(check_pairing(mem.session(name, user="u1", agent="a").context(1_000_000).messages))
    out.lost, out.resurrected = lost, resurrected
    out.repeated_effects = sum(c - 1 for c in effects.values() if c > 1)
    out.lock_errors, out.duplicate_ids, out.pairing_violations, out.lease_busy = lock_errors, duplicates, pairing, busy
    _health(ws, out)
    out.seconds = time.perf_counter() - t0
    return out


def print_table(rows: list[Outcome], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    cols = [("scenario", "scenario"), ("trials", "trials"), ("outside kills", "kills"),
            ("acked", "acked"), ("acked lost", "lost"), ("side effects repeated", "repeated_effects"),
            ("deletions resurrected", "resurrected"), ("final ≠ uninterrupted", "state_differs"),
            ("integrity failures", "integrity_failures"), ("history lines damaged", "history_damaged"),
            ("raw exceptions", "raw_exceptions"), ("library errors", "library_errors"),
            ("lock errors", "lock_errors"), ("duplicate ids", "duplicate_ids"),
            ("pairing violations", "pairing_violations"), ("s", "seconds")]
    for label, _ in cols:
        table.add_column(label, justify="left" if label == "scenario" else "right")
    for r in rows:
        table.add_row(*(f"{getattr(r, a):.0f}" if a == "seconds" else str(getattr(r, a)) for _, a in cols))
    Console(width=160).print(table)
    for r in rows:
        for note in r.notes[:6]:
            print(f"  {r.scenario}: {note}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="CI size: 2 + 2 kills, 2 writers for 2 s.")
    ap.add_argument("--demo-kills", type=int, default=None, help="Outside kills of the demo (default 100; fast 2).")
    ap.add_argument("--writer-kills", type=int, default=None,
                    help="Outside kills of the API writer (default 120; fast 2).")
    ap.add_argument("--kills-per-trial", type=int, default=None,
                    help="Kills of one workspace before it runs to the end (default 10; fast 2).")
    ap.add_argument("--steps", type=int, default=None, help="Demo steps (default 160; fast 120).")
    ap.add_argument("--ops", type=int, default=None, help="Writer operations (default 150; fast 30).")
    ap.add_argument("--writers", type=int, default=None, help="Concurrent writers (default 8; fast 2).")
    ap.add_argument("--seconds", type=float, default=None, help="Concurrent run time (default 20; fast 2).")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="Write the rows here as JSON.")
    ap.add_argument("--ws", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--writer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--concurrent-writer", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.writer or args.concurrent_writer is not None:
        return _child(args)
    fast = args.fast
    demo_kills = args.demo_kills if args.demo_kills is not None else (2 if fast else 100)
    writer_kills = args.writer_kills if args.writer_kills is not None else (2 if fast else 120)
    kills = args.kills_per_trial or (2 if fast else 10)
    steps = args.steps or (120 if fast else 160)
    n_ops = args.ops or (30 if fast else 150)
    writers = args.writers or (2 if fast else 8)
    seconds = args.seconds or (2.0 if fast else 20.0)
    import logging

    logging.getLogger("mindpalace").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = [
            demo_scenario(root, demo_kills, kills, steps, args.seed),
            writer_scenario(root, writer_kills, kills, n_ops, args.seed),
            concurrent_scenario(root, writers, seconds),
        ]
    title = (f"bench_faults — {datetime.now(UTC):%Y-%m-%d} — seed {args.seed}, ≤ {kills} kills per trial"
             + (" (fast)" if fast else ""))
    print_table(rows, title)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2), encoding="utf-8")
    return 0


def _child(args: argparse.Namespace) -> int:
    from mindpalace.errors import MindPalaceError

    try:
        if args.writer:
            run_writer(args.ws, args.seed, args.ops or 150)
        else:
            run_concurrent(args.ws, args.concurrent_writer, args.seconds)
    except MindPalaceError as exc:  # a library error: reported, not a raw exception
        print(f"err {type(exc).__name__} {' '.join(str(exc).split())[:300]}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
