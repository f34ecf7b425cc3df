"""CLI: `mindpalace init`, `mindpalace status` and `mindpalace doctor`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from mindpalace.cli.app import app, console, open_memory, print_json


@app.command()
def init(
    directory: Path = typer.Argument(
        Path("."), help="Workspace folder to create.", envvar="MINDPALACE_WORKSPACE"
    ),
) -> None:
    """Create a workspace folder (idempotent): mindpalace.toml, memory.db, knowledge/, archive/."""
    from mindpalace.memory import Memory
    from mindpalace.workspace import Workspace

    ws = Workspace.init(directory)
    Memory.open(ws.root).close()  # creates and migrates memory.db
    console.print(Text.assemble("workspace ready at ", (str(ws.root), "bold")))


@app.command()
def status(
    directory: Path = typer.Argument(
        Path("."), help="Workspace folder.", envvar="MINDPALACE_WORKSPACE"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Show what a workspace holds: sessions, records, facts, events, sizes, schema version,
    and the memory activity the lineage log recorded (prompts vs budget, compactions, recalls)."""
    with open_memory(directory) as mem:
        data = mem.stats().to_json()
        active = mem.activity()
    root = data["workspace"]
    if as_json:
        print_json({**data, "activity": active})
        return
    table = Table(title=f"mindpalace workspace {root}")
    table.add_column("item")
    table.add_column("value", justify="right")
    for key, value in data.items():
        if key != "workspace":
            table.add_row(key, str(value))
    console.print(table)
    metrics = Table(title="memory activity (lineage; live counters: GET /metrics on `serve`)")
    metrics.add_column("metric")
    metrics.add_column("value", justify="right")
    for key, value in active.items():
        metrics.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(metrics)


@app.command()
def doctor(
    directory: Path = typer.Argument(
        Path("."), help="Workspace folder.", envvar="MINDPALACE_WORKSPACE"
    ),
    export: Path | None = typer.Option(
        None, "--export", help="Write every readable row and message as JSONL into this folder."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Check a workspace read-only: integrity_check on memory.db, history.jsonl lines, stray temp
    files; --export saves what is readable. Exits 1 when something is damaged."""
    from mindpalace.workspace import doctor as run_doctor

    report = run_doctor(directory, export=export)
    if as_json:
        print_json(report.to_json())
    else:
        db = report.database
        verdict = ("ok", "green") if db.ok else ("DAMAGED", "red")
        console.print(Text.assemble("memory.db: ", verdict,
                                    f"  ({db.size_bytes} bytes, schema {db.schema_version})"))
        for line in db.problems[:20]:
            console.print(f"  {line}")
        console.print(f"history.jsonl: {report.history_entries} entries, "
                      f"{len(report.history_damaged)} damaged lines")
        for d in report.history_damaged[:20]:
            console.print(f"  line {d.lineno}: {d.problem}")
        if report.stray_files:
            console.print(f"stray temp files (removed on the next open): {', '.join(report.stray_files)}")
        if export is not None:
            rows = ", ".join(f"{name} {n}" for name, n in db.exported.items())
            skipped = sum(db.unreadable.values())
            console.print(f"exported to {export}: {rows}; {skipped} unreadable rows")
    if not report.ok:
        raise typer.Exit(1)
