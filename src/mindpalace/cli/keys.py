"""CLI: `mindpalace keys create|list|revoke` — API keys per tenant for the REST and MCP servers."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from mindpalace.cli.app import (
    JsonOpt,
    WorkspaceOpt,
    app,
    console,
    err_console,
    open_memory,
    print_json,
)

keys_app = typer.Typer(help="API keys per tenant (stored hashed; the secret is shown once).",
                       no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def keys_create(
    tenant: str = typer.Argument(..., help="Tenant every request with the key is scoped to."),
    workspace: Path = WorkspaceOpt,
    name: str = typer.Option("", "--name", "-n", help="A label for people, e.g. 'planner-agent'."),
    scope: list[str] = typer.Option(["read", "write"], "--scope", "-s",
                                    help="read and/or write (repeat the option)."),
    as_json: bool = JsonOpt,
) -> None:
    """Create a key for TENANT and print its secret — the only time it is shown."""
    from mindpalace.auth import ApiKeys

    with open_memory(workspace) as mem:
        key, secret = ApiKeys(mem.store).create(tenant, name=name, scopes=scope)
    if as_json:
        print_json({**key.to_json(), "secret": secret})
        return
    console.print(Text.assemble("key ", (key.id, "bold"), f" for tenant {key.tenant} "
                                f"(scopes {', '.join(key.scopes)})"))
    typer.echo(secret)
    err_console.print("store the secret now: only its hash is kept, it cannot be shown again")


@keys_app.command("list")
def keys_list(
    workspace: Path = WorkspaceOpt,
    tenant: str | None = typer.Option(None, "--tenant", "-t", help="Only this tenant's keys."),
    as_json: bool = JsonOpt,
) -> None:
    """List keys (id, tenant, name, scopes, created, revoked) — never their secrets."""
    from mindpalace.auth import ApiKeys

    with open_memory(workspace) as mem:
        keys = ApiKeys(mem.store).list(tenant)
    if as_json:
        print_json([k.to_json() for k in keys])
        return
    table = Table(title=f"{len(keys)} API keys")
    for column in ("id", "tenant", "name", "scopes", "created_at", "revoked_at"):
        table.add_column(column)
    for k in keys:
        row = k.to_json()
        table.add_row(k.id, k.tenant, k.name, ",".join(k.scopes), row["created_at"],
                      row["revoked_at"] or "")
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(
    key_id: str = typer.Argument(..., help="The key id (see `keys list`)."),
    workspace: Path = WorkspaceOpt,
) -> None:
    """Revoke a key for good; requests with it are refused (401) from the next one on."""
    from mindpalace.auth import ApiKeys
    from mindpalace.errors import NotFoundError

    with open_memory(workspace) as mem:
        keys = ApiKeys(mem.store)
        if keys.get(key_id) is None:
            raise NotFoundError("API key", key_id)
        revoked = keys.revoke(key_id)
    console.print(f"revoked {key_id}" if revoked else f"{key_id} was already revoked")
