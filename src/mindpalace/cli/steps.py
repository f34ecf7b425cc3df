"""CLI: `steps show`, `records list|show`, `context`, `prepare`, `replay` — thin layers over the
session's step memory and context builder."""

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
    open_memory,
    print_json,
)

if TYPE_CHECKING:
    from mindpalace.context import BuiltContext

steps_app = typer.Typer(help="Step memory tiers of a session (pending → recent → summary).",
                        no_args_is_help=True)
records_app = typer.Typer(help="Named records of a session (step / info / snapshot).",
                          no_args_is_help=True)
app.add_typer(steps_app, name="steps")
app.add_typer(records_app, name="records")

BudgetOpt = typer.Option(
    None, "--budget", help="Prompt budget (tokens); default: the session's input budget."
)
SystemPromptOpt = typer.Option(
    None, "--system-prompt", help="System prompt text (default: the latest stored one)."
)


def _heading(title: str, rest: str = "") -> Text:
    """A blank line, then `title` in bold and `rest` as it is."""
    return Text.assemble("\n", (title, "bold"), rest)


@steps_app.command("show")
def steps_show(
    session: str = typer.Argument(..., help="Session id."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show the tiers, counters, working checkpoint and last <summary> lines of a session."""
    with open_memory(workspace) as mem:
        steps = mem.session(session, user=user, agent=agent).steps
        state, lines = steps.state, steps.summary_lines
        tokens = {"recent": state.recent_tokens(steps.counter),
                  "summary": state.summary_tokens(steps.counter)}
    if as_json:
        data = state.to_json()
        data.update(tokens=tokens, budget_tokens=steps.settings.budget_tokens, summary_lines=lines)
        print_json(data)
        return
    b = steps.settings.budget_tokens
    console.print(Text.assemble(
        (f"session {session}", "bold"),
        f"  next step {state.next_step}  recent {tokens['recent']}/{b} tokens  summary "
        f"{tokens['summary']}/{int(steps.settings.summary_budget_multiplier * b)} tokens",
    ))
    for title, text in (("Summary", state.summary_text()), ("Recent", state.recent_text()),
                        ("Pending", state.pending_text())):
        console.print(_heading(title))
        console.print(text or "(empty)")
    cp = state.checkpoint
    console.print(_heading("Checkpoint", f"  key_info: {cp.key_info or '-'}  "
                                         f"related_sop: {cp.related_sop or '-'}"))
    console.print(_heading("Counters", "  " + ", ".join(f"{k}={v}"
                                                        for k, v in state.counters.items())))
    if lines:
        console.print(_heading(f"Last {len(lines)} <summary> lines"))
        console.print("\n".join(lines))


@records_app.command("list")
def records_list(
    session: str = typer.Argument(..., help="Session id."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    type: str | None = typer.Option(
        None, "--type", help="Only records of this type (step, info, snapshot)."
    ),
    limit: int | None = typer.Option(None, "--limit", help="At most this many records."),
    as_json: bool = JsonOpt,
) -> None:
    """List a session's records, newest first."""
    with open_memory(workspace) as mem:
        recs = mem.session(session, user=user, agent=agent).steps.records.list(type=type,
                                                                             limit=limit)
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
    name: str = typer.Argument(
        ..., help="Record name (step_12) or reference (message:17, history:3, fact:user:city)."),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
) -> None:
    """Print one record as markdown with its YAML front matter; a reference a prompt names
    (``message:<N>[@<session>]``, ``history:<cursor>``, ``fact:<key>``) reads like read_files."""
    from mindpalace.errors import NotFoundError, ValidationError
    from mindpalace.refs import RecordRef, group_problem, parse_ref
    from mindpalace.steps.records import render_record

    with open_memory(workspace) as mem:
        s = mem.session(session, user=user, agent=agent)
        ref = parse_ref(name)
        if ref is None and (why := group_problem(name)):
            raise ValidationError(f"cannot read {name!r}: {why}")
        if ref is None or isinstance(ref, RecordRef):
            record = s.steps.records.get(name)
        elif (found := s.read_records([name]).found.get(name)) is not None:
            record = found
        else:
            raise NotFoundError("reference", name, s.scope)
    typer.echo(render_record(record))


@app.command("context")
def context_cmd(
    session: str = typer.Argument(..., help="Session id."),
    budget: int | None = BudgetOpt,
    system_prompt: str | None = SystemPromptOpt,
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The prompt the session would send now, read-only: nothing is written.

    No consolidation, no model call; a per-block token table follows the prompt.

    The agent path (`mindpalace prepare`) consolidates over-budget messages first.
    """
    with open_memory(workspace) as mem:
        built = mem.session(session, user=user, agent=agent).context(
            budget, system_prompt=system_prompt)
    _print_built(built, session, as_json=as_json)


@app.command("prepare")
def prepare_cmd(
    session: str = typer.Argument(..., help="Session id."),
    system_prompt: str | None = SystemPromptOpt,
    budget: int | None = typer.Option(
        None, "--budget",
        help="This call's input budget (tokens); default: the session's configured input budget.",
    ),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The agent's turn: consolidate, then print the prompt as `context` does.

    Older messages over the budget are archived into history.jsonl first (this writes).

    Then the prompt, its per-block token table and what was archived are printed.
    """
    with open_memory(workspace) as mem:
        built = mem.session(session, user=user, agent=agent).prepare(
            budget, system_prompt=system_prompt)
    _print_built(built, session, as_json=as_json)


def _print_built(built: BuiltContext, session: str, *, as_json: bool) -> None:
    """The output of `context` and `prepare`: the prompt, its block table, what was degraded,
    and (prepare only: ``report.consolidation`` is set) what was archived before the build."""
    rep = built.report
    data: dict[str, Any] = {"messages": built.messages, "blocks": rep.blocks,
                            "total_tokens": rep.total_tokens, "budget_tokens": rep.budget_tokens,
                            "degradations": rep.degradations,
                            "recalled": [{"ref": i.ref, "tier": i.tier, "score": round(i.score, 4),
                                          "why": i.why, "tokens": i.tokens} for i in rep.recalled]}
    done = rep.consolidation
    consolidation = None if done is None else done.to_json()
    if as_json:
        if consolidation is not None:
            data["consolidation"] = consolidation
        print_json(data)
        return
    for msg in built.messages:
        calls = ", ".join(f"{c['function']['name']}({c['function'].get('arguments', '')})"
                          for c in msg.get("tool_calls") or [])
        console.print(Text(f"── {msg.get('role')}" + (f" → {calls}" if calls else ""), style="bold"))
        content = msg.get("content")
        if content is not None:
            console.print(content if isinstance(content, str) else str(content))
    table = Table(title=f"context of session {session}: {rep.total_tokens} / {rep.budget_tokens} "
                        "tokens")
    table.add_column("block")
    table.add_column("tokens", justify="right")
    for name, tokens in rep.blocks:
        table.add_row(name, str(tokens))
    table.add_row(Text("total", style="bold"), Text(str(rep.total_tokens), style="bold"))
    console.print(table)
    for i in rep.recalled:
        console.print(f"recalled: {i.ref} ({i.tier}, score {i.score:.3f}, {i.tokens} tokens): {i.why}")
    for d in rep.degradations:
        console.print(f"degraded: {d}")
    if not rep.pairing.ok:
        console.print(f"pairing repaired: closed {rep.pairing.closed_calls}, "
                      f"dropped {rep.pairing.dropped_results}")
    if consolidation is not None:
        if consolidation["entries"]:
            console.print(
                f"consolidated: archived {consolidation['archived_messages']} messages into "
                f"{consolidation['entries']} history entries (archived through "
                f"#{consolidation['last_consolidated']}); prompt "
                f"{consolidation['prompt_tokens_before']} → "
                f"{consolidation['prompt_tokens_after']} tokens")
        else:
            console.print(f"nothing to consolidate (archived through "
                          f"#{consolidation['last_consolidated']})")


@app.command("replay")
def replay_cmd(
    file: Path = typer.Argument(
        ..., exists=True, dir_okay=False,
        help="Transcript: OpenAI JSON/JSONL, τ-bench JSON or SWE-agent .traj.",
    ),
    session: str | None = typer.Option(
        None, "--session", help="Session id (default: the file name)."
    ),
    budget: int | None = typer.Option(
        None, "--budget", min=1,
        help="Build the prompt under this budget (tokens, ≥ 1) before every model call.",
    ),
    workspace: Path = WorkspaceOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay an agent transcript through a session (messages, steps, <summary> lines).

    The whole file is validated (shape, JSON only, finite numbers, nesting, size) before the
    first message is stored: a refused file stores nothing, so a corrected re-run never
    duplicates."""
    import statistics

    from mindpalace.replay import load_transcripts, replay

    transcripts = load_transcripts(file)
    with open_memory(workspace) as mem:
        s = mem.session(session or file.stem, user=user, agent=agent)
        stats = replay(s, transcripts, budget_tokens=budget)
        counters = s.steps.counters
    data = {
        "session": session or file.stem, "transcripts": stats.transcripts,
        "messages": stats.messages, "steps": stats.steps, "orphans": stats.orphans,
        "model_calls": stats.model_calls, "compactions": counters["compactions"],
        "summary_compactions": counters["summary_compactions"],
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
