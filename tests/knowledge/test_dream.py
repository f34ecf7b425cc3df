"""The dream job: idempotent, sourced, budgeted, all-or-nothing, one run per scope (I4–I6)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.knowledge.layout import KnowledgeScope
from mindpalace.testing.openai_stub import StubServer, api_error, chat, serve_stub

U1 = KnowledgeScope.user("u1")
PREFS = ["[1] u1: I prefer aisle seats on long flights. [2] assistant: Noted.",
         "[1] u1: My home airport is SFO. [2] assistant: I will remember that.",
         "[1] u1: I always travel with my bike."]


# each ~70 tokens: with dream_batch_tokens=100 every entry is one model call
LONG = [p + " [3] assistant: " + " ".join(f"Flight option {i} leaves at gate B{i} with fare class Y." for i in range(6))
        for p in PREFS]


def history(mem: Memory, *contents: str, user: str = "u1") -> list[int]:
    scope = mem.scope(user=user, agent="planner", session="s1")
    return [mem.history.append(scope, c).cursor for c in contents]


def state(mem: Memory, scope: KnowledgeScope = U1) -> tuple[dict[str, str], int, int]:
    """(committed files, dream cursor, commits of the scope)."""
    return mem.knowledge.files(scope), mem.knowledge.read_cursor(scope), len(mem.knowledge.log(scope))


def on_disk(mem: Memory, scope: KnowledgeScope = U1) -> dict[str, str]:
    folder = mem.workspace.knowledge_dir / scope.folder
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(folder.rglob("*")) if p.is_file()} if folder.exists() else {}


class TestCurator:
    def test_promotes_preferences_with_their_sources_and_advances_the_cursor(self, memory: Memory) -> None:
        cursors = history(memory, *PREFS)
        [report] = memory.dream(user="u1")
        assert (report.status, report.mode, report.entries, report.cursor_after) == ("committed", "curator", 3, cursors[-1])
        user_md = memory.knowledge.read(U1, "USER.md") or ""
        assert f"- u1: I prefer aisle seats on long flights. [history:{cursors[0]}]" in user_md
        assert f"- u1: My home airport is SFO. [history:{cursors[1]}]" in user_md
        assert "I will remember" not in user_md  # the assistant's words are not the user's
        assert memory.knowledge.log(U1)[0].author == "dream"
        # every source reads back: the promoted line points at real history
        s = memory.session("s1", user="u1", agent="planner")
        assert "aisle seats" in s.read_records([f"history:{cursors[0]}"]).found[f"history:{cursors[0]}"].body

    def test_running_it_twice_on_the_same_input_changes_nothing(self, memory: Memory) -> None:
        history(memory, *PREFS)
        memory.dream(user="u1")
        before = state(memory)
        [again] = memory.dream(user="u1")
        assert (again.status, again.entries, again.commit) == ("unchanged", 0, None)
        assert state(memory) == before

    def test_new_history_with_nothing_worth_keeping_only_moves_the_cursor(self, memory: Memory) -> None:
        history(memory, PREFS[0])
        memory.dream(user="u1")
        files = memory.knowledge.files(U1)
        [c] = history(memory, "[1] u1: Thanks! [2] assistant: You're welcome.")
        [report] = memory.dream(user="u1")
        assert (report.status, report.patches, report.cursor_after) == ("committed", [], c)
        after = memory.knowledge.files(U1)
        assert {k: v for k, v in after.items() if k != ".dream_cursor"} == \
            {k: v for k, v in files.items() if k != ".dream_cursor"}

    def test_dry_run_prints_the_patch_and_changes_nothing(self, memory: Memory, workspace_dir: Path) -> None:
        history(memory, *PREFS)
        before, disk = state(memory), on_disk(memory)
        memory.close()
        out = CliRunner().invoke(app, ["dream", "-w", str(workspace_dir), "--user", "u1", "--dry-run"])
        assert out.exit_code == 0, out.output
        lines = out.stdout.splitlines()
        assert lines[0].startswith("user:u1: dry-run (curator), 3 new entries, 1 patches, 3 promoted, cursor 0 → 3")
        diff = "\n".join(lines[1:])
        assert "+++ b/default/users/u1/USER.md" in diff and "+- u1: I always travel with my bike. [history:3]" in diff
        assert "+++ b/default/users/u1/.dream_cursor" in diff and "+3" in diff
        with Memory.open(workspace_dir, create=False, embed={"provider": "none"}) as mem:
            assert state(mem) == before and on_disk(mem) == disk

    def test_a_users_history_never_reaches_another_scope(self, memory: Memory) -> None:
        history(memory, PREFS[0], user="u1")
        history(memory, "[1] u2: I prefer window seats always.", user="u2")
        reports = {r.scope: r for r in memory.dream()}
        assert set(reports) == {"user:u1", "user:u2"}
        assert "window" not in (memory.knowledge.read(U1, "USER.md") or "")
        assert "aisle" not in (memory.knowledge.read(KnowledgeScope.user("u2"), "USER.md") or "")


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with serve_stub() as server:
        yield server


def llm_memory(path: Path, stub: StubServer, **knowledge: Any) -> Memory:
    return Memory.open(path, embed={"provider": "none"},
                       llm={"provider": "openai", "base_url": stub.url, "api_key": "k", "max_retries": 0},
                       knowledge={"dream_batch_tokens": 100, **knowledge})


def patches(*items: dict[str, Any]) -> str:
    return json.dumps({"patches": list(items)})


class TestLLM:
    def test_the_token_budget_stops_the_run_and_commits_the_paid_batches_only(self, tmp_path: Path, stub: StubServer) -> None:
        first = {"file": "USER.md", "op": "insert", "text": "- prefers aisle seats [history:1]\n"}
        stub.script(chat(patches(first), usage=(700, 20)), chat(patches(), usage=(700, 20)))
        with llm_memory(tmp_path / "ws", stub, dream_token_budget=1_200) as mem:
            c1, _c2, _c3 = history(mem, *LONG)
            [report] = mem.dream(user="u1")
            assert (report.status, report.budget_stopped, report.llm_calls) == ("committed", True, 1)
            assert (report.tokens_spent, report.token_budget, report.consumed) == (720, 1_200, 1)
            assert report.cursor_after == c1 and mem.knowledge.read_cursor(U1) == c1
            assert "prefers aisle seats" in (mem.knowledge.read(U1, "USER.md") or "")
            assert "token budget" in report.reason and len(stub.requests) == 1

    def test_a_budget_too_small_for_the_first_call_changes_nothing(self, tmp_path: Path, stub: StubServer) -> None:
        with llm_memory(tmp_path / "ws", stub, dream_token_budget=50) as mem:
            history(mem, *LONG)
            before = state(mem)
            [report] = mem.dream(user="u1")
            assert (report.status, report.llm_calls, report.tokens_spent) == ("stopped", 0, 0)
            assert state(mem) == before and stub.requests == []

    def test_a_bad_proposal_is_repaired_once_then_rejected_and_never_blocks_the_cursor(
            self, tmp_path: Path, stub: StubServer) -> None:
        bad = {"file": "USER.md", "op": "replace", "anchor": "no such text", "text": "x"}
        outside = {"file": "L2_facts.md", "op": "insert", "text": "- db host is db-1\n"}
        fixed = {"file": "USER.md", "op": "insert", "text": "- home airport SFO [history:2]\n"}
        stub.script(chat(patches(bad, outside)), chat(patches(fixed)), chat("not json at all"),
                    chat("still not json"), chat(patches()))
        with llm_memory(tmp_path / "ws", stub, dream_token_budget=100_000) as mem:
            cursors = history(mem, *LONG)
            [report] = mem.dream(user="u1")
            assert report.status == "committed" and report.cursor_after == cursors[-1]
            assert [p.text for p in report.patches] == ["- home airport SFO [history:2]\n"]
            assert len(report.rejected) == 1 and "not {\"patches\"" in report.rejected[0]["why"]
            assert report.llm_calls == 5
            assert (mem.knowledge.read(U1, "USER.md") or "").strip() == "- home airport SFO [history:2]"
            repair = stub.requests[1]["json"]["messages"][-1]["content"]
            assert "no such text" in repair and "L2_facts.md" in repair

    def test_a_failing_model_leaves_files_and_cursor_unchanged_and_says_why(self, tmp_path: Path, stub: StubServer) -> None:
        stub.script(chat(patches({"file": "USER.md", "op": "insert", "text": "- a\n"})), api_error(400, "bad model"))
        with llm_memory(tmp_path / "ws", stub, dream_token_budget=100_000) as mem:
            history(mem, *LONG)
            before, disk = state(mem), on_disk(mem)
            [report] = mem.dream(user="u1")
            assert report.status == "failed" and "the model failed" in report.reason and "bad model" in report.reason
            assert state(mem) == before and on_disk(mem) == disk


WORKER = Path(__file__).with_name("dream_worker.py")


def worker(ws: Path, pause_at: str = "-", wait: float = 30.0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), str(ws), pause_at, str(wait)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_until(proc: subprocess.Popen[str], stage: str) -> list[str]:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line.strip())
        if line.strip() == stage:
            return seen
    raise AssertionError(f"the worker ended before {stage!r}: {seen}; stderr: {proc.stderr.read() if proc.stderr else ''}")


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate("\n" * 8, timeout=60)
    return proc.returncode, out + err


class TestProcesses:
    @pytest.mark.parametrize("stage", ["proposed", "journal-written", "published"])
    def test_a_run_killed_at_any_point_leaves_files_cursor_and_git_in_agreement(
            self, memory: Memory, workspace_dir: Path, tmp_path: Path, stage: str) -> None:
        cursors = history(memory, *PREFS)
        memory.close()
        proc = worker(workspace_dir, pause_at=stage)
        read_until(proc, stage)
        proc.kill()  # SIGKILL: no cleanup, no finally
        proc.communicate(timeout=30)
        with Memory.open(workspace_dir, create=False, embed={"provider": "none"}) as mem:
            mem.knowledge.sync(U1)  # what every write does first: finish or drop the interrupted commit
            files, cursor, _ = state(mem)
            assert on_disk(mem) == files  # the files on disk are exactly the committed ones
            committed = "USER.md" in files
            assert cursor == (cursors[-1] if committed else 0)  # the cursor moved with them, or neither did
            [rerun] = mem.dream(user="u1")  # and the next run finishes the work, once
            final = mem.knowledge.files(U1)
        assert rerun.status == ("unchanged" if committed else "committed")
        with Memory.open(tmp_path / "reference", embed={"provider": "none"}) as ref:
            history(ref, *PREFS)
            ref.dream(user="u1")
            assert final == ref.knowledge.files(U1)

    def test_two_concurrent_runs_on_one_scope_one_refuses_or_waits(self, memory: Memory, workspace_dir: Path) -> None:
        cursors = history(memory, *PREFS)
        memory.close()
        first = worker(workspace_dir, pause_at="read")
        read_until(first, "read")  # the first run holds the scope's lock
        code, out = finish(worker(workspace_dir, wait=0))
        assert code == 3 and "knowledge of user:u1 is being written by another process" in out
        waiter = worker(workspace_dir, wait=60)
        read_until(waiter, "lock")
        code1, out1 = finish(first)
        code2, out2 = finish(waiter)
        assert (code1, code2) == (0, 0)
        assert out1.strip().endswith(f"done committed {cursors[-1]}")
        assert out2.strip().endswith(f"done unchanged {cursors[-1]}")  # it waited, then found nothing new
        with Memory.open(workspace_dir, create=False, embed={"provider": "none"}) as mem:
            assert [c.author for c in mem.knowledge.log(U1)] == ["dream"]

    def test_the_schedule_runs_in_the_foreground_until_sigterm(self, memory: Memory, workspace_dir: Path) -> None:
        history(memory, *PREFS)
        memory.close()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MINDPALACE_EMBED__PROVIDER": "none",
               "MINDPALACE_KNOWLEDGE__DREAM_INTERVAL_HOURS": "1000"}
        proc = subprocess.Popen([sys.executable, "-m", "mindpalace.cli", "dream", "--schedule", "-w", str(workspace_dir)],
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("schedule: archive interval[12:00:00], dream interval[41 days, 16:00:00]")
        assert proc.stdout.readline().startswith("archive: 0 idle sessions archived")  # runs first
        report = proc.stdout.readline()
        assert report.startswith("user:u1: committed (curator), 3 new entries")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.strip().endswith("schedule stopped")


def test_an_entry_larger_than_the_budget_can_pay_is_sent_cut_and_never_blocks_the_cursor(
        tmp_path: Path) -> None:
    with serve_stub() as stub:
        stub.script(chat(patches(), usage=None))  # usage counted locally: the real prompt size
        with llm_memory(tmp_path / "ws", stub, dream_token_budget=1_500, dream_batch_tokens=4_000) as mem:
            [c] = history(mem, "[1] u1: " + "I keep a log of every flight I take. " * 400)  # ~4,000 tokens
            [report] = mem.dream(user="u1")
            assert (report.status, report.cursor_after, report.llm_calls) == ("committed", c, 1)
            assert report.tokens_spent <= 1_500
            sent = stub.requests[0]["json"]["messages"][-1]["content"]
            assert sent.endswith("… [cut to fit the dream budget]")
