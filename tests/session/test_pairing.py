"""Pairing validator (I1): repaired prompts never hold a call without its result or vice versa."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mindpalace.session.pairing import UNKNOWN_OUTCOME, check_pairing, repair_pairing, tool_groups


def call(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}


def result(i: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": i, "content": "ok"}


USER = {"role": "user", "content": "hi"}


class TestRepairPairing:
    def test_valid_prompt_is_unchanged(self) -> None:
        msgs = [USER, call("a", "b"), result("b"), result("a"), {"role": "assistant", "content": "done"}]
        fixed, report = repair_pairing(msgs)
        assert fixed == msgs and report.ok

    def test_dangling_call_is_closed_with_unknown_outcome(self) -> None:
        fixed, report = repair_pairing([USER, call("a", "b"), result("a"), USER])
        assert fixed[3] == {"role": "tool", "tool_call_id": "b", "content": UNKNOWN_OUTCOME}
        assert report.closed_calls == ["b"]

    def test_orphan_and_duplicate_results_are_dropped_and_flagged(self) -> None:
        fixed, report = repair_pairing([result("x"), call("a"), result("a"), result("a")])
        assert fixed == [call("a"), result("a")]
        assert report.dropped_results == ["x", "a"]

    def test_input_is_not_mutated(self) -> None:
        msgs = [call("a")]
        repair_pairing(msgs)
        assert msgs == [call("a")]


def message_lists() -> st.SearchStrategy[list[dict[str, Any]]]:
    ids = st.sampled_from(["a", "b", "c", "d"])
    item = st.one_of(
        st.just(USER),
        st.lists(ids, min_size=1, max_size=3, unique=True).map(lambda xs: call(*xs)),
        ids.map(result),
    )
    return st.lists(item, max_size=30)


@given(message_lists())
def test_repaired_prompt_always_pairs(msgs: list[dict[str, Any]]) -> None:
    fixed, _ = repair_pairing(msgs)
    assert check_pairing(fixed) == []
    assert repair_pairing(fixed)[0] == fixed  # idempotent


@given(message_lists())
def test_groups_cover_messages_and_never_split_a_batch(msgs: list[dict[str, Any]]) -> None:
    fixed, _ = repair_pairing(msgs)
    groups = tool_groups(fixed)
    assert [i for s, e in groups for i in range(s, e)] == list(range(len(fixed)))
    for start, _end in groups:
        assert fixed[start].get("role") != "tool"
