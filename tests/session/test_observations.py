"""Tool-result governance: huge results as head + tail + reference, old ones masked, pairing kept."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.blocks import is_memory_message
from mindpalace.session.observations import govern, head_and_tail
from mindpalace.session.pairing import check_pairing
from mindpalace.tokens import get_counter

COUNTER = get_counter("o200k_base")


def tool_turn(i: int, result: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": result}]


BUILD_LOG = "\n".join(f"compiling module {i} ok" for i in range(2_000)) + "\nFINAL: 3 submodules failed"


class TestGovern:
    def test_a_huge_result_keeps_head_tail_and_names_its_reference(self) -> None:
        msgs = [{"role": "user", "content": "build"}, *tool_turn(1, BUILD_LOG)]
        out, report = govern(msgs, [None, "message:2", "message:3"], COUNTER, max_tokens=300,
                             mask_after_turns=0, masked_tokens=64)
        text = out[2]["content"]
        assert COUNTER.count(text) <= 300
        assert text.startswith("compiling module 0 ok") and text.endswith("FINAL: 3 submodules failed")
        assert "message:3" in text and str(COUNTER.count(BUILD_LOG)) in text
        assert report.capped == [("message:3", COUNTER.count(BUILD_LOG), COUNTER.count(text))]
        assert msgs[2]["content"] == BUILD_LOG  # pure: the input is untouched
        assert out[2]["tool_call_id"] == "c1" and out[1] is msgs[1]

    def test_a_huge_result_given_as_text_parts_is_cut_too(self) -> None:
        parts = [{"type": "text", "text": BUILD_LOG[:20_000]}, {"type": "text", "text": BUILD_LOG[20_000:]}]
        msgs = [{"role": "user", "content": "build"}, *tool_turn(1, "")]
        msgs[2] = {**msgs[2], "content": parts}
        out, report = govern(msgs, [None, "message:2", "message:3"], COUNTER, max_tokens=300,
                             mask_after_turns=0, masked_tokens=64)
        text = out[2]["content"]
        assert isinstance(text, str) and COUNTER.count(text) <= 300 and "message:3" in text
        assert text.startswith("compiling module 0 ok") and text.endswith("FINAL: 3 submodules failed")
        assert [r for r, _, _ in report.capped] == ["message:3"] and msgs[2]["content"] is parts

    def test_old_results_are_masked_after_n_turns(self) -> None:
        msgs: list[dict[str, Any]] = []
        for i in range(5):
            msgs += tool_turn(i, f"result {i} " + "row " * 200)
        refs = [f"message:{k + 1}" for k in range(len(msgs))]
        out, report = govern(msgs, refs, COUNTER, max_tokens=0, mask_after_turns=3, masked_tokens=64)
        assert [r for r, _, _ in report.masked] == ["message:2", "message:4"]  # ≥ 3 turns after
        assert all(COUNTER.count(out[k]["content"]) <= 64 for k in (1, 3))
        assert out[5]["content"] == msgs[5]["content"] and out[9]["content"] == msgs[9]["content"]
        assert "masked 2 tool results older than 3 turns" in report.lines(3)[0]

    def test_a_result_without_a_reference_is_never_shortened(self) -> None:
        msgs = tool_turn(1, BUILD_LOG)
        out, report = govern(msgs, [None, None], COUNTER, max_tokens=100, mask_after_turns=1,
                             masked_tokens=64)
        assert out == msgs and not report.capped and not report.masked

    def test_head_and_tail_fits_or_shows_the_note_alone(self) -> None:
        note = "…[cut; read message:9]…"
        assert COUNTER.count(head_and_tail(BUILD_LOG, COUNTER, 40, note)) <= 40
        assert head_and_tail(BUILD_LOG, COUNTER, 10, note) == COUNTER.truncate(note, 10)


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with Memory.open(tmp_path_factory.mktemp("obs") / "ws", embed={"provider": "none"},
                     session={"tool_result_max_tokens": 200, "tool_result_mask_after_turns": 3,
                              "tool_result_masked_tokens": 48}) as m:
        yield m


def test_every_build_governs_stored_tool_results_and_the_log_stays_verbatim(mem: Memory) -> None:
    s = mem.session(uuid.uuid4().hex[:8])
    s.add_message({"role": "user", "content": "build"})
    for m in tool_turn(1, BUILD_LOG):
        s.add_message(m)
    built = s.context(100_000)
    text = built.messages[-1]["content"]
    assert text.endswith("FINAL: 3 submodules failed") and "message:3" in text
    assert COUNTER.count(text) <= 200
    assert built.report.observations[0].startswith("cut tool result message:3")
    assert built.report.degradations == []  # nothing was lost: the log has it whole
    assert s.messages.list(from_index=3)[0].message["content"] == BUILD_LOG  # the log is verbatim
    assert s.read_records(["message:3"]).found["message:3"].body == BUILD_LOG


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 1_500), min_size=1, max_size=10),
       users=st.lists(st.booleans(), max_size=10), budget=st.integers(300, 5_000))
def test_governance_keeps_pairing_and_the_budget_and_loses_nothing(
    mem: Memory, sizes: list[int], users: list[bool], budget: int
) -> None:
    s = mem.session(uuid.uuid4().hex[:8])
    for i, n in enumerate(sizes):
        if i < len(users) and users[i]:
            s.add_message({"role": "user", "content": f"step {i}"})
        for m in tool_turn(i, " ".join(f"r{i}-{k}" for k in range(n))):
            s.add_message(m)
    built = s.context(budget)
    assert check_pairing(built.messages) == []
    assert built.report.total_tokens == COUNTER.count_messages(built.messages) <= budget
    stored = {m.message.get("tool_call_id"): (m.index, m.message["content"])
              for m in s.messages.list() if m.message.get("role") == "tool"}
    for m in built.messages:
        if is_memory_message(m):
            continue  # the memory blocks' own exchange, not the conversation
        if m.get("role") == "tool" and m["content"] not in (stored[m["tool_call_id"]][1], ""):
            index, full = stored[m["tool_call_id"]]  # shortened: it names where it is whole
            assert f"message:{index}" in m["content"]
            assert s.read_records([f"message:{index}"]).found[f"message:{index}"].body == full


def test_settings_reach_the_builder(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"},
                     session={"tool_result_max_tokens": 0, "tool_result_mask_after_turns": 0}) as m:
        s = m.session("x")
        s.add_message({"role": "user", "content": "build"})
        for msg in tool_turn(1, BUILD_LOG):
            s.add_message(msg)
        assert s.context(100_000).messages[-1]["content"] == BUILD_LOG  # governance off
