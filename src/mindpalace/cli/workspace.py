"""CLI: `mindpalace init` and `mindpalace status`."""

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
    """Show what a workspace holds: sessions, records, facts, events, sizes, schema version."""
    with open_memory(directory) as mem:
        data = mem.stats().to_json()
    root = data["workspace"]
    if as_json:
        print_json(data)
        return
    table = Table(title=f"mindpalace workspace {root}")
    table.add_column("item")
    table.add_column("value", justify="right")
    for key, value in data.items():
        if key != "workspace":
            table.add_row(key, str(value))
    console.print(table)
