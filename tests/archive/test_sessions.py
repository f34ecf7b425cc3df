"""The L4 archive: idempotent, de-duplicated, crash-safe, scoped, recallable verbatim."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.archive import SessionArchive
from mindpalace.archive.sessions import tenant_dirname
from mindpalace.cli import app
from mindpalace.errors import StoreError
from mindpalace.refs import ArchiveRef, parse_ref
from mindpalace.scope import ANY, Scope

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CHAT = [
    {"role": "system", "content": "You are the airline agent. Policy text …"},
    {"role": "user", "content": "Please move my flight HAT170 to Friday."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_reservation", "arguments": '{"id": "HAT170"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "reservation HAT170: JFK→SFO, economy " + "·" * 3000},
    {"role": "assistant", "content": "Done: HAT170 now departs Friday 9:05."},
    {"role": "user", "content": "Thanks, and my seat preference is aisle."},
    {"role": "assistant", "content": "Aisle noted for HAT170."},
]


def add(mem: Memory, session: str, messages: list[dict[str, Any]], *, user: str = "u1",
        at: datetime = T0) -> None:
    mem.session(session, user=user, agent="air").messages.add_many(messages, timestamps=[at] * len(messages))


def archive_files(mem: Memory) -> dict[str, bytes]:
    root = mem.archive.directory
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.jsonl.gz"))}


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]


class TestArchive:
    def test_archives_exchanges_into_the_monthly_file(self, memory: Memory) -> None:
        add(memory, "s1", CHAT)
        out = memory.session("s1", user="u1", agent="air").archive()
        # the system prompt alone is no exchange: two exchanges, messages 2–5 and 6–7
        assert (out.status, out.exchanges, out.appended, out.through) == ("archived", 2, 2, 7)
        rows = lines(memory.archive.directory / "2026-12.jsonl.gz")
        assert [r["messages"] for r in rows] == [[2, 5], [6, 7]]

    def test_running_it_twice_changes_nothing(self, memory: Memory) -> None:
        add(memory, "s1", CHAT)
        s = memory.session("s1", user="u1", agent="air")
        s.archive()
        files, docs = archive_files(memory), memory.store.stats().documents
        again = s.archive()
        assert (again.status, again.appended, again.indexed) == ("unchanged", 0, 0)
        assert archive_files(memory) == files and memory.store.stats().documents == docs

    def test_new_messages_are_archived_on_the_next_run_only(self, memory: Memory) -> None:
        add(memory, "s1", CHAT[:5])
        s = memory.session("s1", user="u1", agent="air")
        assert s.archive().through == 5
        add(memory, "s1", CHAT[5:])
        out = s.archive()
        assert (out.exchanges, out.appended, out.through) == (1, 1, 7)

    def test_an_exchange_archived_from_another_session_is_not_appended_twice(self, memory: Memory) -> None:
        add(memory, "s1", CHAT)
        add(memory, "s2", CHAT[5:])  # the same exchange, replayed in another session
        memory.session("s1", user="u1", agent="air").archive()
        out = memory.session("s2", user="u1", agent="air").archive()
        assert (out.exchanges, out.appended, out.duplicates, out.indexed) == (1, 0, 1, 0)
        keys = [r["key"] for r in lines(memory.archive.directory / "2026-12.jsonl.gz")]
        assert len(keys) == len(set(keys))

    def test_a_failure_after_the_file_write_is_finished_by_the_next_run_without_duplicates(
            self, memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
        add(memory, "s1", CHAT)
        arch = memory.archive
        real = arch.store.index_document

        def broken(*args: Any, **kwargs: Any) -> int:
            raise StoreError("disk went away")

        monkeypatch.setattr(arch.store, "index_document", broken)
        with pytest.raises(StoreError):
            memory.session("s1", user="u1", agent="air").archive()
        scope = memory.scope(user="u1", agent="air", session="s1")
        assert arch.cursor(scope) == 0  # the cursor did not move: the store write rolled back
        written = lines(arch.directory / "2026-12.jsonl.gz")
        monkeypatch.setattr(arch.store, "index_document", real)
        out = memory.session("s1", user="u1", agent="air").archive()
        assert (out.appended, out.duplicates, out.indexed, out.through) == (0, 2, 2, 7)
        assert lines(arch.directory / "2026-12.jsonl.gz") == written

    def test_a_session_with_a_turn_in_flight_is_skipped(self, memory: Memory) -> None:
        add(memory, "s1", CHAT)
        s = memory.session("s1", user="u1", agent="air")
        with s.lease(holder="agent-loop"):
            assert s.archive().status == "busy"
        assert s.archive().status == "archived"


class TestIdle:
    def test_only_sessions_idle_past_the_threshold_are_archived(self, workspace_dir: Path) -> None:
        mem = Memory.open(workspace_dir, embed={"provider": "none"}, knowledge={"archive_idle_hours": 6})
        with mem:
            add(mem, "old", CHAT, at=T0)
            add(mem, "new", CHAT[:3], at=T0 + timedelta(hours=5))
            arch = SessionArchive(mem.store, mem.workspace.archive_dir, mem.tenant,
                                  settings=mem.settings.knowledge, clock=lambda: T0 + timedelta(hours=7))
            got = {o.session: o.status for o in arch.archive_idle(Scope(mem.tenant, ANY, ANY, ANY))}
        assert got == {"old": "archived", "new": "active"}


class TestRecall:
    def test_recall_finds_an_archived_exchange_and_its_reference_reads_it_back_verbatim(self, memory: Memory) -> None:
        add(memory, "s1", CHAT)
        s1 = memory.session("s1", user="u1", agent="air")
        s1.archive()
        later = memory.session("s2", user="u1", agent="air")
        hits = [h for h in later.recall("seat preference aisle", k=10) if h.tier == "archive"]
        assert hits, "the archived exchange is recallable from another session of the user"
        ref = f"archive:{hits[0].ref}"
        record = later.read_records([ref]).found[ref]
        assert record.body == ("user: Thanks, and my seat preference is aisle.\n"
                               "assistant: Aisle noted for HAT170.")
        assert [t["content"] for t in record.meta["turns"]] == [CHAT[5]["content"], CHAT[6]["content"]]

    def test_the_recalled_block_shows_the_exchange_with_its_archive_reference(self, memory: Memory) -> None:
        add(memory, "s1", CHAT)
        memory.session("s1", user="u1", agent="air").archive()
        built = memory.session("s2", user="u1", agent="air").context(3_000, query="seat preference aisle")
        block = "\n".join(str(m.get("content")) for m in built.messages)
        assert 'source="archive"' in block and 'ref="archive:' in block

    def test_another_user_cannot_read_or_recall_it(self, memory: Memory) -> None:
        add(memory, "s1", CHAT)
        memory.session("s1", user="u1", agent="air").archive()
        key = lines(memory.archive.directory / "2026-12.jsonl.gz")[0]["key"]
        other = memory.session("x", user="u2", agent="air")
        assert other.read_records([f"archive:{key}"]).missing == [f"archive:{key}"]
        assert not [h for h in other.recall("seat preference aisle", k=10) if h.tier == "archive"]

    def test_malformed_archive_references_are_missing_not_raised(self, memory: Memory) -> None:
        s = memory.session("s1", user="u1", agent="air")
        assert parse_ref("archive:../../etc") is None and parse_ref("archive:" + "a" * 24) == ArchiveRef("a" * 24)
        assert s.read_records(["archive:zz", "archive:" + "0" * 24]).missing == ["archive:zz", "archive:" + "0" * 24]


class TestPaths:
    @pytest.mark.parametrize("tenant", ["..", ".", "../etc", "a/b", "x" * 150, "t\u00e9"])
    def test_a_tenant_name_never_escapes_the_archive_folder(self, tenant: str) -> None:
        name = tenant_dirname(tenant)
        assert "/" not in name and name not in (".", "..") and len(name) <= 100


class TestCli:
    def test_archive_session_and_idle(self, memory: Memory, workspace_dir: Path) -> None:
        add(memory, "s1", CHAT)
        memory.close()
        runner = CliRunner()
        out = runner.invoke(app, ["archive", "-w", str(workspace_dir), "--session", "s1", "-u", "u1", "-a", "air"])
        assert out.exit_code == 0, out.output
        assert out.stdout == "s1: archived, 2 exchanges (2 appended, 0 already archived), archived through message #7\n"
        again = runner.invoke(app, ["archive", "-w", str(workspace_dir), "--idle", "--json"])
        assert again.exit_code == 0 and json.loads(again.stdout)[0]["status"] == "unchanged"

    def test_archive_needs_exactly_one_of_session_or_idle(self, workspace_dir: Path) -> None:
        Memory.open(workspace_dir, embed={"provider": "none"}).close()
        proc = subprocess.run([sys.executable, "-m", "mindpalace.cli", "archive", "-w", str(workspace_dir)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and "give --session SESSION or --idle (not both)" in proc.stderr


MESSAGES = st.lists(st.sampled_from([
    {"role": "user", "content": "hello"}, {"role": "user", "content": "my id is 42"},
    {"role": "assistant", "content": "hello"}, {"role": "assistant", "content": "noted"},
    {"role": "system", "content": "be brief"},
]), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(MESSAGES, min_size=1, max_size=3))
def test_archiving_in_any_batches_twice_changes_nothing_and_never_duplicates(
        tmp_path_factory: pytest.TempPathFactory, batches: list[list[dict[str, Any]]]) -> None:
    with Memory.open(tmp_path_factory.mktemp("ws"), embed={"provider": "none"}) as mem:
        s = mem.session("s", user="u", agent="a")
        for batch in batches:
            s.messages.add_many(batch, timestamps=[T0] * len(batch))
            s.archive()
            files = archive_files(mem)
            assert s.archive().status == "unchanged" and archive_files(mem) == files  # I5
        keys = [e.key for m in mem.archive.months() for e in mem.archive.exchanges(m)]
        assert len(keys) == len(set(keys))
