"""CLI: `task show|events|resume|resolve TASK`, `ledger TASK`, and `demo` — thin layers over
mindpalace.tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from mindpalace.cli.app import WorkspaceOpt, app, console, open_memory, print_json

task_app = typer.Typer(help="Durable task state: event log, checkpoints, resume point.",
                       no_args_is_help=True)
app.add_typer(task_app, name="task")

SessionOpt = typer.Option(
    None, "--session", help="Session id of the task (default: search every session)."
)
UserOpt = typer.Option(None, "--user", help="User id of the task's scope (default: any).")
AgentOpt = typer.Option(None, "--agent", help="Agent id of the task's scope (default: any).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text.")


@task_app.command("show")
def task_show(
    task: str = typer.Argument(..., help="Task id."),
    workspace: Path = WorkspaceOpt,
    session: str | None = SessionOpt,
    user: str | None = UserOpt,
    agent: str | None = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show a task's recovered state: status, step, constraints, guards, ledger in flight."""
    with open_memory(workspace) as mem:
        state = mem.find_task(task, session=session, user=user, agent=agent).state()
    if as_json:
        print_json(state.to_json())
        return
    table = Table(title=f"task {task} (version {state.version})", show_header=False)
    table.add_column("field")
    table.add_column("value")
    current = state.current
    constraints = "; ".join(f"{k} = {json.dumps(c.value, ensure_ascii=False)} ({c.source})"
                            for k, c in state.constraints.items())
    rows: list[tuple[str, Any]] = [
        ("status", state.status),
        ("step", f"{state.step} of {len(state.plan)}" if state.plan else state.step),
        ("current step", f"{current.index} {current.name} (unfinished)" if current else "-"),
        ("constraints", constraints or "-"),
        ("guards", "; ".join(f"{g.tool}: {g.expr}" for g in state.guards.values()) or "-"),
        ("corrections", len(state.feedback)),
        ("tool calls", ", ".join(f"{k} {v}" for k, v in state.calls.items())),
        ("calls running", ", ".join(k for k, f in state.in_flight.items() if f.running()) or "-"),
        ("outcome unknown", ", ".join(k for k, f in state.in_flight.items() if not f.running()) or "-"),
        ("errors / refusals", f"{state.errors} / {state.refusals}"),
        ("artifacts", len(state.artifacts)),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)


@task_app.command("events")
def task_events(
    task: str = typer.Argument(..., help="Task id."),
    from_version: int = typer.Option(1, "--from-version", help="First event version to show."),
    limit: int = typer.Option(
        50, "--limit", min=0, help="Show at most this many events (0 = all)."
    ),
    workspace: Path = WorkspaceOpt,
    session: str | None = SessionOpt,
    user: str | None = UserOpt,
    agent: str | None = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List a task's events from a version on (the event log is the source of truth)."""
    with open_memory(workspace) as mem:
        t = mem.find_task(task, session=session, user=user, agent=agent)
        records = t.read(from_version)
    if limit:
        records = records[:limit]
    if as_json:
        print_json([{"version": r.version, "type": r.type, "data": r.data,
                     "created_at": r.created_at} for r in records])
        return
    for r in records:  # one line each, never wrapped
        typer.echo(f"{r.version:>6}  {r.type:<20} {json.dumps(r.data, ensure_ascii=False)[:160]}")


@task_app.command("resume")
def task_resume(
    task: str = typer.Argument(..., help="Task id."),
    workspace: Path = WorkspaceOpt,
    session: str | None = SessionOpt,
    user: str | None = UserOpt,
    agent: str | None = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show where a resumed agent would continue: the next step and calls with unknown outcome."""
    with open_memory(workspace) as mem:
        r = mem.find_task(task, session=session, user=user, agent=agent).resume()
    nxt = r.next_step
    data = {
        "version": r.state.version,
        "status": r.state.status,
        "next_step": None if nxt is None else {"index": nxt.index, "name": nxt.name,
                                               "retry": nxt.retry},
        "unknown_calls": r.unknown_calls,
        "running_calls": r.running_calls,
    }
    if as_json:
        print_json(data)
        return
    if nxt is None:
        console.print(f"task {task}: {r.state.status}, nothing left to run "
                      f"(version {r.state.version})")
    else:
        again = " (started before the crash; run it again)" if nxt.retry else ""
        console.print(Text.assemble(f"task {task}: next step {nxt.index} ", (nxt.name, "bold"),
                                    again))
    for key in r.unknown_calls:
        console.print(Text.assemble(("outcome unknown", "yellow"),
                                    f" {key}: not re-run automatically; reconcile it first"))
    for key in r.running_calls:
        console.print(Text.assemble(("running", "cyan"),
                                    f" {key}: in flight in a live process; wait for its outcome"))


@task_app.command("resolve")
def task_resolve(
    task: str = typer.Argument(..., help="Task id."),
    key: str = typer.Argument(
        ..., help="Ledger key of the call with unknown outcome (see `task resume`)."
    ),
    result: str | None = typer.Option(None, "--result", help="It happened: its result as JSON."),
    error: str | None = typer.Option(
        None, "--error", help="It did not happen: why (the call may then run again)."
    ),
    force: bool = typer.Option(
        False, "--force",
        help="The call's owner is a process on another host that you know is gone "
             "(never overrides a live owner on this host).",
    ),
    workspace: Path = WorkspaceOpt,
    session: str | None = SessionOpt,
    user: str | None = UserOpt,
    agent: str | None = AgentOpt,
) -> None:
    """Settle a tool call whose outcome is unknown, after checking the external system."""
    from mindpalace.errors import ValidationError

    if (result is None) == (error is None):
        raise ValidationError(
            "give exactly one of --result JSON (it happened) or --error TEXT (it did not)")
    try:
        value = None if result is None else json.loads(result)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"--result is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ValidationError("--result is nested too deep to be a tool result") from exc
    try:
        json.dumps(value, allow_nan=False)
    except ValueError as exc:  # Python's parser takes NaN, Infinity and 1e999 (→ inf)
        raise ValidationError(f"--result is not valid JSON: {exc} (NaN, Infinity, 1e999)") from exc
    with open_memory(workspace) as mem:
        t = mem.find_task(task, session=session, user=user, agent=agent)
        entry = t.resolve(key, result=value, error=error, force=force)
    console.print(f"{key}: {entry.status} (reconciled by hand)")


@app.command("ledger")
def ledger(
    task: str = typer.Argument(..., help="Task id."),
    tool: list[str] = typer.Option(
        [], "--tool", help="Only calls of this tool (repeat the option)."
    ),
    workspace: Path = WorkspaceOpt,
    session: str | None = SessionOpt,
    user: str | None = UserOpt,
    agent: str | None = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show a task's idempotency ledger: every keyed tool call, its status, attempts and result."""
    with open_memory(workspace) as mem:
        t = mem.find_task(task, session=session, user=user, agent=agent)
        entries = [e for e in t.ledger_entries() if not tool or e.tool in tool]
    if as_json:
        print_json([e.to_json() for e in entries])
        return
    table = Table(title=f"ledger of task {task} ({len(entries)} calls)")
    for col in ("key", "tool", "status", "attempt", "result"):
        table.add_column(col, no_wrap=col != "result", overflow="ellipsis")
    for e in entries:
        shown = e.error if e.status in ("failed", "unknown") else json.dumps(e.result, ensure_ascii=False)
        status = f"{e.status} (reconciled)" if e.reconciled else e.status
        table.add_row(e.key, e.tool, status, str(e.attempt),
                      " ".join((shown or "").split())[:80])
    console.print(table)


@app.command("demo")
def demo(
    workspace: Path | None = typer.Option(
        None, "--workspace", "-w", help="Workspace folder (default: a fresh temporary one)."
    ),
    steps: int = typer.Option(320, "--steps", help="Planned steps (at least 120)."),
    crash_every: int = typer.Option(
        0, "--crash-every",
        help="SIGKILL the agent about every K steps and resume it (0 = never).",
    ),
    seed: int = typer.Option(
        7, "--seed", help="Seed of the plan, the model's temptations and the kill points."
    ),
    budget_tokens: int = typer.Option(
        2000, "--budget-tokens", help="Prompt budget of the agent (tokens)."
    ),
    baseline: bool = typer.Option(
        True, "--baseline/--no-baseline", help="Also run seed 004's sliding-window agent."
    ),
    resume: bool = typer.Option(
        False, "--resume",
        help="Continue the newest demo of --workspace (e.g. one killed from outside) from its "
             "checkpoint, with its own --steps/--seed/--budget-tokens; a new one if it has none.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Run a long-horizon travel agent (seed 004) on mindpalace — optionally under SIGKILLs.

    With --resume the newest run of the workspace continues to the same final state an
    uninterrupted run reaches (a finished run just reports again)."""
    import logging
    import tempfile

    from rich.live import Live
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from mindpalace.demo import fresh_config, resume_config, run_baseline, run_demo
    from mindpalace.errors import ValidationError

    # The step tiers warn at 0.7·B on every step of a long run; the report counts compactions.
    logging.getLogger("mindpalace.steps").setLevel(logging.ERROR)
    if resume and workspace is None:
        raise ValidationError("--resume needs the --workspace/-w folder of the run to continue")
    root = workspace or Path(tempfile.mkdtemp(prefix="mindpalace-demo-"))
    config = (resume_config(root) if resume else None) or fresh_config(
        root, steps=steps, seed=seed, budget_tokens=budget_tokens)
    # the note is the agent's last action (model text): task fields, never markup
    progress = Progress(
        TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
        MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[kills]}", style="dim", markup=False),
        TextColumn("{task.fields[note]}", markup=False), console=console,
    )
    bar = progress.add_task("travel agent", total=config.steps, kills="", note="")
    note_chars = max(20, console.width - 70)
    # auto_refresh off: the crash mode forks, and a refresh thread must not exist at fork time.
    with Live(progress, console=console, auto_refresh=False, transient=as_json) as live:
        def on_progress(done: int, total: int, recoveries: int, last: str) -> None:
            kills = f"kills {recoveries}" if crash_every else ""
            progress.update(bar, completed=done, total=total, kills=kills,
                            note=last[:note_chars - len(kills)])
            live.refresh()

        report = run_demo(config, crash_every=crash_every or None, on_progress=on_progress)
    if not as_json and not console.is_terminal:
        console.line()  # off a terminal the last progress line has no newline of its own
    reports = [report]
    if baseline:
        reports.append(run_baseline(fresh_config(root, steps=config.steps, seed=config.seed,
                                                 budget_tokens=config.budget_tokens, name="baseline")))
    if as_json:
        print_json({"workspace": str(root), "session": config.session,
                    "reports": [r.to_json() for r in reports]})
        return
    _print_reports(reports)
    console.print(f"workspace: {root}   task: {config.session}   "
                  f"(try: mindpalace task show {config.session} -w {root})")


def _print_reports(reports: list[Any]) -> None:
    table = Table(title="mindpalace demo — 5 days in Tokyo, seed 004's travel agent")
    table.add_column("")
    for r in reports:
        table.add_column(r.agent, justify="right")
    fields = [
        ("steps", "steps"), ("task events", "events"), ("compactions", "compactions"),
        ("peak prompt tokens", "peak_prompt_tokens"), ("prompt budget (tokens)", "budget_tokens"),
        ("bookings made", "bookings"), ("duplicate bookings/payments", "duplicates"),
        ("budget violations", "budget_violations"),
        ("over-budget calls blocked by guard", "guard_blocks"),
        ("tool writes to constraints refused", "refused_constraint_writes"),
        ("crash recoveries", "recoveries"), ("unknown outcomes reconciled", "reconciled_calls"),
        ("acknowledged events lost", "acked_events_lost"), ("seconds", "seconds"),
    ]
    for label, name in fields:
        values = [getattr(r, name) for r in reports]
        table.add_row(label, *("-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
                               for v in values))
    console.print(table)
