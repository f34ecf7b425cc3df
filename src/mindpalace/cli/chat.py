"""CLI: `chat` — talk to an OpenAI-compatible model through the agent loop, with the session's
memory (a thin layer over :class:`mindpalace.agent.Agent`)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from mindpalace.cli.app import (
    AgentOpt,
    JsonOpt,
    UserOpt,
    WorkspaceOpt,
    app,
    console,
    err_console,
    print_json,
)

if TYPE_CHECKING:
    from mindpalace.agent import Agent, AgentTurn

QUIT_COMMANDS = ("/quit", "/exit")
CORRECT_COMMAND = "/correct "
REPL_HELP = ("Type a message; '/correct TEXT' records a user correction (top of the next "
             "prompt); '/quit' or end of input leaves.")


@app.command("chat")
def chat(
    workspace: Path = WorkspaceOpt,
    session: str = typer.Option(..., "--session", "-s", help="Session id (the conversation and its task)."),
    user: str = UserOpt,
    agent: str = AgentOpt,
    message: str | None = typer.Option(
        None, "--message", "-m", help="Send one message, print the reply and exit (no REPL)."),
    correct: list[str] = typer.Option(
        [], "--correct", help="Record a user correction before the message (repeatable)."),
    tools: list[str] = typer.Option(
        [], "--tool", help="A tool as MODULE:NAME — a function decorated with mindpalace.agent.tool, "
        "or a plain annotated function (read-only); repeatable."),
    model: str | None = typer.Option(None, "--model", help="Model name (default agent.model, OPENAI_MODEL, llm.model)."),
    base_url: str | None = typer.Option(
        None, "--base-url", help="OpenAI-compatible endpoint (default agent.base_url, llm.base_url, OPENAI_BASE_URL)."),
    as_json: bool = JsonOpt,
) -> None:
    """Chat with an OpenAI-compatible model through the agent loop on a session's memory.

    Reads messages from standard input, one per line, and prints each reply; with --message,
    answers that one message. A turn a crash left unfinished is continued first.
    """
    from mindpalace.agent import Agent
    from mindpalace.memory import Memory

    overrides: dict[str, Any] = {k: v for k, v in (("model", model), ("base_url", base_url)) if v}
    callables = [_load_tool(spec) for spec in tools]
    with Memory.open(workspace, create=False, agent=overrides or None) as mem, \
            Agent(mem.session(session, user=user, agent=agent), callables, holder="mindpalace chat") as bot:
        resumed = bot.resume()
        if resumed is not None:
            _show(resumed, as_json, note="continued an unfinished turn")
        for text in correct:
            bot.correct(text)
        if message is not None:
            _show(bot.run(message), as_json)
            return
        _repl(bot, as_json)


def _load_tool(spec: str) -> Any:
    """The object named by MODULE:NAME (imported from the current folder too)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise typer.BadParameter(f"{spec!r}: expected MODULE:NAME, e.g. mytools:book_ticket",
                                 param_hint="--tool")
    if "" not in sys.path:
        sys.path.insert(0, "")  # a tools module beside the user, as `python -m` would find it
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise typer.BadParameter(f"{spec!r}: {exc}", param_hint="--tool") from exc
    if not callable(obj):
        raise typer.BadParameter(f"{spec!r} is not callable", param_hint="--tool")
    return obj


def _repl(bot: Agent, as_json: bool) -> None:
    stdin = typer.get_text_stream("stdin")
    interactive = stdin.isatty()
    if interactive:
        err_console.print(REPL_HELP)
    while True:
        if interactive:
            err_console.print("> ", end="")
        line = stdin.readline()
        if not line:
            return
        text = line.strip()
        if not text:
            continue
        if text in QUIT_COMMANDS:
            return
        if text.startswith(CORRECT_COMMAND):
            bot.correct(text.removeprefix(CORRECT_COMMAND).strip())
            err_console.print("(correction recorded: it is at the top of the next prompt)")
            continue
        _show(bot.run(text), as_json)


def _show(turn: AgentTurn, as_json: bool, note: str = "") -> None:
    if as_json:
        print_json(_turn_json(turn))
        return
    if note:
        err_console.print(f"({note})")
    for call in turn.tool_calls:
        err_console.print(Text(f"[tool {call.name}: {call.status}]"))
    for key in turn.unknown_calls:
        err_console.print(Text.assemble(("warning:", "yellow"), f" outcome unknown for {key}; "
                                        "not run again — check it, then `mindpalace task resolve`"))
    if turn.stopped != "reply":
        err_console.print(f"(stopped: {turn.stopped.replace('_', ' ')})")
    if turn.reply:
        console.print(turn.reply, soft_wrap=True)


def _turn_json(turn: AgentTurn) -> dict[str, Any]:
    return {
        "index": turn.index, "reply": turn.reply, "stopped": turn.stopped,
        "model_calls": turn.model_calls, "resumed": turn.resumed,
        "tool_calls": [{"name": c.name, "status": c.status, "content": c.content, "step": c.step}
                       for c in turn.tool_calls],
        "read_files": turn.read_files, "unknown_calls": turn.unknown_calls,
        "prompt_tokens": turn.prompt_tokens, "budget_tokens": turn.budget_tokens,
    }
