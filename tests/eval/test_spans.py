"""Recuris span experiment: the seed's generator, baseline vs dual memory."""

from __future__ import annotations

from mindpalace.eval.spans import build_tasks, run_baseline, run_spans


def test_tasks_follow_the_seed_generator() -> None:
    tasks = build_tasks([2, 4], per_span=5, seed=42)
    assert [len(v) for v in tasks.values()] == [5, 5]
    for span, ts in tasks.items():
        assert all(t.start == 1 and span + 1 <= t.end <= span + 4 for t in ts)
    assert build_tasks([2], seed=42) == build_tasks([2], seed=42)


def test_seed_baseline_keeps_the_fact_because_noise_is_unimportant() -> None:
    (task,) = build_tasks([50], per_span=1)[50]
    assert run_baseline(task, 3, 0.6, noise_importance=0.1)
    assert not run_baseline(task, 3, 0.6, noise_importance=0.9)


def test_dual_memory_succeeds_at_every_span_where_the_baseline_fails(tmp_path) -> None:
    rows = run_spans([2, 10, 200], tasks_per_span=2, noise_importances=[0.9], workspace=tmp_path / "ws")
    assert all(r.dual_successes == r.tasks for r in rows)
    assert [r.baseline_successes for r in rows if r.span >= 10] == [0, 0]
    assert all(r.dual_ms_per_step > 0 for r in rows)
