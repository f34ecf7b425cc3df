"""CLI: `remember`, `recall`, `forget`, and the `eval locomo` / `eval spans` experiments."""

from __future__ import annotations

import json
from collections.abc import Callable
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
    from rich.progress import Progress

SessionOpt = typer.Option("cli", "--session", "-s", help="Session id.")

eval_app = typer.Typer(
    help="Evaluations on real data (LoCoMo) and the Recuris span experiment.", no_args_is_help=True
)
app.add_typer(eval_app, name="eval")


@app.command()
def remember(
    key: str = typer.Argument(..., help="Fact key 'entity:attribute', e.g. user:home_city."),
    content: str = typer.Argument(..., help="The value."),
    importance: float = typer.Option(
        0.5, "--importance", "-i",
        help="0–1; at or above facts.importance_threshold it is kept long-term.",
    ),
    source: str = typer.Option(
        "", "--source", help="Where it came from (message / step / tool call id)."
    ),
    workspace: Path = WorkspaceOpt,
    session: str = SessionOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Remember a fact (a new value for a key supersedes the old one); says what it made room
    by evicting from working memory."""
    with open_memory(workspace) as mem:
        done = mem.session(session, user=user, agent=agent).remember(
            key, content, importance=importance, source=source
        )
    fact = done.fact
    if as_json:
        print_json({**fact.to_json(), "archived": [f.to_json() for f in done.archived],
                    "evicted": [f.to_json() for f in done.evicted]})
        return
    where = (f"long-term as {fact.id}" if fact.id
             else "working memory only (below the importance threshold)")
    console.print(Text.assemble("remembered ", (fact.key, "bold"), f" = {fact.content} — {where}"))
    for gone in done.evicted:
        fate = f"still long-term as {gone.id}" if gone.id else "gone (below the threshold)"
        console.print(Text.assemble("evicted ", (gone.key, "bold"), f" from working memory — {fate}"))


@app.command()
def recall(
    query: str = typer.Argument(..., help="Free text or an entity:attribute key."),
    k: int = typer.Option(5, "-k", help="Hits to return."),
    workspace: Path = WorkspaceOpt,
    session: str = SessionOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Recall: working memory first, then hybrid keyword + vector search over every tier."""
    with open_memory(workspace) as mem:
        hits = mem.session(session, user=user, agent=agent).recall(query, k=k)
    if as_json:
        print_json([
            {"tier": h.tier, "ref": h.ref, "text": h.text, "score": round(h.score, 4),
             "session": h.scope.session, "why": str(h.why), "meta": h.meta}
            for h in hits
        ])
        return
    if not hits:
        console.print("no hits")
        return
    table = Table(title=f"recall: {query}")
    for col in ("#", "tier", "ref", "text", "why"):
        table.add_column(col, overflow="fold")
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), h.tier, h.ref, h.text[:200], str(h.why))
    console.print(table)


@app.command()
def forget(
    key: str = typer.Argument(..., help="Fact key 'entity:attribute'."),
    workspace: Path = WorkspaceOpt,
    session: str = SessionOpt,
    user: str = UserOpt,
    agent: str = AgentOpt,
) -> None:
    """Forget a fact for good (tombstoned: it never comes back).

    Remembering the key again makes a new fact."""
    with open_memory(workspace) as mem:
        gone = mem.session(session, user=user, agent=agent).forget(key)
    console.print(f"forgot {key}" if gone else f"nothing to forget for {key}")
    if not gone:
        raise typer.Exit(1)


def _progress() -> tuple[Progress, Callable[[str, int, int], None]]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
    )

    bar = Progress(
        TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console, transient=True,
    )
    tasks: dict[str, TaskID] = {}

    def update(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=done, total=total)

    return bar, update


@eval_app.command("locomo")
def eval_locomo(
    data: Path = typer.Option(
        Path("../shared/data/locomo/locomo10.json"), "--data", help="Path to locomo10.json."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the full report here."),
    k: list[int] = typer.Option([1, 5, 10, 25, 50], "--k", help="Cut-offs (repeat the option)."),
    embedder: str | None = typer.Option(
        None, "--embedder",
        help="use | e5 | wordllama | hashing | none (default: the workspace setting, 'use').",
    ),
    conversation: list[str] = typer.Option(
        [], "--conversation", help="Only these sample ids (repeat)."
    ),
    captions: bool = typer.Option(
        True, "--captions/--no-captions", help="Add shared-photo captions to turns."
    ),
    baselines: bool = typer.Option(
        True, "--baselines/--no-baselines", help="Also run BM25 and dense-only."
    ),
    embed: str | None = typer.Option(
        None, "--embed",
        help='[embed] overrides as a JSON object, e.g. \'{"context_turns": 1}\' (the dense-only row '
        "uses them too).",
    ),
    facts: str | None = typer.Option(
        None, "--facts",
        help='[facts] overrides for the product run as a JSON object, e.g. \'{"vector_weight": 0.8}\' '
        "(tune on conv-26 and conv-30 only; the other eight are held out).",
    ),
) -> None:
    """LoCoMo evidence recall@k through Session.recall, beside BM25 and dense-only baselines."""
    from mindpalace.eval.locomo import run_locomo

    fact_overrides = _json_object("--facts", facts)
    embed_overrides = _json_object("--embed", embed)
    bar, update = _progress()
    with bar:
        report = run_locomo(
            data, ks=k, embedder=embedder, conversations=conversation or None,
            captions=captions, baselines=baselines, fact_overrides=fact_overrides,
            embed_overrides=embed_overrides, progress=update,
        )
    _print_locomo(report)
    if json_out:
        json_out.write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False),
                            encoding="utf-8")
        console.print(f"wrote {json_out}")


def _json_object(option: str, text: str | None) -> dict[str, Any] | None:
    """`text` parsed as a JSON object (None when not given).

    Raises:
        typer.BadParameter: not JSON, or JSON that is not an object (the message names `option`).
    """
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON ({exc})", param_hint=option) from exc
    if not isinstance(value, dict):
        raise typer.BadParameter(f"expected a JSON object, got {type(value).__name__}", param_hint=option)
    return value


def _print_locomo(report: Any) -> None:
    from mindpalace.eval.locomo import published_reference

    ks = report.ks
    table = Table(
        title=f"LoCoMo evidence recall@k — {report.questions} questions, {report.conversations} "
        f"conversations, embedder {report.embedder}, {report.measured_at}"
    )
    table.add_column("method")
    table.add_column("split")
    for k in ks:
        table.add_column(f"R@{k}", justify="right")
    for k in (5, 10):
        if k in ks:
            table.add_column(f"all@{k}", justify="right")
    table.add_column("MRR", justify="right")
    for m in report.methods:
        splits = (("all", m.overall), ("dev (conv-26, conv-30)", m.dev),
                  ("held-out (8)", m.held_out))
        for split, summ in splits:
            if summ.questions == 0:
                continue
            table.add_row(
                m.name if split == "all" else "", f"{split} · {summ.questions} q",
                *[f"{summ.recall[k]:.1f}" for k in ks],
                *[f"{summ.recall_all[k]:.1f}" for k in (5, 10) if k in ks],
                f"{summ.mrr:.3f}",
            )
        table.add_section()
    for name, figures in published_reference().items():
        table.add_row(name, "published",
                      *[f"{figures[k]:.1f}" if k in figures else "–" for k in ks],
                      *["–" for k in (5, 10) if k in ks], "–")
    console.print(table)
    cat = Table(title="by category (R@k / all@10 / MRR, all conversations)")
    cat.add_column("method")
    cat.add_column("category")
    for k in ks:
        cat.add_column(f"R@{k}", justify="right")
    cat.add_column("all@10" if 10 in ks else f"all@{ks[-1]}", justify="right")
    cat.add_column("MRR", justify="right")
    kk = 10 if 10 in ks else ks[-1]
    for m in report.methods:
        for i, (name, summ) in enumerate(m.by_category.items()):
            cat.add_row(m.name if i == 0 else "", f"{name} · {summ.questions} q",
                        *[f"{summ.recall[k]:.1f}" for k in ks], f"{summ.recall_all[kk]:.1f}",
                        f"{summ.mrr:.3f}")
        cat.add_section()
    console.print(cat)
    for m in report.methods:
        console.print(Text.assemble((m.name, "bold"), f": {m.settings} ({m.seconds:.1f} s)"))
    console.print(f"ingest + embed: {report.ingest_seconds:.1f} s; skipped "
                  f"{report.skipped_evidence_ids} unresolvable evidence ids and "
                  f"{report.skipped_questions} questions left without resolvable evidence")


@eval_app.command("spans")
def eval_spans(
    spans: list[int] = typer.Option(
        [2, 4, 6, 8, 10, 100, 1000, 10000], "--span", help="Fact→use spans (repeat)."
    ),
    tasks_per_span: int = typer.Option(5, "--tasks", help="Random tasks per span (seed 001: 5)."),
    seed: int = typer.Option(42, "--seed", help="Random seed (seed 001: 42)."),
    capacity: int = typer.Option(3, "--capacity", help="Working-memory capacity (seed 001: 3)."),
    threshold: float = typer.Option(
        0.6, "--threshold", help="Importance threshold (seed 001: 0.6)."
    ),
    embedder: str = typer.Option(
        "none", "--embedder",
        help="Embedder of the dual memory's recall (use | e5 | wordllama | hashing | none).",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the results here."),
) -> None:
    """The Recuris span experiment (seed 001 §3–5): working memory only vs dual memory."""
    from mindpalace.eval.spans import run_spans

    bar, update = _progress()
    with bar:
        rows = run_spans(spans, tasks_per_span=tasks_per_span, seed=seed, capacity=capacity,
                         threshold=threshold, embedder=embedder, progress=update)
    table = Table(title=f"Recuris span experiment — capacity {capacity}, threshold {threshold}, "
                  f"{tasks_per_span} tasks/span, seed {seed}")
    for col in ("noise importance", "span", "steps", "baseline success", "baseline ms/step",
                "dual success", "dual ms/step"):
        table.add_column(col, justify="right")
    for r in rows:
        seeded = " (seed)" if r.noise_importance < threshold else ""
        table.add_row(f"{r.noise_importance:g}{seeded}", str(r.span), str(r.steps),
                      f"{r.baseline_successes}/{r.tasks} ({r.baseline_rate:.0f}%)",
                      f"{r.baseline_ms_per_step:.3f}",
                      f"{r.dual_successes}/{r.tasks} ({r.dual_rate:.0f}%)",
                      f"{r.dual_ms_per_step:.3f}")
    console.print(table)
    if json_out:
        json_out.write_text(json.dumps([r.to_json() for r in rows], indent=2), encoding="utf-8")
        console.print(f"wrote {json_out}")
