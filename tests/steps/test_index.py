"""The memory index: newest first, capped, one fixed line format."""

from __future__ import annotations

from mindpalace import Memory
from mindpalace.testing import wiring

from .conftest import new_session, run_steps


def test_index_lines_have_the_seed_format_newest_first(small_memory: Memory) -> None:
    steps = wiring.step_memory(new_session(small_memory))
    sid = steps.begin("click Next")
    steps.evaluate(sid, "success")
    steps.add_info("user_profile", "window seat", description="user prefers window seats")
    assert steps.index() == [
        "- user_profile (info, step 1): user prefers window seats",
        "- step_1 (step, step 1): Step 1 (success): click Next",
    ]


def test_index_is_capped_at_its_setting_and_keeps_the_newest(tmp_path) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"},
                     steps={"budget_tokens": 5000, "index_max_entries": 50}) as mem:
        steps = wiring.step_memory(new_session(mem))
        run_steps(steps, 60)
        index = steps.index()
        assert len(index) == 50
        assert index[0].startswith("- step_60 (step, step 60): Step 60 (success): ")
        assert index[-1].startswith("- step_11 (step, step 11): ")


def test_an_info_record_without_a_step_shows_only_its_type(small_memory: Memory) -> None:
    steps = wiring.step_memory(new_session(small_memory))
    steps.add_info("user_profile", "x", description="profile")
    assert steps.index() == ["- user_profile (info): profile"]
