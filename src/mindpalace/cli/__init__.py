"""Command-line interface: thin commands over the facade; errors exit non-zero with a message.

Importing this package loads typer, rich and the command modules only — the library is imported
by each command when it runs (see :mod:`mindpalace.cli.app`).
"""

from __future__ import annotations

import sys

from rich.text import Text

from mindpalace.cli import archive as _archive  # noqa: F401  (registers commands)
from mindpalace.cli import chat as _chat  # noqa: F401  (registers commands)
from mindpalace.cli import dream as _dream  # noqa: F401  (registers commands)
from mindpalace.cli import embed as _embed  # noqa: F401  (registers commands)
from mindpalace.cli import keys as _keys  # noqa: F401  (registers commands)
from mindpalace.cli import knowledge as _knowledge  # noqa: F401  (registers commands)
from mindpalace.cli import lineage as _lineage  # noqa: F401  (registers commands)
from mindpalace.cli import llm as _llm  # noqa: F401  (registers commands)
from mindpalace.cli import mcp as _mcp  # noqa: F401  (registers commands)
from mindpalace.cli import recall as _recall  # noqa: F401  (registers commands)
from mindpalace.cli import serve as _serve  # noqa: F401  (registers commands)
from mindpalace.cli import session as _session  # noqa: F401  (registers commands)
from mindpalace.cli import steps as _steps  # noqa: F401  (registers commands)
from mindpalace.cli import tasks as _tasks  # noqa: F401  (registers commands)
from mindpalace.cli import worker as _worker  # noqa: F401  (registers commands)
from mindpalace.cli import workspace as _workspace  # noqa: F401  (registers commands)
from mindpalace.cli.app import app, err_console
from mindpalace.errors import MindPalaceError

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: usage errors exit 2 (typer's standalone mode), library
    errors — and the operating system's, e.g. a file where a folder was named — exit 1 with
    their message, never a traceback."""
    try:
        app()
    except (MindPalaceError, OSError) as exc:
        # Text: messages quote user text ("[steps]", paths, keys) and are printed literally;
        # soft_wrap: never break a path or key across lines.
        err_console.print(Text.assemble(("error:", "red"), " ", str(exc)), soft_wrap=True)
        sys.exit(1)
