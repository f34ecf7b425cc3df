"""CLI: `mindpalace worker` — the background worker (idle compaction, dream, L4 archiving, task
snapshots on their intervals) in the foreground until SIGTERM / Ctrl-C."""

from __future__ import annotations

from pathlib import Path

import typer

from mindpalace.cli.app import JsonOpt, WorkspaceOpt, app, console, open_memory, print_json


@app.command("worker")
def worker(
    workspace: Path = WorkspaceOpt,
    job: list[str] = typer.Option(None, "--job", "-j",
                                  help="Run only this job (repeatable): compact, dream, archive, snapshot."),
    once: bool = typer.Option(False, "--once", help="Run every job once for its current due time and exit."),
    as_json: bool = JsonOpt,
) -> None:
    """Run the maintenance jobs on their intervals ([worker], [knowledge]); several workers on
    one workspace run each job once per due time; SIGTERM finishes the current unit and exits."""
    from mindpalace.worker import RunReport, worker_for

    def show(r: RunReport) -> None:
        if as_json:
            print_json(r.to_json())
        else:
            detail = f" ({r.detail})" if r.detail else ""
            console.print(f"{r.job} @ {r.due}: {r.status}, {r.units} units, {r.tokens} tokens{detail}",
                          soft_wrap=True)

    with open_memory(workspace) as mem:
        w = worker_for(mem, job or None)
        if once:
            for report in w.run_once():
                show(report)
            return
        if not as_json:
            console.print("worker: " + ", ".join(f"{j.name} {j.trigger}" for j in w.jobs)
                          + " (SIGTERM or Ctrl-C stops it)", soft_wrap=True)
        w.run_forever(on_report=show, on_stop=lambda signum: console.print(
            f"worker: signal {signum}, stopping after the current unit"))
    if not as_json:
        console.print("worker stopped")
