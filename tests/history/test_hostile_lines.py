"""Hostile content in history/ never blocks the workspace (issue 11): a line nested 100,000 deep,
an oversized line, bad UTF-8, a damaged .cursor — each is skipped and reported, and appends,
reads, ``context()`` and ``history tail`` go on with the valid lines. Temp files a kill left
behind are removed when the workspace is opened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.history import HistoryLog
from mindpalace.history.log import CURSOR_FILENAME, MAX_LINE_BYTES
from mindpalace.scope import Scope
from mindpalace.workspace import Workspace

SCOPE = Scope("t", "u", "a", "s1")
DEEP = b"[" * 100_000 + b"]" * 100_000
HOSTILE = {
    "deep": DEEP,
    "deep_object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "oversized": b'{"cursor": 9, "content": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}',
    "bad_utf8": b'{"cursor": 9, "content": "\xff\xfe"}',
    "not_an_entry": b'{"cursor": "nine"}',
    # valid JSON with the fields present but of a hostile type: still damage, never a raw error
    "scope_not_an_object": b'{"cursor": 9, "timestamp": "2026-11-30T20:01:02+00:00", "session": "s1", '
                           b'"content": "x", "kind": "summary", "scope": "x"}',
    "range_overflows": b'{"cursor": 9, "timestamp": "2026-11-30T20:01:02+00:00", "session": "s1", '
                       b'"content": "x", "kind": "summary", "messages": [1e999, 2]}',
}


@pytest.fixture
def hist(tmp_path: Path) -> HistoryLog:
    return HistoryLog(tmp_path / "history")


def add_raw(h: HistoryLog, raw: bytes, newline: bool = True) -> None:
    with open(h.path, "ab") as fh:
        fh.write(raw + (b"\n" if newline else b""))


@pytest.mark.parametrize("kind", sorted(HOSTILE))
class TestHostileLine:
    def test_is_skipped_and_reported_with_its_line_number(self, hist: HistoryLog, kind: str) -> None:
        hist.append(SCOPE, "one")
        add_raw(hist, HOSTILE[kind])
        hist.append(SCOPE, "two")
        scan = hist.scan()
        assert [e.content for e in scan.entries] == ["one", "two"]
        assert [d.lineno for d in scan.damaged] == [2] and scan.damaged[0].problem
        assert [e.content for e in hist.tail(5)] == ["one", "two"]

    @pytest.mark.parametrize("newline", [True, False])
    def test_as_the_last_line_appends_keep_their_cursor(self, hist: HistoryLog, kind: str, newline: bool) -> None:
        hist.append(SCOPE, "one")
        (hist.directory / CURSOR_FILENAME).unlink()  # the cursor must come from the file
        add_raw(hist, HOSTILE[kind], newline)
        assert hist.append(SCOPE, "two").cursor == 2
        assert hist.cursor() == 2


class TestCursorFile:
    @pytest.mark.parametrize("content", [b"9" * 100_000, b"\xff\xfe\x00", b"-7", b"[[[["])
    def test_a_damaged_cursor_file_is_ignored(self, hist: HistoryLog, content: bytes) -> None:
        hist.append(SCOPE, "one")
        (hist.directory / CURSOR_FILENAME).write_bytes(content)
        assert hist.append(SCOPE, "two").cursor == 2


class TestWorkspace:
    def test_context_of_every_session_works_with_a_damaged_last_line(self, tmp_path: Path) -> None:
        small = {"context_window_tokens": 700, "max_completion_tokens": 100, "safety_buffer_tokens": 0}
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}, session=small) as mem:
            sessions = [mem.session(f"s{k}") for k in range(3)]
            for s in sessions:
                for i in range(30):
                    s.add_message({"role": "user", "content": f"turn {i}: flight UA{i} costs {i * 50} CNY"})
            sessions[0].prepare()
            add_raw(mem.history, DEEP, newline=False)  # the case: the LAST line
            for s in sessions:
                assert s.context().messages
                assert s.prepare().report.total_tokens <= 600
            assert len(mem.history.scan().damaged) == 1

    def test_history_tail_warns_about_the_bad_line(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "none")
        with Memory.open(tmp_path / "ws") as mem:
            mem.history.append(mem.scope(session="s"), "one")
            add_raw(mem.history, DEEP)
            mem.history.append(mem.scope(session="s"), "two")
        result = CliRunner().invoke(app, ["history", "tail", "--json", "-w", str(tmp_path / "ws")])
        assert result.exit_code == 0, result.output
        assert [e["content"] for e in json.loads(result.stdout)] == ["one", "two"]
        assert "history.jsonl:2: skipped a damaged line (JSON nested too deep)" in result.stderr

    def test_history_tail_prints_a_line_with_an_escaped_lone_surrogate(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
            mem.history.append(mem.scope(session="s"), "one")
            add_raw(mem.history, b'{"cursor": 2, "timestamp": "2026-11-30T20:01:02+00:00", '
                                 b'"session": "s", "content": "bad \\ud800 text", "kind": "summary"}')
        result = CliRunner().invoke(app, ["history", "tail", "-w", str(tmp_path / "ws")])
        assert result.exit_code == 0, result.output
        assert "bad \\ud800 text" in result.stdout  # escaped visibly, as every stored text is

    def test_temp_files_of_a_killed_write_are_removed_on_open(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
            mem.history.append(mem.scope(session="s"), "one")
        history = tmp_path / "ws" / "history"
        stray = [history / "..cursor.abc123.tmp", history / ".history.jsonl.def456.tmp"]
        for p in stray:  # the names mkstemp gives the atomic writes of .cursor and history.jsonl
            p.write_text("half")
        Memory.open(tmp_path / "ws", embed={"provider": "none"}).close()
        assert [p.exists() for p in stray] == [False, False]
        assert sorted(p.name for p in history.iterdir() if not p.name.endswith(".lock")) == [
            ".cursor", "history.jsonl"]

    def test_a_temp_config_of_a_killed_init_is_removed_by_init(self, tmp_path: Path) -> None:
        (tmp_path / "ws").mkdir()
        stray = tmp_path / "ws" / ".mindpalace.toml.x1y2z3"
        stray.write_text("half")
        Workspace.init(tmp_path / "ws")
        assert not stray.exists() and (tmp_path / "ws" / "mindpalace.toml").exists()
