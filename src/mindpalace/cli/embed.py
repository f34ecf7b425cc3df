"""CLI: `mindpalace embed sync` — bring stored vectors in line with the configured embedder."""

from __future__ import annotations

from pathlib import Path

import typer

from mindpalace.cli.app import WorkspaceArg, app, console, open_memory, print_json

embed_app = typer.Typer(help="Embeddings: keep vectors in sync with the configured embedder.")
app.add_typer(embed_app, name="embed")


@embed_app.command("sync")
def sync(
    directory: Path = WorkspaceArg,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Embed documents that lack a vector.

    After an embedder change: re-embed everything, then drop the old vectors."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with open_memory(directory) as mem:
        if mem.embedder is None:
            console.print('embed.provider is "none": nothing to embed (keyword search only)')
            return
        # the model id is configuration text: a field of the task, never markup or a format
        with Progress(
            TextColumn("embedding with", markup=False),
            TextColumn("{task.fields[model]}", style="bold", markup=False), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), console=console, disable=as_json,
            transient=as_json,
        ) as bar:
            task = bar.add_task("embed", total=None, model=mem.embedder.model_id)
            report = mem.sync_embeddings(
                progress=lambda done, total: bar.update(task, completed=done, total=total)
            )
    if report is None:  # the embedder is configured, so sync always reports; keep mypy calm
        return
    data = {
        "model": report.model, "dim": report.dim, "embedded": report.embedded,
        "retired_models": report.retired_models, "dropped_vectors": report.dropped_vectors,
        "seconds": round(report.seconds, 3),
    }
    if as_json:
        print_json(data)
        return
    retired = ", ".join(report.retired_models) or "none"
    console.print(
        f"{report.embedded} documents embedded with {report.model} ({report.dim}-d) in "
        f"{report.seconds:.1f} s; retired models: {retired} "
        f"({report.dropped_vectors} vectors dropped)"
    )
