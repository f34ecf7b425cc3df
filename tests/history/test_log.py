"""history.jsonl: cursor, lock, reasoning stripping, caps, corrupt lines, atomic rewrite, index."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from datetime import datetime
from pathlib import Path

import pytest

from mindpalace.errors import StoreError, ValidationError
from mindpalace.history import HistoryLog
from mindpalace.history.log import CURSOR_FILENAME
from mindpalace.scope import Scope

SCOPE = Scope("t", "u", "a", "s1")
OTHER = Scope("t", "u", "a", "s2")


@pytest.fixture
def hist(tmp_path: Path) -> HistoryLog:
    return HistoryLog(tmp_path / "history", entry_max_chars=200)


def lines(h: HistoryLog) -> list[str]:
    return h.path.read_text(encoding="utf-8").splitlines()


class TestAppend:
    def test_append_returns_next_cursor_and_persists_it(self, hist: HistoryLog) -> None:
        a = hist.append(SCOPE, "first")
        b = hist.append(SCOPE, "second", kind="raw", messages=(3, 7))
        assert (a.cursor, b.cursor) == (1, 2)
        assert (hist.directory / CURSOR_FILENAME).read_text().strip() == "2"
        again = HistoryLog(hist.directory)
        assert again.append(SCOPE, "third").cursor == 3

    def test_line_has_the_documented_fields(self, hist: HistoryLog) -> None:
        hist.append(SCOPE, "the content", kind="raw", messages=(1, 4))
        data = json.loads(lines(hist)[0])
        assert {"cursor", "timestamp", "session", "content", "kind"} <= data.keys()
        assert data["session"] == "s1" and data["kind"] == "raw" and data["messages"] == [1, 4]
        ts = datetime.fromisoformat(data["timestamp"])
        assert ts.utcoffset() is not None and ts.utcoffset().total_seconds() == 0
        assert data["timestamp"].endswith("+00:00")

    def test_reasoning_text_is_stripped_from_summaries(self, hist: HistoryLog) -> None:
        e = hist.append(SCOPE, "<think>plan the answer</think>User booked TK001.")
        assert e.content == "User booked TK001."
        assert "plan" not in lines(hist)[0]

    def test_a_raw_archive_is_kept_verbatim(self, hist: HistoryLog) -> None:
        text = "[1] user: wrap it in <analysis> tags. My booking ref is ZX-9912 </think> ok"
        assert hist.append(SCOPE, text, kind="raw").content == text

    def test_reading_creates_nothing(self, tmp_path: Path) -> None:
        h = HistoryLog(tmp_path / "nowhere")
        assert h.read() == [] and h.tail(3) == [] and h.find("x") is None
        assert not (tmp_path / "nowhere").exists()
        h.append(SCOPE, "first")
        assert (tmp_path / "nowhere" / "history.jsonl").exists()

    def test_entries_are_capped(self, hist: HistoryLog) -> None:
        e = hist.append(SCOPE, "x" * 1000)
        assert len(e.content) <= 200 and "truncated" in e.content

    def test_empty_after_stripping_is_refused(self, hist: HistoryLog) -> None:
        with pytest.raises(ValidationError, match="empty"):
            hist.append(SCOPE, "<think>only reasoning</think>")
        assert not hist.path.exists() or lines(hist) == []

    @pytest.mark.parametrize(("kind", "rng"), [("bogus", None), ("summary", (5, 2)), ("raw", (0, 1))])
    def test_bad_kind_or_range_is_refused(self, hist: HistoryLog, kind: str, rng: tuple[int, int] | None) -> None:
        with pytest.raises(ValidationError):
            hist.append(SCOPE, "text", kind=kind, messages=rng)  # type: ignore[arg-type]


class TestCorruption:
    def test_corrupt_line_is_skipped_with_a_warning_and_appends_continue(
        self, hist: HistoryLog, caplog: pytest.LogCaptureFixture
    ) -> None:
        hist.append(SCOPE, "one")
        with open(hist.path, "a", encoding="utf-8") as fh:
            fh.write("{not json\n")
        e = hist.append(SCOPE, "two")
        assert e.cursor == 2
        with caplog.at_level(logging.WARNING, logger="mindpalace.history.log"):
            contents = [x.content for x in hist.read()]
        assert contents == ["one", "two"]
        assert any("corrupt history line" in r.message for r in caplog.records)

    def test_partial_last_line_stays_its_own_line(self, hist: HistoryLog) -> None:
        hist.append(SCOPE, "one")
        with open(hist.path, "a", encoding="utf-8") as fh:
            fh.write('{"cursor": 2, "timest')  # a crash mid-append
        e = hist.append(SCOPE, "two")
        assert e.cursor == 2
        assert [x.content for x in hist.read()] == ["one", "two"]
        assert len(lines(hist)) == 3

    def test_cursor_file_behind_the_file_never_reuses_a_cursor(self, hist: HistoryLog) -> None:
        hist.append(SCOPE, "one")
        hist.append(SCOPE, "two")
        (hist.directory / CURSOR_FILENAME).write_text("1\n")  # crash before .cursor was updated
        assert hist.append(SCOPE, "three").cursor == 3

    @pytest.mark.parametrize("content", ["garbage\n", ""])
    def test_missing_or_unreadable_cursor_file_is_recomputed(self, hist: HistoryLog, content: str) -> None:
        hist.append(SCOPE, "one")
        path = hist.directory / CURSOR_FILENAME
        if content:
            path.write_text(content)
        else:
            path.unlink()
        assert hist.append(SCOPE, "two").cursor == 2

    def test_cursor_survives_a_corrupt_last_line(self, hist: HistoryLog) -> None:
        hist.append(SCOPE, "one")
        (hist.directory / CURSOR_FILENAME).unlink()
        with open(hist.path, "a", encoding="utf-8") as fh:
            fh.write("###\n")
        assert hist.append(SCOPE, "two").cursor == 2


class TestRewrite:
    def test_rewrite_keeps_selected_entries_and_drops_corrupt_lines(self, hist: HistoryLog) -> None:
        for i in range(5):
            hist.append(SCOPE, f"e{i}")
        with open(hist.path, "a", encoding="utf-8") as fh:
            fh.write("corrupt\n")
        assert hist.rewrite(lambda e: e.cursor > 2) == 3
        assert [e.cursor for e in hist.read()] == [3, 4, 5]
        assert "corrupt" not in hist.path.read_text()

    def test_rewrite_never_moves_the_cursor_back(self, hist: HistoryLog) -> None:
        for i in range(3):
            hist.append(SCOPE, f"e{i}")
        hist.rewrite(lambda e: e.cursor == 1)
        assert hist.append(SCOPE, "next").cursor == 4

    def test_failed_rewrite_leaves_the_file_unchanged(
        self, hist: HistoryLog, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for i in range(3):
            hist.append(SCOPE, f"e{i}")
        before = hist.path.read_bytes()

        def boom(src: str, dst: str) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(os, "replace", boom)
        with pytest.raises(StoreError, match="disk full"):
            hist.rewrite(lambda e: False)
        monkeypatch.undo()
        assert hist.path.read_bytes() == before
        assert not [p for p in hist.directory.iterdir() if p.name.endswith(".tmp")]


class TestReading:
    def test_tail_and_read_after_cursor_and_session_filter(self, hist: HistoryLog) -> None:
        for i in range(6):
            hist.append(SCOPE if i % 2 == 0 else OTHER, f"e{i}")
        assert [e.content for e in hist.tail(2)] == ["e4", "e5"]
        assert [e.cursor for e in hist.read(after_cursor=4)] == [5, 6]
        assert [e.content for e in hist.read(session=OTHER)] == ["e1", "e3", "e5"]
        assert [e.content for e in hist.tail(1, session=SCOPE)] == ["e4"]
        assert hist.tail(0) == []

    def test_find_by_id(self, hist: HistoryLog) -> None:
        e = hist.append(SCOPE, "x", entry_id="abc")
        assert hist.find("abc") == e
        assert hist.find("nope") is None


class TestIndex:
    def test_entry_is_searchable_in_its_session_scope_only(self, memory, uid: str) -> None:
        scope = memory.scope(user="u", session=f"s-{uid}")
        h = HistoryLog(memory.workspace.history_dir)
        e = h.append(scope, "the user booked hotel Sakura for 2000 CNY", messages=(1, 3))
        HistoryLog.index_entry(memory.store, e)
        hits = memory.store.keyword_search(scope, "Sakura", kinds=["history"])
        assert [hit.doc.ref for hit in hits] == [str(e.cursor)]
        assert hits[0].doc.meta["messages"] == [1, 3]
        assert memory.store.keyword_search(scope.with_(session="other"), "Sakura") == []


def _append_many(directory: str, n: int, tag: str) -> None:
    h = HistoryLog(directory)
    for i in range(n):
        h.append(Scope("t", "u", "a", tag), f"{tag}-{i}")


def test_concurrent_appends_from_processes_get_unique_contiguous_cursors(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), 25, f"p{k}")) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = HistoryLog(tmp_path).read()
    assert sorted(e.cursor for e in entries) == list(range(1, 76))
    for k in range(3):  # each writer's entries stay in its own order
        mine = [e.content for e in entries if e.session == f"p{k}"]
        assert mine == [f"p{k}-{i}" for i in range(25)]
