"""The Recuris span experiment (seed 001 §3–5), reproduced through the product and extended.

A task is a run of steps: at step ``start`` (= 1) a critical fact is written with importance
0.9, every other step writes a noise fact with importance 0.1, and at step ``end`` = start +
span + randint(0, 3) the fact is needed. Success = the recalled value is the one written.

* baseline — working memory only (capacity 3): :class:`WorkingMemory` without an archive.
* dual memory — the product: ``Session.remember`` for every step and ``Session.recall(key,
  k=1)`` at the end (working memory first, then hybrid search of the long-term store), on a
  real SQLite workspace, working capacity 3 and importance threshold 0.6.

Seed 001 uses spans 2, 4, 6, 8, 10 with 5 random tasks each (random.seed(42)); the same
generator continues for the longer spans (100, 1,000, 10,000 steps).

Two variants of the in-between items. ``noise_importance=0.1`` is the seed's code as written:
with eviction by the lowest (access_count, importance) the 0.9 fact always outranks 0.1 noise
(a new noise item is itself the next victim), so even the baseline keeps the fact — the
seed's "baseline 2/25" does not follow from its own code. ``noise_importance=0.9`` makes every
step produce an equally important item (IDs, results an agent must keep): ties evict the
oldest, the baseline loses the fact once the span exceeds the capacity, and the dual memory
must find one fact among thousands archived long-term.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mindpalace.facts.model import Fact
from mindpalace.facts.working import WorkingMemory
from mindpalace.memory import Memory, Session

FACT_KEY = "task:critical_fact"
FACT_IMPORTANCE = 0.9  # seed 001 §4.5
SEED_NOISE_IMPORTANCE = 0.1

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class SpanTask:
    start: int
    end: int
    value: str


@dataclass(slots=True)
class SpanResult:
    noise_importance: float
    span: int
    tasks: int
    steps: int
    baseline_successes: int
    baseline_ms_per_step: float
    dual_successes: int
    dual_ms_per_step: float

    @property
    def baseline_rate(self) -> float:
        return 100.0 * self.baseline_successes / self.tasks

    @property
    def dual_rate(self) -> float:
        return 100.0 * self.dual_successes / self.tasks

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "baseline_rate": self.baseline_rate, "dual_rate": self.dual_rate}


def build_tasks(spans: Sequence[int], *, per_span: int = 5, seed: int = 42) -> dict[int, list[SpanTask]]:
    """Seed 001's task generator: start 1, end = start + span + randint(0, 3)."""
    rng = random.Random(seed)
    tasks: dict[int, list[SpanTask]] = {}
    for span in spans:
        tasks[span] = []
        for _ in range(per_span):
            start = 1
            end = start + span + rng.randint(0, 3)
            tasks[span].append(SpanTask(start, end, f"v_{start}_{end}"))
    return tasks


def run_baseline(
    task: SpanTask, capacity: int, threshold: float, noise_importance: float = SEED_NOISE_IMPORTANCE
) -> bool:
    """Working memory only (the seed's BaselineMemory)."""
    wm = WorkingMemory(capacity, threshold, archive=None)
    for step in range(1, task.end + 1):
        if step == task.start:
            wm.add(Fact(FACT_KEY, task.value, importance=FACT_IMPORTANCE))
        elif step == task.end:
            item = wm.get(FACT_KEY)
            return item is not None and item.content == task.value
        else:
            wm.add(Fact(f"noise:step_{step}", f"tmp_{step}", importance=noise_importance))
    return False


def run_dual(session: Session, task: SpanTask, noise_importance: float = SEED_NOISE_IMPORTANCE) -> bool:
    """The product's dual memory: remember every step, recall the key at the end."""
    for step in range(1, task.end + 1):
        if step == task.start:
            session.remember(FACT_KEY, task.value, importance=FACT_IMPORTANCE, source=f"step_{step}")
        elif step == task.end:
            hits = session.recall(FACT_KEY, k=1)
            return bool(hits) and hits[0].fact is not None and hits[0].fact.content == task.value
        else:
            session.remember(f"noise:step_{step}", f"tmp_{step}", importance=noise_importance)
    return False


def run_spans(
    spans: Sequence[int],
    *,
    tasks_per_span: int = 5,
    seed: int = 42,
    capacity: int = 3,
    threshold: float = 0.6,
    embedder: str = "none",
    noise_importances: Sequence[float] = (SEED_NOISE_IMPORTANCE, 0.9),
    workspace: str | Path | None = None,
    progress: Progress | None = None,
) -> list[SpanResult]:
    """Run both memories on every task, for each noise importance; each dual-memory task
    gets a fresh user scope."""
    notify = progress or (lambda phase, done, total: None)
    tasks = build_tasks(spans, per_span=tasks_per_span, seed=seed)
    total_steps = len(noise_importances) * sum(t.end for ts in tasks.values() for t in ts)
    done = 0
    results = []
    with tempfile.TemporaryDirectory(prefix="mindpalace-spans-") as tmp:
        root = Path(workspace) if workspace else Path(tmp) / "ws"
        with Memory.open(root, facts={"working_capacity": capacity, "importance_threshold": threshold},
                         embed={"provider": embedder}) as memory:
            for noise in noise_importances:
                for span, span_tasks in tasks.items():
                    steps = sum(t.end for t in span_tasks)
                    t0 = time.perf_counter()
                    base = sum(run_baseline(t, capacity, threshold, noise) for t in span_tasks)
                    base_s = time.perf_counter() - t0
                    dual, dual_s = 0, 0.0
                    for i, t in enumerate(span_tasks):
                        user = f"noise{noise}-span{span}-task{i}"
                        session = memory.session("task", user=user, agent="spans")
                        t0 = time.perf_counter()
                        dual += run_dual(session, t, noise)
                        dual_s += time.perf_counter() - t0
                        done += t.end
                        notify("spans", done, total_steps)
                    results.append(SpanResult(
                        noise, span, len(span_tasks), steps, base, 1000 * base_s / steps,
                        dual, 1000 * dual_s / steps,
                    ))
    return results
