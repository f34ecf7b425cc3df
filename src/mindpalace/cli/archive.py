"""CLI: `archive` — finished or idle sessions into the L4 archive (seed 003)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from mindpalace.cli.app import (
    AgentOpt,
    JsonOpt,
    UserOpt,
    WorkspaceOpt,
    app,
    console,
    open_memory,
    print_json,
)


@app.command("archive")
def archive(
    session: str | None = typer.Option(None, "--session", "-s", help="Archive this (finished) session now."),
    idle: bool = typer.Option(False, "--idle", help="Archive every session idle past knowledge.archive_idle_hours."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Archive sessions to L4: exchanges compressed, de-duplicated, appended to
    archive/<tenant>/YYYY-MM.jsonl.gz and indexed for recall (read one with its archive:<hash>).

    Sessions with a turn in flight are skipped; running it again changes nothing."""
    from mindpalace.errors import ValidationError

    if (session is None) == (not idle):
        raise ValidationError("archive: give --session SESSION or --idle (not both)")
    with open_memory(workspace) as mem:
        outs = mem.archive_idle() if idle else [mem.session(session or "", user=user, agent=agent).archive()]
    rows = [asdict(o) for o in outs]
    if as_json:
        print_json(rows)
        return
    for r in rows:
        console.print(f"{r['session']}: {r['status']}, {r['exchanges']} exchanges "
                      f"({r['appended']} appended, {r['duplicates']} already archived), "
                      f"archived through message #{r['through']}",
                      soft_wrap=True)
    if not rows:
        console.print("no sessions")

