"""Compaction: gated summaries (I3), snapshots before summaries (I2), progress or stop (I4)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import ProviderResponseError
from mindpalace.providers.llm import Completion, Usage
from mindpalace.settings import LLMSettings
from mindpalace.steps.tiers import step_line
from mindpalace.testing.fakes import FakeLLM
from mindpalace.textsafe import clean_text
from mindpalace.tokens import get_counter

from .conftest import run_steps, step_memory

COUNTER = get_counter("o200k_base")
GOOD = "Reservations R0001 and R0002 were found for passengers one and two; both are confirmed."
SOURCE_TOKENS = 200
REPEATED = re.compile(r"Repeated: (\d+) attempts")
SNAPSHOT_NAME = re.compile(r"memory_snapshot_(?:recent|summary)_step_\d+(?:_\d+)?")


def completion(text: Any, finish: str = "stop") -> Completion:
    return Completion(text=text, finish_reason=finish, usage=Usage.of(1, 1), model="fake")


BAD_OUTPUTS = st.one_of(
    st.just(completion("")),
    st.text(alphabet=" \t\n", min_size=1, max_size=5).map(completion),
    st.sampled_from(["(nothing)", "N/A", "summary", "...", "TODO", "none"]).map(completion),
    st.just(completion(GOOD, "error")),
    st.just(completion("ok short")),
    st.just(completion(" ".join(["reservation R0001 confirmed"] * 200))),  # longer than its source
    st.just(completion(None)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=BAD_OUTPUTS)
def test_i3_a_rejected_summary_leaves_recent_and_summary_unchanged(small_memory: Memory, bad: Completion) -> None:
    steps = step_memory(small_memory, FakeLLM([bad] * 10, settings=LLMSettings(max_retries=0)))
    run_steps(steps, 2)
    before_recent, before_summary = steps.state.recent, steps.state.summary
    steps.compact()
    assert steps.state.recent == before_recent
    assert steps.state.summary == before_summary
    assert steps.counters["compaction_failures"] == 1
    snapshot = steps.records.get("memory_snapshot_recent_step_2")  # the snapshot stands
    assert snapshot.body == "\n".join(r.line for r in before_recent)


FAILURES = {
    "provider error": lambda: FakeLLM(fail_times=10**9, error=ProviderResponseError("down", retryable=True),
                                      settings=LLMSettings(max_retries=1, breaker_fail_max=100)),
    "placeholder output": lambda: FakeLLM(default=lambda _m, _t: "(nothing)", settings=LLMSettings(max_retries=0)),
    "empty output": lambda: FakeLLM(default=lambda _m, _t: " ", settings=LLMSettings(max_retries=0)),
    "error finish": lambda: FakeLLM([completion(GOOD, "error")] * 100, settings=LLMSettings(max_retries=0)),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=10, max_value=70), failure=st.sampled_from(sorted(FAILURES)))
def test_i4_an_always_failing_provider_makes_bounded_calls_and_loses_nothing(
    small_memory: Memory, n: int, failure: str
) -> None:
    llm = FAILURES[failure]()
    steps = step_memory(small_memory, llm)
    s = steps.settings
    run_steps(steps, n)
    bound = s.compaction_max_attempts * s.compaction_breaker_fail_max * (llm.settings.max_retries + 1)
    assert 0 < llm.calls <= bound  # bounded whatever n is: the breaker stops the loop
    calls = llm.calls
    run_steps(steps, 10, start=n)
    assert llm.calls == calls  # an open breaker makes no call at all
    assert steps.counters["compaction_skipped"] > 0
    assert [r.step for r in steps.state.recent] == list(range(1, n + 11))  # nothing lost
    assert steps.state.summary == ()
    assert len(steps.records.exists([f"step_{i}" for i in range(1, n + 11)])) == n + 10


def test_i4_a_gate_failure_retries_with_fewer_tokens_then_stops(small_memory: Memory) -> None:
    llm = FakeLLM([completion("N/A")] * 10, settings=LLMSettings(max_retries=0))
    steps = step_memory(small_memory, llm)
    run_steps(steps, 2)
    result = steps.compact()
    assert result is not None and not result.ok
    assert result.attempts == steps.settings.compaction_max_attempts == llm.calls
    asked = [r["max_tokens"] for r in llm.requests]
    assert asked == sorted(asked, reverse=True) and asked[0] > asked[-1]


GOALS = st.lists(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=60)
    .filter(lambda t: t.strip()),
    min_size=1, max_size=40,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(goals=GOALS, evaluations=st.lists(st.sampled_from(["success", "failed", "partly done"]), min_size=40, max_size=40))
def test_i2_every_compacted_line_is_recoverable_verbatim_from_a_snapshot(
    small_memory: Memory, goals: list[str], evaluations: list[str]
) -> None:
    steps = step_memory(small_memory)
    produced: dict[int, str] = {}  # step → the line last shown for it
    cap = steps.settings.line_max_chars
    for goal, evaluation in zip(goals, evaluations, strict=False):
        sid = steps.begin(goal)
        record = steps.evaluate(sid, evaluation)
        if record.step_id == sid:
            produced[sid] = step_line(sid, evaluation, clean_text(goal), cap)
        else:  # a repeated failure folded into the line of its first attempt, with a count
            first = int(record.step_id or 0)
            count = REPEATED.search(record.body).group(1)  # type: ignore[union-attr]
            produced[first] = step_line(first, f"{evaluation} (×{count}, last step {sid})", clean_text(goal), cap)
    # follow snapshot names from the current summary tier, as a model would with read_files
    reachable: dict[str, str] = {}
    frontier = [b.raw for b in steps.state.summary]
    while frontier:
        found = steps.read_records(frontier).found
        frontier = []
        for name, record in found.items():
            reachable[name] = record.body
            frontier += [n for n in SNAPSHOT_NAME.findall(record.body) if n not in reachable]
    recovered = {ln for body in reachable.values() for ln in body.splitlines()}
    recent = {r.line for r in steps.state.recent}
    assert all(line in recent or line in recovered for line in produced.values())
    assert {r.step for r in steps.state.recent} | {
        s for b in steps.state.summary for s in range(b.first_step, b.last_step + 1)
    } >= set(produced)
