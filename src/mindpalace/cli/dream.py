"""CLI: `dream` — curate the knowledge files from unconsumed history, once or on a schedule
(seed 002)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from mindpalace.cli.app import (
    JsonOpt,
    WorkspaceOpt,
    app,
    console,
    err_console,
    open_memory,
    print_json,
)

if TYPE_CHECKING:
    from mindpalace.knowledge.dream import DreamReport


@app.command("dream")
def dream(
    workspace: Path = WorkspaceOpt,
    user: str | None = typer.Option(None, "--user", "-u", help="Curate this user's files only."),
    agent: str | None = typer.Option(None, "--agent", "-a", help="Curate this agent's files only."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the diff the dream would commit; change nothing."),
    schedule: bool = typer.Option(
        False, "--schedule", help="Run every knowledge.dream_interval_hours (or on knowledge.dream_cron), "
        "and archive idle sessions every knowledge.archive_interval_hours, in the foreground until "
        "SIGTERM / Ctrl-C."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Refuse at once when another dream of the scope runs."),
    as_json: bool = JsonOpt,
) -> None:
    """Dream: fold the history after each scope's .dream_cursor into SOUL.md / USER.md / MEMORY.md
    with small patches, one commit per scope (LLM when configured, else the offline curator)."""
    wait = 0.0 if no_wait else None
    if schedule:
        _scheduled(workspace, user, agent, wait, as_json)
        return
    with open_memory(workspace) as mem:
        reports = mem.dream(user=user, agent=agent, dry_run=dry_run, wait_seconds=wait)
    _print(reports, as_json)


def _scheduled(workspace: Path, user: str | None, agent: str | None, wait: float | None, as_json: bool) -> None:
    from mindpalace.errors import MindPalaceError
    from mindpalace.knowledge.schedule import archive_trigger, dream_trigger, run_schedule

    with open_memory(workspace) as mem:
        triggers = (archive_trigger(mem.settings.knowledge), dream_trigger(mem.settings.knowledge))

        def archive() -> None:
            try:
                outs = mem.archive_idle()
            except MindPalaceError as exc:  # the schedule goes on; the next run retries
                err_console.print(f"archive failed: {exc}", soft_wrap=True)
                return
            done = [o for o in outs if o.status == "archived"]
            console.print(f"archive: {len(done)} idle sessions archived, "
                          f"{sum(o.appended for o in done)} exchanges appended", soft_wrap=True)

        def dream() -> None:
            try:
                _print(mem.dream(user=user, agent=agent, wait_seconds=wait), as_json)
            except MindPalaceError as exc:
                err_console.print(f"dream failed: {exc}", soft_wrap=True)

        console.print(f"schedule: archive {triggers[0]}, dream {triggers[1]} (SIGTERM or Ctrl-C stops it)",
                      soft_wrap=True)
        run_schedule([("archive", archive, triggers[0]), ("dream", dream, triggers[1])])
    console.print("schedule stopped")


def _print(reports: list[DreamReport], as_json: bool) -> None:
    rows = [r.to_json() for r in reports]
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no history to dream over")
    for r in rows:
        console.print(_line(r), soft_wrap=True)
        if r["status"] == "dry-run" and r["diff"]:
            console.print(r["diff"].rstrip("\n"), soft_wrap=True)


def _line(r: dict[str, Any]) -> str:
    tokens = f", {r['tokens_spent']}/{r['token_budget']} tokens" if r["mode"] == "llm" else ""
    rejected = f", {len(r['rejected'])} rejected" if r["rejected"] else ""
    commit = f", commit {r['commit'][:10]}" if r["commit"] else ""
    why = f": {r['reason']}" if r["reason"] else ""
    return (f"{r['scope']}: {r['status']} ({r['mode']}), {r['entries']} new entries, "
            f"{len(r['patches'])} patches, {len(r['promotions'])} promoted{rejected}{tokens}, "
            f"cursor {r['cursor_before']} → {r['cursor_after']}{commit}{why}")
