"""References (REFS.md): parse/format round trip, and the resolver's scope (I10)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.refs import (
    MAX_GROUP_MESSAGES,
    FactRef,
    HistoryRef,
    MessageRef,
    MessagesRef,
    RecordRef,
    format_ref,
    history_ref,
    message_ref,
    parse_ref,
)

SESSION = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40)


@given(st.one_of(
    st.builds(MessageRef, st.integers(1, 10**12), st.one_of(st.none(), SESSION)),
    st.builds(HistoryRef, st.integers(1, 10**12)),
    st.builds(FactRef, st.from_regex(r"[a-z_]{1,10}:[a-z_]{1,10}", fullmatch=True)),
))
def test_format_and_parse_round_trip(ref: MessageRef | HistoryRef | FactRef) -> None:
    assert parse_ref(format_ref(ref)) == ref


@given(st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 3)), min_size=1, max_size=8),
       st.one_of(st.none(), SESSION))
def test_message_groups_round_trip(runs: list[tuple[int, int]], session: str | None) -> None:
    # (a group of one message is written message:<N>, a MessageRef)
    ref = MessagesRef(tuple((lo, lo + n) for lo, n in runs), session)
    assert parse_ref(format_ref(ref)) == ref


def test_a_group_reads_as_the_prompt_writes_it() -> None:
    assert parse_ref("message:11–12,15@older") == MessagesRef(((11, 12), (15, 15)), "older")
    assert parse_ref("message:1-3, 7") == MessagesRef(((1, 3), (7, 7)))
    for bad in ("message:3–1", "message:1–2@", "message:1,,2", f"message:1–{MAX_GROUP_MESSAGES + 1}", "message:0–2"):
        assert parse_ref(bad) is None, bad


@pytest.mark.parametrize("text", ["message:0", "message:x", "message:", "message:3@", "history:",
                                  "history:-1", "history:2a", "fact:city", "fact:", ""])
def test_malformed_references_parse_to_none(text: str) -> None:
    assert parse_ref(text) is None


def test_anything_else_is_a_record_name() -> None:
    assert parse_ref("step_12") == RecordRef("step_12")
    assert message_ref(3) == "message:3" and message_ref(3, "b") == "message:3@b"
    assert history_ref(7) == "history:7"
    with pytest.raises(ValidationError):
        format_ref(MessageRef(0))


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"},
                     session={"context_window_tokens": 700, "max_completion_tokens": 100,
                              "safety_buffer_tokens": 0}) as m:
        yield m


class TestResolver:
    def test_messages_history_facts_and_records_resolve_by_name(self, mem: Memory) -> None:
        s = mem.session("a", user="u1", agent="x")
        s.add_message({"role": "user", "content": "book TK001 for May 20"})
        s.add_message({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{}"}}]})
        s.add_message({"role": "tool", "tool_call_id": "c1", "content": "booked, ref ZX-9912"})
        for i in range(40):
            s.add_message({"role": "user", "content": f"turn {i} " + "about hotels " * 10})
        s.prepare()
        cursor = s.consolidator.state().history_cursor
        s.remember("user:city", "Tokyo")
        sid = s.steps.begin("look up Senso-ji")
        s.steps.evaluate(sid, "success", tool_outputs=["6:00-17:00"])
        got = s.read_records(["message:3", f"history:{cursor}", "fact:user:city", "step_1", "nope",
                              "message:999", "history:999999", "fact:user:unknown", "message:0"])
        assert got.found["message:3"].body == "booked, ref ZX-9912"
        assert got.found["message:3"].meta["tool_call_id"] == "c1"
        assert got.found[f"history:{cursor}"].body == s.consolidator.history.read(session=s.scope)[-1].content
        assert got.found["fact:user:city"].body == "Tokyo"
        assert "step_1" in got.found
        assert got.missing == ["nope", "message:999", "history:999999", "fact:user:unknown", "message:0"]

    def test_a_date_lines_group_reference_reads_its_messages(self, mem: Memory) -> None:
        # new-user finding: the recalled block dates each day with "message:1–3,31" and says
        # read_files(ref) reads one whole, but such a group came back missing
        s = mem.session("g", user="u1", agent="x")
        other = mem.session("h", user="u1", agent="x")
        for i in range(1, 8):
            s.add_message({"role": "user", "name": "Mia", "content": f"line {i}"})
        other.add_message({"role": "user", "content": "there"})
        got = s.read_records(["message:2–3,6", "message:1@h", "message:1–2@h", "message:50–60"])
        assert got.found["message:2–3,6"].body == "[2] Mia: line 2\n[3] Mia: line 3\n[6] Mia: line 6"
        assert got.found["message:2–3,6"].meta["messages"] == [2, 3, 6]
        assert got.found["message:1–2@h"].body == "[1] user: there"
        assert got.missing == ["message:50–60"]
        assert mem.session("g", user="u2", agent="x").read_records(["message:1–2@h"]).missing == ["message:1–2@h"]

    def test_a_group_of_a_wrong_form_is_missing_with_the_rule_it_broke(self, mem: Memory) -> None:
        # new-user finding: read_files(["message:1–300"]) said only "Not found", so the model
        # could not tell a wrong form (over 200 messages, a run backwards) from an absent record
        s = mem.session("g", user="u1", agent="x")
        s.add_message({"role": "user", "content": "hello"})
        got = s.read_records(["message:1–300", "message:9–5", "message:50–60", "nope"])
        assert got.missing == ["message:1–300", "message:9–5", "message:50–60", "nope"]
        assert set(got.problems) == {"message:1–300", "message:9–5"}
        assert "at most 200" in got.problems["message:1–300"]
        line = got.render()
        assert "message:1–300 (a message group needs" in line and "message:50–60, nope" in line

    def test_a_reference_never_reads_another_users_data(self, mem: Memory) -> None:
        mine = mem.session("a", user="u1", agent="x")
        other_session = mem.session("b", user="u1", agent="x")
        theirs = mem.session("b", user="u2", agent="x")  # same session id, another user
        other_session.add_message({"role": "user", "content": "u1 in session b"})
        theirs.add_message({"role": "user", "content": "u2's secret"})
        for i in range(40):
            theirs.add_message({"role": "user", "content": f"u2 turn {i} " + "secret plans " * 10})
        theirs.prepare()
        their_cursor = theirs.consolidator.state().history_cursor
        theirs.remember("user:pin", "4321")
        got = mine.read_records(["message:1@b", f"history:{their_cursor}", "fact:user:pin",
                                 "message:1@"])
        assert got.found["message:1@b"].body == "u1 in session b"  # same tenant/user/agent only
        assert got.missing == [f"history:{their_cursor}", "fact:user:pin", "message:1@"]
        other_tenant = Memory(mem.workspace, mem.store, tenant="t2").session("a", user="u1", agent="x")
        assert other_tenant.read_records(["message:1@b"]).missing == ["message:1@b"]

    def test_the_read_files_protocol_reads_references(self, mem: Memory) -> None:
        from mindpalace.steps.readfiles import run_with_recall

        s = mem.session("a", user="u1")
        s.add_message({"role": "user", "content": "the code is QX-77"})
        replies = iter(['{"read_files": {"files": ["message:1"]}}', "QX-77"])
        seen: list[list[dict]] = []

        def invoke(msgs: list[dict]) -> str:
            seen.append(msgs)
            return next(replies)

        out = run_with_recall(invoke, [{"role": "user", "content": "what was the code?"}],
                              s.read_records, counter=mem.tokens, budget_tokens=2_000,
                              max_reinvocations=2)
        assert out.loaded == ["message:1"] and "QX-77" in seen[-1][-1]["content"]
