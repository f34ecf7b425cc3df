"""CLI: `knowledge show|log|diff|restore|sync|patch` — thin layers over Memory.knowledge
(seeds 002/003: git-versioned L0–L3 files, patch-only edits, restore of files + dream cursor)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.text import Text

from mindpalace.cli.app import JsonOpt, WorkspaceOpt, app, console, open_memory, print_json

if TYPE_CHECKING:
    from mindpalace.knowledge import KnowledgeScope
    from mindpalace.memory import Memory

knowledge_app = typer.Typer(
    help="Long-term knowledge files (SOUL, USER, MEMORY, L0–L3) in the workspace's git repository.",
    no_args_is_help=True)
app.add_typer(knowledge_app, name="knowledge")

KUserOpt = typer.Option("", "--user", "-u", help="Whose knowledge: this user's files.")
KAgentOpt = typer.Option("", "--agent", "-a", help="Whose knowledge: this agent's (agent-wide) files.")
AuthorOpt = typer.Option("api", "--author", help="Who makes the change (commit author): 'api' or your name.")


def _scope(mem: Memory, user: str, agent: str, *, required: bool = True) -> KnowledgeScope | None:
    from mindpalace.errors import KnowledgeError
    from mindpalace.knowledge import KnowledgeScope

    if user and agent:
        raise KnowledgeError("give --user or --agent, not both: a knowledge scope is one user's or one agent's")
    if user:
        return KnowledgeScope.user(user, mem.tenant)
    if agent:
        return KnowledgeScope.agent(agent, mem.tenant)
    if required:
        raise KnowledgeError("whose knowledge? give --user USER or --agent AGENT")
    return None


@knowledge_app.command("show")
def knowledge_show(
    file: str = typer.Argument("", help="A file (e.g. USER.md, L3/deploy.md); none = list the files."),
    workspace: Path = WorkspaceOpt,
    user: str = KUserOpt,
    agent: str = KAgentOpt,
    rev: str = typer.Option("", "--rev", help="Show it as of this commit (default: the last one)."),
    as_json: bool = JsonOpt,
) -> None:
    """Show a committed knowledge file, or list the scope's files, dream cursor and pending hand edits."""
    with open_memory(workspace) as mem:
        scope = _scope(mem, user, agent)
        assert scope is not None
        kb = mem.knowledge
        if file:
            text = kb.read(scope, file, rev=rev or None)
            if text is None:
                from mindpalace.errors import NotFoundError

                raise NotFoundError("knowledge file", file, str(scope))
            if as_json:
                print_json({"scope": str(scope), "file": file, "text": text})
            else:
                typer.echo(text, nl=not text.endswith("\n"))
            return
        files = kb.files(scope, rev=rev or None)
        data: dict[str, Any] = {
            "scope": str(scope), "folder": scope.folder, "dream_cursor": kb.read_cursor(scope, rev=rev or None),
            "files": {name: {"lines": len(text.splitlines()), "tokens": mem.tokens.count(text)}
                      for name, text in files.items() if not name.startswith(".")},
            "pending": [vars(e) for e in kb.pending(scope)],
        }
    if as_json:
        print_json(data)
        return
    console.print(Text.assemble((f"{data['scope']}", "bold"), f"  knowledge/{data['folder']}  "
                                f"dream cursor {data['dream_cursor']}"))
    for name, info in data["files"].items():
        console.print(f"  {name}: {info['lines']} lines, {info['tokens']} tokens")
    for e in data["pending"]:
        console.print(f"  pending hand edit: {e['file']} ({e['change']}){': ' + e['problem'] if e['problem'] else ''}")


@knowledge_app.command("log")
def knowledge_log(
    workspace: Path = WorkspaceOpt,
    user: str = KUserOpt,
    agent: str = KAgentOpt,
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="Newest commits shown."),
    as_json: bool = JsonOpt,
) -> None:
    """Commits of a scope's knowledge (or of every scope), newest first: who, when, what and why."""
    with open_memory(workspace) as mem:
        scope = _scope(mem, user, agent, required=False)
        commits = mem.knowledge.log(scope, limit=limit)
    if as_json:
        print_json([c.to_json() for c in commits])
        return
    for c in commits:
        console.print(Text.assemble((c.short, "yellow"), f" {c.time:%Y-%m-%d %H:%M} ",
                                    (c.author, "bold"), f"  {c.message.splitlines()[0] if c.message else ''}"))
        if c.files:
            console.print(f"    {', '.join(c.files)}")


@knowledge_app.command("diff")
def knowledge_diff(
    rev: str = typer.Argument(..., help="A commit (id, HEAD, HEAD~N)."),
    workspace: Path = WorkspaceOpt,
    user: str = KUserOpt,
    agent: str = KAgentOpt,
) -> None:
    """The unified diff one commit made (only the scope's files with --user / --agent)."""
    with open_memory(workspace) as mem:
        text = mem.knowledge.diff(rev, _scope(mem, user, agent, required=False))
    typer.echo(text, nl=False)


@knowledge_app.command("restore")
def knowledge_restore(
    rev: str = typer.Argument(..., help="The commit to go back to (id, HEAD~N)."),
    workspace: Path = WorkspaceOpt,
    user: str = KUserOpt,
    agent: str = KAgentOpt,
    reason: str = typer.Option("", "--reason", help="Why (goes into the commit message)."),
    author: str = AuthorOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Put a scope's files and dream cursor back as they were at REV, as one new commit."""
    with open_memory(workspace) as mem:
        scope = _scope(mem, user, agent)
        assert scope is not None
        commit = mem.knowledge.restore(scope, rev, author=author, reason=reason)
        cursor = mem.knowledge.read_cursor(scope)
    _print_commit(commit, as_json, extra={"dream_cursor": cursor}, nothing="already in that state")


@knowledge_app.command("sync")
def knowledge_sync(
    workspace: Path = WorkspaceOpt,
    user: str = KUserOpt,
    agent: str = KAgentOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Notice hand edits: commit valid ones (author hand-edit), report refused ones, re-index for recall."""
    with open_memory(workspace) as mem:
        scope = _scope(mem, user, agent, required=False)
        reports = [mem.knowledge.sync(scope)] if scope is not None else mem.knowledge.sync_all()
    data = [r.to_json() for r in reports if r is not None]
    if as_json:
        print_json(data)
    else:
        for r in data:
            done = f"committed {r['committed']['sha'][:10]}" if r["committed"] else "nothing to commit"
            console.print(Text.assemble((r["scope"], "bold"), f"  {done}"))
            for e in r["edits"]:
                console.print(f"  {e['file']}: {e['change']}{': ' + e['problem'] if e['problem'] else ''}")
    if any(e["change"] == "refused" for r in data for e in r["edits"]):
        raise typer.Exit(1)


@knowledge_app.command("patch")
def knowledge_patch(
    file: str = typer.Argument("", help="The file to edit (e.g. USER.md, L2_facts.md, L3/deploy.md)."),
    workspace: Path = WorkspaceOpt,
    user: str = KUserOpt,
    agent: str = KAgentOpt,
    insert: str = typer.Option(None, "--insert", help="Text to insert as whole lines (end of file unless --after/--before)."),
    after: str = typer.Option(None, "--after", help="Insert after the line holding this text (must occur once)."),
    before: str = typer.Option(None, "--before", help="Insert before the line holding this text (must occur once)."),
    replace: str = typer.Option(None, "--replace", help="Text to replace (must occur exactly once); see --with."),
    with_: str = typer.Option(None, "--with", help="The replacement text for --replace."),
    remove: str = typer.Option(None, "--remove", help="Text to remove (must occur once); needs --reason."),
    reason: str = typer.Option("", "--reason", help="Why (mandatory for --remove)."),
    source: str = typer.Option(None, "--source", help="What verified it (L2/L3): ledger:<task>/<key> or record:<name>."),
    patches: Path = typer.Option(None, "--patches", help="A JSON list of patches ({file, op, anchor, text, before, reason, source}); '-' = stdin."),
    message: str = typer.Option(..., "--message", "-m", help="What changed and why (the commit message)."),
    author: str = AuthorOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Edit knowledge by a located patch (never a whole-file overwrite), as one commit."""
    from mindpalace.errors import KnowledgeError
    from mindpalace.knowledge import Patch

    with open_memory(workspace) as mem:
        scope = _scope(mem, user, agent)
        assert scope is not None
        batch: list[Patch]
        if patches is not None:
            raw = sys.stdin.read() if str(patches) == "-" else patches.read_text(encoding="utf-8")
            try:
                items = json.loads(raw)
            except ValueError as exc:
                raise KnowledgeError(f"--patches: not JSON ({exc})") from exc
            if not isinstance(items, list):
                raise KnowledgeError("--patches: expected a JSON list of patches")
            batch = [Patch.from_json(item) for item in items]
        else:
            ops = [o for o in (insert, replace, remove) if o is not None]
            if not file or len(ops) != 1:
                raise KnowledgeError("give FILE and exactly one of --insert, --replace (with --with) "
                                     "or --remove (with --reason), or --patches")
            if insert is not None:
                batch = [Patch.insert(file, insert, after=after, before=before, source=source, reason=reason)]
            elif replace is not None:
                if with_ is None:
                    raise KnowledgeError("--replace needs --with TEXT")
                batch = [Patch.replace(file, replace, with_, source=source, reason=reason)]
            else:
                batch = [Patch.remove(file, remove, reason=reason, source=source)]
        commit = mem.knowledge.apply(scope, batch, author=author, message=message)
    _print_commit(commit, as_json, nothing="no change: every patch is already applied")


def _print_commit(commit: Any, as_json: bool, *, extra: dict[str, Any] | None = None, nothing: str) -> None:
    if as_json:
        print_json({"commit": None if commit is None else commit.to_json(), **(extra or {})})
    elif commit is None:
        console.print(nothing)
    else:
        console.print(Text.assemble(("committed ", "bold"), (commit.short, "yellow"), f" by {commit.author}"))
        console.print(commit.message)
