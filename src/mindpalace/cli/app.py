"""The typer application every CLI module registers its commands on, and what they share.

Start-up stays cheap: this module and the command modules import typer and rich only; the
library (`mindpalace.memory`, the store, numpy, tiktoken …) is imported inside the commands, so
``mindpalace --help`` never loads it.

Output is literal: the consoles read no rich markup, emoji codes or highlighting, so user and
stored text (``[red]``, ``[/x]``, ``:smile:``) prints exactly as it is; our own styling is
expressed with :class:`rich.text.Text`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from mindpalace.memory import Memory

app = typer.Typer(
    name="mindpalace",
    help="mindpalace — a memory engine for long-horizon LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(markup=False, highlight=False, emoji=False)
err_console = Console(stderr=True, markup=False, highlight=False, emoji=False)

WorkspaceOpt = typer.Option(
    Path("."), "--workspace", "-w", help="Workspace folder.", envvar="MINDPALACE_WORKSPACE"
)
WorkspaceArg = typer.Argument(
    Path("."), help="Workspace folder.", envvar="MINDPALACE_WORKSPACE"
)

UserOpt = typer.Option("", "--user", "-u", help="User id of the session scope.")
AgentOpt = typer.Option("", "--agent", "-a", help="Agent id of the session scope.")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of text.")


def open_memory(path: Path) -> Memory:
    """The existing workspace at `path` — every command but ``init`` and ``demo`` opens it so.

    Nothing is created: a mistyped ``-w`` raises WorkspaceError ("… is not a mindpalace
    workspace; run `mindpalace init …` first"), which ``main`` prints and exits 1 with.
    """
    from mindpalace.memory import Memory

    return Memory.open(path, create=False)


def print_json(data: Any) -> None:
    """Shared --json output: UTF-8, sorted keys, stable for tests."""
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True, default=str))
