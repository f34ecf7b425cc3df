"""The demo under SIGKILLs ends exactly where the uninterrupted run does; the baseline does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindpalace.demo import fresh_config, run_baseline, run_demo
from mindpalace.demo.scenario import build_plan
from mindpalace.errors import ValidationError


def test_plan_is_deterministic_and_long() -> None:
    assert build_plan(300, 3) == build_plan(300, 3) and len(build_plan(300, 3)) == 300
    assert build_plan(300, 3) != build_plan(300, 4)


def test_crashed_run_equals_uninterrupted_run(tmp_path: Path) -> None:
    clean = run_demo(fresh_config(tmp_path, steps=120, seed=11, budget_tokens=2000))
    crashed = run_demo(fresh_config(tmp_path, steps=120, seed=11, budget_tokens=2000), crash_every=4)
    assert crashed.recoveries > 5
    assert crashed.fingerprint == clean.fingerprint
    for r in (clean, crashed):
        assert (r.duplicates, r.budget_violations, r.acked_events_lost) == (0, 0, 0)
        assert r.steps == 120 and r.peak_prompt_tokens <= r.budget_tokens
        assert r.guard_blocks > 0 and r.refused_constraint_writes == 4


def test_baseline_shows_the_seed_failures(tmp_path: Path) -> None:
    r = run_baseline(fresh_config(tmp_path, steps=120, seed=11, budget_tokens=2000, name="baseline"))
    assert r.duplicates > 0 and r.budget_violations > 0


def test_a_negative_crash_interval_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # it used to kill every child within its first two kill points: an endless loop
    config = fresh_config(tmp_path, steps=120, seed=11, budget_tokens=2000)
    for run in (run_demo, run_baseline):
        with pytest.raises(ValidationError, match="crash_every"):
            run(config, crash_every=-1)
    assert config.world_path.stat().st_size == 0 and not config.ack_path.exists()  # nothing ran


def test_demos_started_at_once_on_one_workspace_get_their_own_sessions(tmp_path: Path) -> None:
    # fresh_config used to check for an existing world file: two `mindpalace demo` runs started
    # together both took demo-s7-r1 and drove one task from two processes.
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(4) as pool:
        sessions = pool.starmap(_fresh_session, [(tmp_path,)] * 8)
    assert len(set(sessions)) == 8


def _fresh_session(root: Path) -> str:
    return fresh_config(root, steps=120, seed=7, budget_tokens=2000).session
