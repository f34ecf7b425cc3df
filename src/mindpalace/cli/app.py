"""The typer application every CLI module registers its commands on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

app = typer.Typer(
    name="mindpalace",
    help="mindpalace — a memory engine for long-horizon LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

WorkspaceOpt = typer.Option(
    Path("."), "--workspace", "-w", help="Workspace folder.", envvar="MINDPALACE_WORKSPACE"
)


UserOpt = typer.Option("", "--user", "-u", help="User id of the session scope.")
AgentOpt = typer.Option("", "--agent", "-a", help="Agent id of the session scope.")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text.")


def print_json(data: Any) -> None:
    """Shared --json output: UTF-8, sorted keys, stable for tests."""
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True, default=str))
