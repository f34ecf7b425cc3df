"""CLI: `mindpalace init` and `mindpalace status`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from mindpalace.cli.app import app, console, print_json
from mindpalace.memory import Memory
from mindpalace.scope import ANY
from mindpalace.workspace import Workspace


@app.command()
def init(directory: Path = typer.Argument(Path("."), help="Workspace folder to create.", envvar="MINDPALACE_WORKSPACE")) -> None:
    """Create a workspace folder (idempotent): mindpalace.toml, memory.db, knowledge/, archive/."""
    ws = Workspace.init(directory)
    Memory.open(ws.root).close()  # creates and migrates memory.db
    console.print(f"workspace ready at [bold]{ws.root}[/]")


@app.command()
def status(
    directory: Path = typer.Argument(Path("."), help="Workspace folder.", envvar="MINDPALACE_WORKSPACE"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Show what a workspace holds: sessions, records, facts, events, sizes, schema version."""
    ws = Workspace.open(directory, create=False)
    with Memory.open(ws.root) as mem:
        st = mem.store.stats()
        everyone = mem.scope().with_(user=ANY, agent=ANY, session=ANY)
        facts = len(mem.store.kv_list(everyone, "facts"))
    files = sum(p.stat().st_size for p in ws.root.rglob("*") if p.is_file() and ".git" not in p.parts)
    data = {
        "workspace": str(ws.root),
        "schema_version": st.schema_version,
        "sessions": st.sessions,
        "events": st.events,
        "streams": st.streams,
        "records": st.records,
        "facts": facts,
        "kv_entries": st.kv_entries,
        "documents": st.documents,
        "embeddings": st.embeddings,
        "db_bytes": st.size_bytes,
        "workspace_bytes": files,
    }
    if as_json:
        print_json(data)
        return
    table = Table(title=f"mindpalace workspace {ws.root}")
    table.add_column("item")
    table.add_column("value", justify="right")
    for key, value in data.items():
        if key != "workspace":
            table.add_row(key, str(value))
    console.print(table)

