"""A writer killed at each point of a commit leaves files, cursor and git in agreement (the next
call finishes or drops the write); two processes writing one scope are serialized (I6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.errors import StoreBusyError
from mindpalace.knowledge import KnowledgeScope, Patch

# The child applies one patch + cursor move; at the named crash point it says so on stdout and
# blocks on stdin, and the parent kills it there (SIGKILL: no cleanup runs).
CRASHER = r"""
import sys
from mindpalace import Memory
from mindpalace.knowledge import KnowledgeBase, KnowledgeScope, Patch
ws, point = sys.argv[1], sys.argv[2]
mem = Memory.open(ws, embed={"provider": "none"})
def fault(name):
    if name == point:
        print("at", name, flush=True)
        sys.stdin.readline()
kb = KnowledgeBase(mem.workspace.knowledge_dir, mem.store, counter=mem.tokens,
                   settings=mem.settings.knowledge, fault=fault)
kb.apply(KnowledgeScope.user("u1"), [Patch.insert("USER.md", "- second fact")], author="dream",
         message="run 2", dream_cursor=7)
print("done", flush=True)
"""

WRITER = r"""
import sys
from mindpalace import Memory
from mindpalace.knowledge import KnowledgeScope, Patch
ws, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
mem = Memory.open(ws, embed={"provider": "none"})
scope = KnowledgeScope.user("u1")
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    mem.knowledge.apply(scope, [Patch.insert("MEMORY.md", f"- {name} fact {i}")], author=name,
                        message=f"{name} {i}")
mem.close()
print("done", flush=True)
"""

HOLDER = r"""
import sys
from mindpalace import Memory
from mindpalace.knowledge import KnowledgeScope
mem = Memory.open(sys.argv[1], embed={"provider": "none"})
with mem.knowledge.lock(KnowledgeScope.user("u1")):
    print("holding", flush=True)
    sys.stdin.readline()
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize(("point", "published"), [("journal-written", False), ("published", True),
                                                   ("files-written", True)])
def test_a_writer_killed_mid_commit_leaves_a_consistent_state(workspace_dir: Path, point: str,
                                                              published: bool) -> None:
    scope = KnowledgeScope.user("u1")
    with Memory.open(workspace_dir, embed={"provider": "none"}) as mem:
        mem.knowledge.apply(scope, [Patch.insert("USER.md", "- first fact")], author="dream",
                            message="run 1", dream_cursor=3)
    with subprocess.Popen([sys.executable, "-c", CRASHER, str(workspace_dir), point],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == f"at {point}"
        child.kill()
        child.wait(timeout=30)
    with Memory.open(workspace_dir, embed={"provider": "none"}) as mem:
        kb = mem.knowledge
        report = kb.sync(scope)
        assert report is not None and report.committed is None  # nothing mistaken for a hand edit
        want_cursor, want_user = (7, "- first fact\n- second fact\n") if published else (3, "- first fact\n")
        assert kb.read_cursor(scope) == want_cursor
        assert kb.read(scope, "USER.md") == want_user
        d = mem.workspace.knowledge_dir / scope.folder
        assert (d / "USER.md").read_text() == want_user
        assert (d / ".dream_cursor").read_text() == f"{want_cursor}\n"
        assert git(mem.workspace.knowledge_dir, "status", "--porcelain") == ""
        assert not list(d.glob(".*.mp-tmp-*"))
        assert kb.pending(scope) == []
        hits = mem.session("s", user="u1").recall("second fact")
        assert any("second fact" in h.text for h in hits) == published  # the index agrees too


def test_two_processes_writing_one_scope_are_serialized(workspace_dir: Path) -> None:
    Memory.open(workspace_dir, embed={"provider": "none"}).close()
    n = 8
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(workspace_dir), name, str(n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name in ("alice", "bob")]
    for p in procs:  # both are ready before either may go
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "done"
    with Memory.open(workspace_dir, embed={"provider": "none"}) as mem:
        text = mem.knowledge.read(KnowledgeScope.user("u1"), "MEMORY.md") or ""
        assert sorted(text.splitlines()) == sorted(f"- {who} fact {i}" for who in ("alice", "bob") for i in range(n))
        authors = git(mem.workspace.knowledge_dir, "log", "--format=%an").splitlines()
        assert authors.count("alice") == n and authors.count("bob") == n  # no lost commit
        assert git(mem.workspace.knowledge_dir, "status", "--porcelain") == ""


def test_a_held_scope_lock_makes_another_writer_wait_then_refuse(workspace_dir: Path) -> None:
    Memory.open(workspace_dir, embed={"provider": "none"}).close()
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(workspace_dir)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as holder:
        _while_held(holder, workspace_dir)


def _while_held(holder: subprocess.Popen[str], workspace_dir: Path) -> None:
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with Memory.open(workspace_dir, embed={"provider": "none"},
                         knowledge={"lock_timeout_seconds": 0.2}) as mem:
            scope = KnowledgeScope.user("u1")
            with pytest.raises(StoreBusyError, match="another process"):
                mem.knowledge.apply(scope, [Patch.insert("USER.md", "x")], author="api", message="x")
            assert mem.knowledge.sync(scope, wait=False) is None  # prepare's path: skip, no wait
            other = KnowledgeScope.user("u2")  # another scope is not blocked
            assert mem.knowledge.apply(other, [Patch.insert("USER.md", "x")], author="api", message="x")
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
