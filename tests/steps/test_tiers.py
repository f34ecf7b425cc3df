"""Tier state: JSON round trip and migration of legacy layouts on load."""

from __future__ import annotations

from mindpalace import Memory
from mindpalace.steps.tiers import KV_KEY, KV_NAMESPACE, TierState, migrate_legacy
from mindpalace.testing import wiring

from .conftest import new_session, run_steps, step_memory


def test_state_round_trips_through_json(small_memory: Memory) -> None:
    steps = step_memory(small_memory)
    run_steps(steps, 12)
    steps.begin("pending one")
    steps.checkpoint(key_info="k")
    state = steps.state
    assert TierState.from_json(state.to_json()) == state


def test_pending_lines_inside_recent_are_moved_to_pending() -> None:
    legacy = {
        "recent": ["Step 1 | Eval: success | Goal: a", "Step 2 | Eval: pending | Goal: b",
                   "free note without a step"],
        "summary": "earlier: booked HAT136",
        "next_step": 3,
    }
    state = migrate_legacy(legacy)
    assert [p.line for p in state.pending] == ["Step 2 | Eval: pending | Goal: b"]
    assert [r.line for r in state.recent] == ["Step 1 | Eval: success | Goal: a", "free note without a step"]
    assert state.summary[0].text == "earlier: booked HAT136"
    assert state.next_step == 3 and state.counters["migrations"] == 1


def test_turix_memory_keys_are_understood() -> None:
    state = migrate_legacy({
        "pending_recent_memory": "Step 7 | Eval: pending | Goal: click Next",
        "recent_memory": "Step 5 | Eval: success | Goal: open Safari\nStep 6 | Eval: failed | Goal: search",
        "summary_memory": "",
    })
    assert [p.step for p in state.pending] == [7]
    assert [r.step for r in state.recent] == [5, 6]
    assert state.summary == () and state.next_step == 8


def test_a_legacy_state_is_migrated_on_load_and_written_back(small_memory: Memory) -> None:
    s = new_session(small_memory)
    s.store.kv_put(s.scope, KV_NAMESPACE, KV_KEY, {
        "recent": ["Step 1 | Eval: success | Goal: a", "Step 2 | Eval: pending | Goal: b"], "next_step": 3,
    })
    steps = wiring.step_memory(s)
    assert [p.step for p in steps.state.pending] == [2]
    assert s.store.kv_get(s.scope, KV_NAMESPACE, KV_KEY)["format"] == 2
    steps.evaluate(2, "success")  # the migrated pending step can be finished
    assert wiring.step_memory(s).state.recent_text().endswith("Step 2 | Eval: success | Goal: b")
