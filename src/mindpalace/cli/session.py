"""CLI: `session show`, `history tail`, `compact` — thin layers over session consolidation
(seed 002)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from mindpalace.cli.app import (
    AgentOpt,
    JsonOpt,
    UserOpt,
    WorkspaceOpt,
    app,
    console,
    err_console,
    open_memory,
    print_json,
)
from mindpalace.errors import NotFoundError

if TYPE_CHECKING:
    from mindpalace.session.autocompact import CompactOutcome

session_app = typer.Typer(help="Chat sessions: messages, consolidation cursor, archived summary.",
                          no_args_is_help=True)
history_app = typer.Typer(help="history.jsonl, the archive written by consolidation.",
                          no_args_is_help=True)
app.add_typer(session_app, name="session")
app.add_typer(history_app, name="history")


@session_app.command("show")
def session_show(
    session: str = typer.Argument(..., help="Session id."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    messages: int = typer.Option(10, "--messages", "-m", help="Newest live messages to show."),
    as_json: bool = JsonOpt,
) -> None:
    """Show a session: message count, consolidation cursor, budget, lease and archived summary."""
    with open_memory(workspace) as mem:
        s = mem.session(session, user=user, agent=agent)
        if not s.exists():  # a typo or a missing --user / --agent, not an empty session
            raise NotFoundError("session", session, s.scope)
        st = s.status(live_messages=messages)
    data: dict[str, Any] = {
        "session": session, "scope": str(st.scope), "messages": st.messages,
        "last_consolidated": st.last_consolidated, "history_entries": st.history_entries,
        "prompt_tokens": st.prompt_tokens, "budget_tokens": st.budget_tokens,
        "target_tokens": st.target_tokens, "lease": st.lease,
        "last_summary": st.last_summary, "last_summary_kind": st.last_summary_kind,
        "live": [{"index": m.index, "role": m.message.get("role"),
                  "content": _short(m.message.get("content")),
                  "tool_calls": [tc["function"]["name"] for tc in m.message.get("tool_calls") or []]}
                 for m in st.live],
    }
    if as_json:
        print_json(data)
        return
    lease = f"held by {data['lease']['holder']}" if data["lease"] else "none"
    console.print(Text.assemble(
        (f"session {session}", "bold"),
        f"  {data['messages']} messages, archived through #{data['last_consolidated']} "
        f"({data['history_entries']} history entries); prompt "
        f"{data['prompt_tokens']}/{data['budget_tokens']} tokens; lease: {lease}",
    ))
    if data["last_summary"]:
        console.print(Text.assemble("\n", ("Archived context summary", "bold"),
                                    f" ({data['last_summary_kind']})"))
        console.print(data["last_summary"])
    if data["live"]:
        console.print(Text.assemble("\n", (f"Newest {len(data['live'])} live messages", "bold")))
        for m in data["live"]:
            calls = f" → {', '.join(m['tool_calls'])}" if m["tool_calls"] else ""
            console.print(f"#{m['index']} {m['role']}: {m['content']}{calls}")


@history_app.command("tail")
def history_tail(
    workspace: Path = WorkspaceOpt,
    n: int = typer.Option(10, "-n", "--lines", min=1, help="How many newest entries (≥ 1)."),
    tenant: str | None = typer.Option(
        None, "--tenant", "-t", help="Only this tenant's entries (default: every tenant)."),
    as_json: bool = JsonOpt,
) -> None:
    """Show the newest history.jsonl entries (cursor, time, session, kind, message range, text).

    history.jsonl is one file for the whole workspace (an admin view): --tenant narrows it to
    one tenant's sessions.

    Damaged lines (not JSON, not UTF-8, nested too deep, over the line cap) are skipped, each
    with a warning on stderr naming its line number."""
    with open_memory(workspace) as mem:
        scan = mem.history.scan()
        entries = [e for e in scan.entries if tenant is None or e.scope.tenant == tenant][-n:]
        path = mem.history.path
    for bad in scan.damaged:
        err_console.print(Text.assemble(("warning:", "yellow"),
                                        f" {path}:{bad.lineno}: skipped a damaged line ({bad.problem})"),
                          soft_wrap=True)
    if as_json:
        print_json([e.to_json() for e in entries])
        return
    if not entries:
        console.print("history is empty")
        return
    table = Table(title=f"history.jsonl — newest {len(entries)}")
    for col in ("cursor", "timestamp", "session", "kind", "messages", "content"):
        table.add_column(col, overflow="fold")
    for e in entries:
        rng = f"{e.messages[0]}-{e.messages[1]}" if e.messages else ""
        table.add_row(str(e.cursor), e.timestamp.isoformat(timespec="seconds"), e.session, e.kind,
                      rng, _short(e.content, 200))
    console.print(table)


@app.command("compact")
def compact(
    session: str | None = typer.Argument(
        None, help="Session id to compact now (ignores idle time)."
    ),
    idle: bool = typer.Option(
        False, "--idle", help="Compact every session idle past the threshold."
    ),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Archive a session down to its recent window, or (--idle) every idle session.

    Sessions with a turn in flight (lease held) are skipped."""
    from mindpalace.errors import ValidationError

    if (session is None) == (not idle):
        raise ValidationError("compact: give a SESSION id or --idle (not both)")
    with open_memory(workspace) as mem:
        enabled = mem.autocompact().enabled
        if idle:
            outs = mem.compact_idle()
        else:
            outs = [mem.session(session or "", user=user, agent=agent).compact()]
    rows = [_outcome(o) for o in outs]
    if as_json:
        print_json(rows)
        return
    if idle and not enabled:
        console.print("idle compaction is disabled (session.idle_compact_after_minutes = 0)")
    for r in rows:
        console.print(f"{r['session']}: {r['status']}, archived {r['archived_messages']} messages "
                      f"into {r['entries']} history entries")
    if not rows and enabled:
        console.print("no sessions")


def _outcome(o: CompactOutcome) -> dict[str, Any]:
    r = o.result
    return {"session": o.session, "status": o.status, "archived_messages": o.archived_messages,
            "entries": r.entries if r else 0,
            "last_consolidated": r.last_consolidated if r else None}


def _short(content: Any, limit: int = 120) -> str:
    text = content if isinstance(content, str) else "" if content is None else str(content)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
