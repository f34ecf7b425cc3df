"""CLI: `mindpalace llm check` — send one tiny completion to the configured LLM provider."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from mindpalace.cli.app import WorkspaceArg, app, console, open_memory, print_json

llm_app = typer.Typer(help="LLM provider: check that the configured chat model answers.")
app.add_typer(llm_app, name="llm")

CHECK_PROMPT = "Reply with the single word: ok"


@llm_app.command("check")
def check(
    directory: Path = WorkspaceArg,
    prompt: str = typer.Option(CHECK_PROMPT, "--prompt", help="The user message to send."),
    max_tokens: int = typer.Option(16, "--max-tokens", min=1, help="Cap on the reply (tokens)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Send one tiny completion; print provider, model, latency, usage and the reply.

    Fails (exit 1) with the provider's classified error: timeout, HTML error page, empty reply,
    authentication, unreachable server.
    """
    with open_memory(directory) as mem:
        llm = mem.llm
        started = time.perf_counter()
        out = llm.complete([{"role": "user", "content": prompt}], max_tokens=max_tokens)
        latency_ms = (time.perf_counter() - started) * 1000
        data = {
            "provider": llm.name,
            "endpoint": getattr(llm, "endpoint", None),
            "model": out.model,
            "latency_ms": round(latency_ms, 1),
            "finish_reason": out.finish_reason,
            "prompt_tokens": out.usage.prompt_tokens,
            "completion_tokens": out.usage.completion_tokens,
            "total_tokens": out.usage.total_tokens,
            "reply": out.text,
        }
    if as_json:
        print_json(data)
        return
    table = Table(title="LLM check")
    table.add_column("item")
    table.add_column("value")
    for key, value in data.items():
        if value is not None:
            table.add_row(key, str(value))
    console.print(table)
