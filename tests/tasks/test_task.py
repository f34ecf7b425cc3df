"""The task handle: checkpoint after every step, resume at the right step, the Session facade."""

from __future__ import annotations

import pytest

from mindpalace.errors import ValidationError
from mindpalace.memory import Session


class TestCheckpointResume:
    def test_resume_a_new_plan_starts_at_step_zero(self, session: Session) -> None:
        session.task.plan(["search Senso-ji", "book Senso-ji"])
        r = session.task.resume()
        assert (r.next_step.index, r.next_step.name, r.next_step.retry) == (0, "search Senso-ji", False)

    def test_finished_step_moves_on_with_its_checkpoint(self, session: Session) -> None:
        t = session.task
        t.plan(["a", "b", "c"])
        t.start_step(0, "a")
        t.finish_step(0, output="ok", artifacts={"ticket:Senso-ji": {"booking_id": "TK001"}}, pending=["b", "c"])
        r = t.resume()
        assert r.next_step.index == 1 and r.state.pending == ["b", "c"]
        assert r.state.artifacts == {"ticket:Senso-ji": {"booking_id": "TK001"}}

    def test_unfinished_step_is_retried(self, session: Session) -> None:
        t = session.task
        t.plan(["a", "b"])
        t.start_step(0, "a")
        t.finish_step(0)
        t.start_step(1, "b")  # … and the process died here
        r = t.resume()
        assert (r.next_step.index, r.next_step.retry) == (1, True)

    def test_done_plan_has_no_next_step(self, session: Session) -> None:
        t = session.task
        t.plan(["a"])
        t.start_step(0, "a")
        t.finish_step(0)
        assert t.resume().next_step is None
        t.complete("done")
        assert t.state().status == "completed"

    def test_checkpoint_is_one_event_and_merges_artifacts(self, session: Session) -> None:
        v1 = session.checkpoint(artifacts={"a": 1})
        v2 = session.checkpoint(artifacts={"b": 2}, step=4)
        state = session.task.state()
        assert (v1, v2) == (1, 2) and state.artifacts == {"a": 1, "b": 2} and state.step == 4

    def test_checkpoint_snapshot_on_demand(self, session: Session) -> None:
        session.checkpoint(artifacts={"a": 1}, snapshot=True)
        assert session.task.events.latest_snapshot(session.task.id).version == 1


class TestFacade:
    def test_session_default_task_is_named_like_the_session(self, session: Session) -> None:
        assert session.task.id == session.id
        assert session.tasks.current is session.task

    def test_several_tasks_per_session(self, session: Session) -> None:
        session.tasks("flight").checkpoint(artifacts={"x": 1})
        session.task.checkpoint()
        assert sorted(n for n, _ in session.tasks.list()) == sorted(["flight", session.id])


class TestBadInput:
    def test_bad_step_input_is_a_mindpalace_validation_error(self, session: Session) -> None:
        with pytest.raises(ValidationError, match="index"):
            session.task.start_step(-1)
        with pytest.raises(ValidationError, match="outcome"):
            session.task.finish_step(0, outcome="maybe")
        assert session.task.version == 0

    @pytest.mark.parametrize("step", [True, False, "3", 2.0])
    def test_a_step_that_is_not_an_int_is_refused_and_nothing_stored(self, session: Session, step: object) -> None:
        # new-user finding: checkpoint(step=True) was stored as step 1 and step="3" as 3 (pydantic's
        # lax int); a bool or a string is a caller's bug, refused like on REST and MCP
        with pytest.raises(ValidationError, match="step"):
            session.checkpoint(step=step)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="index"):
            session.task.start_step(step)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="index"):
            session.task.finish_step(step)  # type: ignore[arg-type]
        assert session.task.version == 0

    def test_a_ledgered_checkpoint_with_a_bool_step_is_refused_before_the_tool_runs(self, session: Session) -> None:
        ran: list[int] = []
        with session.tool_call("book_ticket", {"place": "Senso-ji"}) as call, \
                pytest.raises(ValidationError, match="checkpoint"):
            call.run(lambda **_: ran.append(1), checkpoint={"step": True})
        assert ran == [] and session.task.version == 0
