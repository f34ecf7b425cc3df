"""CLI: `mindpalace trace` (the lineage chain of a fact or record) and `mindpalace why` (what
the prompt at a step contained and why each block was there). Read-only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from mindpalace.cli.app import (
    AgentOpt,
    UserOpt,
    WorkspaceOpt,
    app,
    console,
    open_memory,
    print_json,
)

if TYPE_CHECKING:
    from mindpalace.lineage import LineageEvent


@app.command()
def trace(
    subject: str = typer.Argument(
        ..., help="A fact key (user:city), fact id (user:city#00000002), record name (step_12) "
                  "or reference (message:7, knowledge:user/L2_facts.md)."),
    workspace: Path = WorkspaceOpt,
    session: str = typer.Option("cli", "--session", "-s", help="A session of the user and agent "
                                "whose lineage is read (every session of theirs is searched)."),
    user: str = UserOpt,
    agent: str = AgentOpt,
    only_session: bool = typer.Option(False, "--only-session", help="Only this session's events."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Print the lineage chain of a memory: when it was written, why it was kept, when it was
    recalled (query, step, rank, score) and which prompt it went into."""
    with open_memory(workspace) as mem:
        lineage = mem.session(session, user=user, agent=agent).lineage
        events = lineage.trace(subject, sessions="this" if only_session else "user")
    if as_json:
        print_json([e.to_json() for e in events])
        return
    if not events:
        console.print(Text(f"no lineage events name {subject!r}"), soft_wrap=True)
        return
    table = Table(title=f"lineage of {subject}")
    for col in ("when (UTC)", "session", "step", "event", "detail"):
        table.add_column(col, overflow="fold")
    for e in events:
        table.add_row(e.at.strftime("%Y-%m-%d %H:%M:%S"), str(e.scope.session) or "-",
                      "-" if e.step is None else str(e.step), e.type, detail(e, subject))
    console.print(table)


def detail(e: LineageEvent, subject: str) -> str:
    """One line of what the event says about `subject`."""
    d = e.data
    if e.type == "recalled":
        hit: dict[str, Any] = next((h for h in d.get("hits", []) if _names(h, subject)), {})
        return (f"{d.get('via', 'recall')} for {_cut(d.get('query', ''))!r}: rank {hit.get('rank')}, "
                f"score {hit.get('score')}; {hit.get('why', '')}")
    if e.type == "injected":
        item: dict[str, Any] = next((i for i in d.get("recalled", []) if _names(i, subject)), {})
        return (f"prompt of step {e.step}: 'recalled memory' block, {item.get('tokens', '?')} tokens "
                f"(prompt {d.get('total_tokens')} of {d.get('budget_tokens')})")
    if e.type == "summarized":
        return f"{d.get('why', '')}; snapshot {d.get('snapshot', '')}"
    if e.type == "edited":
        return f"by {d.get('by', '?')} (commit {str(d.get('commit', ''))[:12]}): {_cut(json.dumps(d.get('why', '')))}"
    parts = [str(d[k]) for k in ("where", "why", "by", "source") if d.get(k)]
    return "; ".join(parts)


def _names(row: dict[str, Any], subject: str) -> bool:
    wanted = subject.removeprefix("fact:")
    return any(s == wanted or str(s).split("#", 1)[0] == wanted for s in row.get("subjects", []))


def _cut(text: str, n: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


@app.command()
def why(
    session: str = typer.Argument(..., help="Session id."),
    step: int | None = typer.Option(None, "--step", "-n", help="The step whose prompt to show; "
                                    "omitted = list every prepared prompt."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """What the prompt at step N contained — its blocks with their tokens and why each was
    there, what was recalled into it (rank, score, why it matched) and what was cut."""
    from mindpalace.errors import NotFoundError
    from mindpalace.lineage import why_of

    with open_memory(workspace) as mem:
        lineage = mem.session(session, user=user, agent=agent).lineage
        prompts = lineage.prompts()
    if step is None:
        if as_json:
            print_json([p.to_json() for p in prompts])
            return
        table = Table(title=f"prompts prepared in session {session}")
        for col in ("step", "prepared (UTC)", "tokens", "budget", "blocks"):
            table.add_column(col)
        for p in prompts:
            table.add_row(str(p.step), p.at.strftime("%Y-%m-%d %H:%M:%S"), str(p.data.get("total_tokens")),
                          str(p.data.get("budget_tokens")), str(len(p.data.get("blocks", []))))
        console.print(table)
        return
    found = [p for p in prompts if p.step == step]
    if not found:
        raise NotFoundError("prompt of step", step, f"session {session} (see `mindpalace why {session}`)")
    p = found[-1]
    blocks = [{**b, "why": why_of(b["block"])} for b in p.data.get("blocks", [])]
    if as_json:
        print_json({**p.to_json(), "blocks": blocks})
        return
    d = p.data
    console.print(Text(f"prompt of step {step} in session {session}: {d.get('total_tokens')} of "
                       f"{d.get('budget_tokens')} tokens, prepared {p.at:%Y-%m-%d %H:%M:%S} UTC "
                       f"({d.get('messages')} messages stored)"), soft_wrap=True)
    table = Table(title="blocks")
    for col in ("block", "tokens", "why it was there"):
        table.add_column(col, overflow="fold")
    for b in blocks:
        table.add_row(b["block"], str(b["tokens"]), b["why"])
    console.print(table)
    recalled = lineage.prompt_recalls(p)
    if recalled:
        hits = Table(title=f"recalled for {_cut(' | '.join(d.get('queries', [])))!r}")
        for col in ("rank", "memory", "score", "tokens", "why it matched"):
            hits.add_column(col, overflow="fold")
        for h in recalled:
            hits.add_row(str(h.get("rank")), ", ".join(h.get("subjects", [])), str(h.get("score")),
                         str(h.get("tokens")), str(h.get("why")))
        console.print(hits)
    for line in d.get("degradations", []):
        console.print(Text(f"cut to fit: {line}"), soft_wrap=True)
