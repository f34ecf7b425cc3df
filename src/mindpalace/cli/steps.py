"""CLI: `steps show`, `records list|show`, `context`, `replay` — thin layers over mindpalace.steps."""

from __future__ import annotations

import statistics
from pathlib import Path

import typer
from rich.table import Table

from mindpalace.cli.app import AgentOpt, JsonOpt, UserOpt, WorkspaceOpt, app, console, print_json
from mindpalace.memory import Memory, Session
from mindpalace.steps.records import render_record

steps_app = typer.Typer(help="Step memory tiers of a session (pending → recent → summary).", no_args_is_help=True)
records_app = typer.Typer(help="Named records of a session (step / info / snapshot).", no_args_is_help=True)
app.add_typer(steps_app, name="steps")
app.add_typer(records_app, name="records")



def _session(mem: Memory, session: str, user: str, agent: str) -> Session:
    return mem.session(session, user=user, agent=agent)


@steps_app.command("show")
def steps_show(
    session: str = typer.Argument(..., help="Session id."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show the tiers, counters, working checkpoint and last <summary> lines of a session."""
    with Memory.open(workspace) as mem:
        steps = _session(mem, session, user, agent).steps
        state, lines = steps.state, steps.summary_lines
        tokens = {"recent": state.recent_tokens(steps.counter), "summary": state.summary_tokens(steps.counter)}
    if as_json:
        data = state.to_json()
        data.update(tokens=tokens, budget_tokens=steps.settings.budget_tokens, summary_lines=lines)
        print_json(data)
        return
    b = steps.settings.budget_tokens
    console.print(f"[bold]session {session}[/]  next step {state.next_step}  "
                  f"recent {tokens['recent']}/{b} tokens  summary {tokens['summary']}/"
                  f"{int(steps.settings.summary_budget_multiplier * b)} tokens")
    for title, text in (("Summary", state.summary_text()), ("Recent", state.recent_text()),
                        ("Pending", state.pending_text())):
        console.print(f"\n[bold]{title}[/]", highlight=False)
        console.print(text or "(empty)", markup=False, highlight=False)
    cp = state.checkpoint
    console.print(f"\n[bold]Checkpoint[/]  key_info: {cp.key_info or '-'}  related_sop: {cp.related_sop or '-'}",
                  highlight=False)
    console.print("\n[bold]Counters[/]  " + ", ".join(f"{k}={v}" for k, v in state.counters.items()),
                  highlight=False)
    if lines:
        console.print(f"\n[bold]Last {len(lines)} <summary> lines[/]")
        console.print("\n".join(lines), markup=False, highlight=False)


@records_app.command("list")
def records_list(
    session: str = typer.Argument(..., help="Session id."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    type: str | None = typer.Option(None, "--type", help="Only records of this type (step, info, snapshot)."),
    limit: int | None = typer.Option(None, "--limit", help="At most this many records."),
    as_json: bool = JsonOpt,
) -> None:
    """List a session's records, newest first."""
    with Memory.open(workspace) as mem:
        recs = _session(mem, session, user, agent).steps.records.list(type=type, limit=limit)
    if as_json:
        print_json([{"name": r.name, "type": r.type, "step_id": r.step_id,
                     "description": r.description, "created_at": r.created_at} for r in recs])
        return
    table = Table(title=f"records of session {session}")
    for col in ("name", "type", "step", "description"):
        table.add_column(col)
    for r in recs:
        table.add_row(r.name, r.type, "" if r.step_id is None else str(r.step_id), r.description)
    console.print(table)


@records_app.command("show")
def records_show(
    session: str = typer.Argument(..., help="Session id."),
    name: str = typer.Argument(..., help="Record name, e.g. step_12."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
) -> None:
    """Print one record as markdown with its YAML front matter."""
    with Memory.open(workspace) as mem:
        record = _session(mem, session, user, agent).steps.records.get(name)
    typer.echo(render_record(record))


@app.command("context")
def context_cmd(
    session: str = typer.Argument(..., help="Session id."),
    budget: int | None = typer.Option(None, "--budget", help="Prompt budget (tokens); default: the input budget."),
    system_prompt: str | None = typer.Option(None, "--system-prompt", help="System prompt text."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Print the prompt the session would send now, and a per-block token table."""
    with Memory.open(workspace) as mem:
        built = _session(mem, session, user, agent).context(budget, system_prompt=system_prompt)
    rep = built.report
    if as_json:
        print_json({"messages": built.messages, "blocks": rep.blocks, "total_tokens": rep.total_tokens,
                    "budget_tokens": rep.budget_tokens, "degradations": rep.degradations})
        return
    for msg in built.messages:
        console.print(f"[bold]── {msg.get('role')}[/]")
        content = msg.get("content")
        console.print(content if isinstance(content, str) else str(content), markup=False, highlight=False)
    table = Table(title=f"context of session {session}: {rep.total_tokens} / {rep.budget_tokens} tokens")
    table.add_column("block")
    table.add_column("tokens", justify="right")
    for name, tokens in rep.blocks:
        table.add_row(name, str(tokens))
    table.add_row("[bold]total[/]", f"[bold]{rep.total_tokens}[/]")
    console.print(table)
    for d in rep.degradations:
        console.print(f"degraded: {d}", highlight=False)
    if not rep.pairing.ok:
        console.print(f"pairing repaired: closed {rep.pairing.closed_calls}, dropped {rep.pairing.dropped_results}")


@app.command("replay")
def replay_cmd(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Transcript: OpenAI JSON/JSONL, τ-bench JSON or SWE-agent .traj."),
    session: str | None = typer.Option(None, "--session", help="Session id (default: the file name)."),
    budget: int | None = typer.Option(None, "--budget", help="Build the prompt under this budget (tokens) before every model call."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay an agent transcript through a session (messages, steps, <summary> lines)."""
    from mindpalace.replay import load_transcripts, replay

    transcripts = load_transcripts(file)
    with Memory.open(workspace) as mem:
        s = _session(mem, session or file.stem, user, agent)
        stats = replay(s, transcripts, budget_tokens=budget)
        counters = s.steps.counters
    data = {
        "session": session or file.stem, "transcripts": stats.transcripts, "messages": stats.messages,
        "steps": stats.steps, "orphans": stats.orphans, "model_calls": stats.model_calls,
        "compactions": counters["compactions"], "summary_compactions": counters["summary_compactions"],
        "compaction_failures": counters["compaction_failures"],
        "median_step_ms": round(statistics.median(stats.step_ms), 3) if stats.step_ms else 0.0,
    }
    if budget is not None:
        data.update(budget_tokens=budget, peak_prompt_tokens=stats.peak_prompt_tokens,
                    prompts_over_budget=stats.over_budget, prompts_degraded=stats.degraded)
    if as_json:
        print_json(data)
        return
    table = Table(title=f"replay of {file.name}")
    table.add_column("item")
    table.add_column("value", justify="right")
    for k, v in data.items():
        table.add_row(k, str(v))
    console.print(table)
