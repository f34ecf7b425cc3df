"""`mindpalace demo`: run the travel agent (optionally under random SIGKILLs) and report.

With ``crash_every=K`` the agent runs in a forked child process; the child SIGKILLs itself at a
seeded random crash point about every K steps (no cleanup, like ``kill -9``), and the parent
starts a new child that resumes from the durable state, until the task completes. The report
then audits the outside world (duplicate bookings, over-budget stays) and the acknowledged-event
log (every event the agent saw committed must still be in the task log).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mindpalace.checks import require_int
from mindpalace.demo.agent import EngineStepResult, Policy, WindowMind
from mindpalace.demo.engine import CRASH_POINTS_PER_STEP, DEMO_SETTINGS, DemoConfig, run_engine
from mindpalace.demo.scenario import MIN_STEPS, budget_for_night, build_plan
from mindpalace.demo.world import World
from mindpalace.errors import MindPalaceError, WorkspaceError
from mindpalace.memory import Memory
from mindpalace.tasks.events import ErrorOccurred, StepFinished, ToolCallCompleted
from mindpalace.tasks.state import TaskState
from mindpalace.tokens import get_counter
from mindpalace.workspace import Workspace


@dataclass(frozen=True, slots=True)
class DemoReport:
    """The final numbers of one demo run (counts; tokens; seconds). None = does not apply
    (the baseline has no event log, no step tiers, no guard, nothing acknowledged)."""

    agent: str
    steps: int
    events: int | None
    compactions: int | None
    peak_prompt_tokens: int
    budget_tokens: int
    bookings: int
    duplicates: int
    budget_violations: int
    guard_blocks: int | None
    refused_constraint_writes: int | None
    recoveries: int
    reconciled_calls: int | None
    acked_events_lost: int | None
    fingerprint: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fingerprint(state: TaskState | None, world: World) -> str:
    """Hash of what must not depend on crashes: bookings made in the world, the checkpointed
    artifacts, constraint values, plan position and status (not event counts or timestamps)."""
    summary = world.summary()
    doc: dict[str, Any] = {"world": [list(r) for r in summary.rows]}
    if state is not None:
        doc |= {
            "artifacts": state.artifacts,
            "constraints": {k: c.value for k, c in state.constraints.items()},
            "step": state.step,
            "status": state.status,
        }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _lost_acks(config: DemoConfig, mem: Memory) -> int:
    """Acknowledged (version, type) pairs missing from the task log. A torn last line (the
    process died while writing it) was never an acknowledgement and is ignored."""
    if not config.ack_path.exists():
        return 0
    task = mem.session(config.session, user="traveller", agent="planner").task
    by_version = {r.version: r.type for r in task.events.read(task.id)}
    lost = 0
    for line in config.ack_path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        lost += by_version.get(int(parts[0])) != parts[1]
    return lost


def engine_report(config: DemoConfig, *, recoveries: int, seconds: float) -> DemoReport:
    """Audit a finished engine run: task log, world, acknowledgements."""
    with Memory.open(config.workspace, **DEMO_SETTINGS) as mem:
        s = mem.session(config.session, user="traveller", agent="planner")
        state = s.task.state()
        records = s.task.events.read(s.task.id)
        events = [r.event for r in records]
        outputs = [e.output for e in events if isinstance(e, StepFinished)]
        peak = max((o.get("prompt_tokens", 0) for o in outputs if isinstance(o, dict)), default=0)
        codes = [e.code for e in events if isinstance(e, ErrorOccurred)]
        reconciled = sum(1 for e in events if isinstance(e, ToolCallCompleted) and e.reconciled)
        lost = _lost_acks(config, mem)
        compactions = _compactions(s)
    world = World(config.world_path)
    try:
        summary = world.summary()
        return DemoReport(
            agent="mindpalace", steps=state.steps_finished, events=state.version, compactions=compactions,
            peak_prompt_tokens=peak, budget_tokens=config.budget_tokens, bookings=summary.bookings,
            duplicates=summary.duplicates + summary.duplicate_payments,
            budget_violations=world.over_budget(budget_for_night),
            guard_blocks=codes.count("guard_blocked"), refused_constraint_writes=codes.count("constraint_refused"),
            recoveries=recoveries, reconciled_calls=reconciled, acked_events_lost=lost,
            fingerprint=fingerprint(state, world), seconds=seconds,
        )
    finally:
        world.close()


def _compactions(session: Any) -> int:
    """Compactions done by the step tiers (recent → summary and summary-of-summaries)."""
    counters = session.steps.counters
    return int(counters.get("compactions", 0)) + int(counters.get("summary_compactions", 0))


def run_demo(
    config: DemoConfig,
    *,
    crash_every: int | None = None,
    max_crashes: int | None = None,
    on_progress: Callable[[int, int, int, str], None] | None = None,
) -> DemoReport:
    """Run the demo to completion; returns the audited report.

    Args:
        crash_every: SIGKILL the agent about every K steps (seeded) and resume it each time.
        max_crashes: stop killing after this many kills (the rest runs uninterrupted).
        on_progress: ``(steps done, steps total, recoveries, last step's result)`` after each
            step (in the parent).
    Raises:
        ValidationError: `crash_every` is negative (it would kill every child at once, forever).
        MindPalaceError: a child failed with something other than our SIGKILL.
    """
    _require_crash_every(crash_every)
    start = time.perf_counter()
    if not crash_every:
        def step_cb(i: int, total: int, result: EngineStepResult) -> None:
            if on_progress:
                on_progress(i + 1, total, 0, f"{result.name}: {result.text}")

        run_engine(config, on_step=step_cb)
        return engine_report(config, recoveries=0, seconds=time.perf_counter() - start)
    _prewarm(config)
    rng = random.Random(f"crash:{config.seed}")
    recoveries = 0
    while True:
        die_after: int | None = rng.randint(1, max(2, 2 * crash_every * CRASH_POINTS_PER_STEP))
        if max_crashes is not None and recoveries >= max_crashes:
            die_after = None
        def relay(done: int, total: int, last: str, seen: int = recoveries) -> None:
            if on_progress is not None:
                on_progress(done, total, seen, last)

        status = _run_child(config, die_after, relay)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            recoveries += 1
            continue
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            break
        raise MindPalaceError(f"demo agent process failed (wait status {status}); see its stderr above")
    return engine_report(config, recoveries=recoveries, seconds=time.perf_counter() - start)


def _require_crash_every(crash_every: int | None) -> None:
    if crash_every is not None:
        require_int("crash_every (steps between kills; 0 = never)", crash_every, minimum=0)


def _prewarm(config: DemoConfig) -> None:
    """Create the workspace and load the tokenizer once in the parent, so every forked agent
    process starts in milliseconds (a crash-heavy run forks hundreds of them)."""
    workspace = Workspace.open(config.workspace)
    get_counter(workspace.settings.tokens.tokenizer)


def _run_child(config: DemoConfig, die_after: int | None, progress: Callable[[int, int, str], Any]) -> int:
    """Fork one agent process (cheap: no re-import) and wait for it, relaying its progress."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: run, report each step on the pipe, exit without parent cleanup
        os.close(read_fd)
        code = 0
        try:
            def step_cb(i: int, total: int, result: EngineStepResult) -> None:
                last = " ".join(f"{result.name}: {result.text}".split())[:200]
                os.write(write_fd, f"{i + 1} {total} {last}\n".encode())

            run_engine(config, die_after=die_after, on_step=step_cb)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(write_fd)
    buf = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(4096):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            if lines:
                done, total, last = ([*lines[-1].decode(errors="replace").split(" ", 2), ""])[:3]
                progress(int(done), int(total), last)
    _, status = os.waitpid(pid, 0)
    return status


def run_baseline(config: DemoConfig, *, crash_every: int | None = None, max_crashes: int | None = None) -> DemoReport:
    """Seed 004's agent: same policy and world, a 20-message window, no ledger, no checkpoint.

    With `crash_every`, a crash loses its in-memory state and it restarts from step 0 (it has
    nothing durable to resume from); the world keeps every booking it made.
    """
    _require_crash_every(crash_every)
    start = time.perf_counter()
    plan = build_plan(config.steps, config.seed)
    world = World(config.world_path)
    counter = get_counter("o200k_base")
    rng = random.Random(f"crash:{config.seed}")
    recoveries = 0
    try:
        policy = Policy(world, config.seed)
        mind = WindowMind(counter)
        i = 0
        spacing = max(2, 2 * crash_every) if crash_every else None
        next_crash = rng.randint(1, spacing) if spacing else None
        executed = 0
        while i < len(plan):
            limit = 10 * len(plan) if max_crashes is None else max_crashes
            if next_crash is not None and executed == next_crash and recoveries < limit:
                recoveries += 1
                mind, i, executed = WindowMind(counter), 0, 0  # restart from scratch
                next_crash = rng.randint(1, spacing) if spacing else None
                continue
            policy.execute(mind, i, plan[i])
            i += 1
            executed += 1
        summary = world.summary()
        return DemoReport(
            agent="sliding window, no ledger", steps=len(plan), events=None, compactions=None,
            peak_prompt_tokens=mind.peak_tokens, budget_tokens=config.budget_tokens,
            bookings=summary.bookings, duplicates=summary.duplicates + summary.duplicate_payments,
            budget_violations=world.over_budget(budget_for_night), guard_blocks=None,
            refused_constraint_writes=None, recoveries=recoveries, reconciled_calls=None,
            acked_events_lost=None, fingerprint=fingerprint(None, world), seconds=time.perf_counter() - start,
        )
    finally:
        world.close()


def fresh_config(workspace: Path, *, steps: int, seed: int, budget_tokens: int, name: str = "demo") -> DemoConfig:
    """A config with a session id not used yet in `workspace` (re-running never resumes an old demo).

    The id is reserved atomically by creating its (empty) world database with O_EXCL, so two
    demos started at once on one workspace never share a session.

    Raises:
        ValidationError: fewer than MIN_STEPS (120) steps, or a budget below 1 token.
        WorkspaceError: `workspace` cannot be used as a folder (e.g. it is a file).
    """
    require_int(f"steps (at least {MIN_STEPS})", steps, minimum=MIN_STEPS)
    require_int("budget_tokens", budget_tokens)
    try:
        (workspace / "demo").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot use {workspace} as the demo's workspace folder: {exc}") from exc
    n = 1
    while True:
        config = DemoConfig(workspace, f"{name}-s{seed}-r{n}", steps, seed, budget_tokens)
        try:
            os.close(os.open(config.world_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            n += 1
            continue
        _write_atomic(config.config_path, json.dumps(config.to_json()))
        return config


def resume_config(workspace: Path, *, name: str = "demo") -> DemoConfig | None:
    """The newest demo run of `workspace` (its parameters as :func:`fresh_config` stored them),
    to continue after the process was killed; None when the workspace has none.

    A run killed before its parameters were stored had done nothing durable: it is skipped
    (a new run is the right continuation).
    """
    folder = workspace / "demo"
    found: list[tuple[float, DemoConfig]] = []
    for path in folder.glob(f"{name}-s*-r*.json") if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            config = DemoConfig(workspace, str(data["session"]), int(data["steps"]), int(data["seed"]),
                                int(data["budget_tokens"]))
        except (OSError, ValueError, KeyError, TypeError, RecursionError, OverflowError):
            continue  # a damaged parameter file (hostile nesting, 1e999) is not a run we can continue
        if config.session == path.stem:
            found.append((path.stat().st_mtime, config))
    return max(found, key=lambda f: (f[0], f[1].session))[1] if found else None


def _write_atomic(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all (temp file + fsync + rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
