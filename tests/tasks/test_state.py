"""The pure projection: apply never mutates, and snapshot + replay equals full replay."""

from __future__ import annotations

from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace.tasks.events import (
    DEFAULT_REGISTRY,
    Checkpoint,
    ConstraintSet,
    ErrorOccurred,
    EventRegistry,
    GuardSet,
    PlanCreated,
    StepFinished,
    StepStarted,
    TaskCompleted,
    TaskEvent,
    ToolCallCompleted,
    ToolCallRecorded,
    UserFeedback,
    payload_of,
)
from mindpalace.tasks.state import TaskState, apply, initial_state, replay

names = st.sampled_from(["a", "b", "budget", "天数"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
keys = st.sampled_from(["book:k1", "book:k2", "pay:k3"])

events = st.one_of(
    st.builds(PlanCreated, plan_id=st.text(max_size=5), steps=st.lists(st.text(max_size=5), max_size=4)),
    st.builds(StepStarted, index=st.integers(0, 20), name=st.text(max_size=5)),
    st.builds(StepFinished, index=st.integers(0, 20), outcome=st.sampled_from(["success", "failure"]), output=json_values),
    st.builds(Checkpoint, step=st.none() | st.integers(0, 20), artifacts=st.dictionaries(names, json_values, max_size=3)),
    st.builds(ToolCallRecorded, key=keys, tool=st.just("book"), args=st.dictionaries(names, json_values, max_size=2), idempotent=st.booleans()),
    st.builds(ToolCallCompleted, key=keys, tool=st.just("book"), status=st.sampled_from(["completed", "failed"]), result=json_values),
    st.builds(ConstraintSet, name=names, value=json_values, removed=st.booleans(), source=st.sampled_from(["user", "developer"])),
    st.builds(GuardSet, name=names, tool=st.just("book_hotel"), expr=st.just("price <= budget")),
    st.builds(UserFeedback, text=st.text(min_size=1, max_size=8), updates=st.dictionaries(names, json_values, max_size=2)),
    st.builds(ErrorOccurred, message=st.text(max_size=8), code=st.sampled_from(["error", "guard_blocked", "constraint_refused"])),
    st.builds(TaskCompleted, summary=st.text(max_size=8)),
)


def stored(event: TaskEvent) -> TaskEvent:
    """The event as a replay sees it: through its JSON payload."""
    return DEFAULT_REGISTRY.parse(event.type, payload_of(event))


class TestApply:
    def test_version_counts_events(self) -> None:
        s = replay(initial_state("t"), [StepStarted(index=0), StepFinished(index=0)])
        assert (s.version, s.step, s.current, s.steps_finished) == (2, 1, None, 1)

    def test_input_state_is_not_mutated(self) -> None:
        before = replay(initial_state("t"), [Checkpoint(artifacts={"a": 1})])
        snapshot = before.model_dump()
        apply(before, Checkpoint(artifacts={"b": 2}))
        apply(before, ConstraintSet(name="budget", value=1, source="user"))
        assert before.model_dump() == snapshot

    def test_feedback_updates_are_user_constraints(self) -> None:
        s = apply(initial_state("t"), UserFeedback(text="1800 from now on", updates={"budget": 1800}))
        assert s.constraints["budget"].value == 1800 and s.constraints["budget"].source == "user"

    def test_completed_call_leaves_flight(self) -> None:
        s = replay(initial_state("t"), [
            ToolCallRecorded(key="k", tool="book"),
            ToolCallCompleted(key="k", tool="book", status="completed", result={"id": 1}),
        ])
        assert s.in_flight == {} and s.calls == {"started": 1, "completed": 1, "failed": 0}

    def test_user_type_reducer(self) -> None:
        class Bump(TaskEvent):
            type: Literal["bump"] = "bump"
            n: int

        reg = EventRegistry()
        reg.register(Bump, lambda state, e: state.model_copy(update={"step": state.step + e.n}))
        s = replay(initial_state("t"), [Bump(n=2), Bump(n=3)], reg)
        assert (s.step, s.version) == (5, 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(events, max_size=30), st.data())
def test_snapshot_plus_replay_equals_full_replay(seq: list[TaskEvent], data: Any) -> None:
    seq = [stored(e) for e in seq]
    cut = data.draw(st.integers(0, len(seq)))
    full = replay(initial_state("t"), seq)
    snap = TaskState.model_validate(replay(initial_state("t"), seq[:cut]).to_json())  # through JSON
    assert replay(snap, seq[cut:]) == full
    assert TaskState.model_validate(full.to_json()) == full


@settings(max_examples=60, deadline=None)
@given(st.lists(events, max_size=30))
def test_apply_builds_each_state_as_model_copy_would(seq: list[TaskEvent]) -> None:
    # apply's own shallow copy (state._updated) against pydantic's model_copy, event by event:
    # same fields, same fields-set, and the input state untouched
    import mindpalace.tasks.state as state_module

    fast = state_module._updated
    state = reference = initial_state("t")
    for event in (stored(e) for e in seq):
        previous, before = state, state.to_json()
        state = apply(state, event)
        state_module._updated = lambda s, upd: s.model_copy(update=upd)
        try:
            reference = apply(reference, event)
        finally:
            state_module._updated = fast
        assert state == reference
        assert state.model_fields_set == reference.model_fields_set
        assert state.__pydantic_extra__ is None and state.__pydantic_private__ is None
        assert previous.to_json() == before  # the input state is untouched
    assert TaskState.model_validate(state.to_json()) == state


def test_a_subclassed_state_is_copied_by_pydantic() -> None:
    class Richer(TaskState):
        note: str = ""

    state = apply(Richer(task="t", note="kept"), Checkpoint(step=2))
    assert type(state) is Richer and state.note == "kept" and (state.step, state.version) == (2, 1)
