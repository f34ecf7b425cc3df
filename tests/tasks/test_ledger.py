"""The idempotency ledger (I8): recorded before running, never re-run once completed or unknown."""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.errors import (
    EffectNotApplied,
    OutcomeUnknownError,
    ToolCallInFlightError,
    ValidationError,
)
from mindpalace.memory import Session
from mindpalace.tasks import NOT_RUN, ledger_key
from mindpalace.tasks.owner import claim


class Booker:
    """A side-effecting tool that counts how often it really ran."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, place: str, date: str) -> dict:
        self.calls += 1
        return {"booking_id": f"TK{self.calls:03d}", "place": place}


ARGS = {"place": "Senso-ji", "date": "2025-05-20"}


def book(session: Session, tool: Booker, **kw) -> dict:
    with session.tool_call("book_ticket", ARGS, **kw) as call:
        return call.result if call.done else call.run(tool)


class TestExactlyOnce:
    def test_completed_call_returns_recorded_result(self, session: Session) -> None:
        tool = Booker()
        results = [book(session, tool) for _ in range(3)]
        assert tool.calls == 1 and results == [{"booking_id": "TK001", "place": "Senso-ji"}] * 3

    def test_started_row_is_written_before_the_tool_runs(self, session: Session) -> None:
        seen = []

        def tool(place: str, date: str) -> dict:
            seen.append(session.tasks.ledger.get(session.task.id, ledger_key("book_ticket", ARGS)).status)
            return {}

        book(session, tool)  # type: ignore[arg-type]
        assert seen == ["started"]

    def test_key_ignores_argument_order(self) -> None:
        assert ledger_key("t", {"a": 1, "b": [1, 2]}) == ledger_key("t", {"b": [1, 2], "a": 1})
        assert ledger_key("t", {"a": 1}) != ledger_key("t", {"a": 2})

    @pytest.mark.parametrize("args", [["Senso-ji"], "Senso-ji", None])
    def test_arguments_that_are_not_a_dict_are_refused_before_anything_is_recorded(
        self, session: Session, args: object
    ) -> None:
        with pytest.raises(ValidationError, match="tool arguments must be a dict"), \
                session.tool_call("book_ticket", args) as call:  # type: ignore[arg-type]
            call.run(Booker())
        assert session.task.state().calls["started"] == 0

    def test_explicit_key_groups_calls(self, session: Session) -> None:
        tool = Booker()
        book(session, tool, key="trip-42:senso-ji")
        with session.tool_call("book_ticket", {**ARGS, "note": "retry"}, key="trip-42:senso-ji") as call:
            assert call.done and call.result["booking_id"] == "TK001"
        assert tool.calls == 1

    def test_a_call_the_tool_says_did_not_happen_is_failed_and_may_run_again(self, session: Session) -> None:
        def refused(place: str, date: str) -> dict:
            raise EffectNotApplied("gateway refused the request before booking")

        with pytest.raises(EffectNotApplied):
            book(session, refused)  # type: ignore[arg-type]
        entry = session.tasks.ledger.get(session.task.id, ledger_key("book_ticket", ARGS))
        assert entry.status == "failed" and "gateway" in entry.error
        tool = Booker()
        book(session, tool)
        assert tool.calls == 1
        assert session.tasks.ledger.get(session.task.id, entry.key).attempt == 2

    def test_a_tool_returning_not_run_is_failed_and_may_run_again(self, session: Session) -> None:
        with session.tool_call("book_ticket", ARGS) as call:
            assert call.run(lambda place, date: NOT_RUN) is NOT_RUN
        assert session.tasks.ledger.get(session.task.id, ledger_key("book_ticket", ARGS)).status == "failed"
        tool = Booker()
        assert book(session, tool)["booking_id"] == "TK001" and tool.calls == 1

    def test_result_is_json_normalized_on_first_run_too(self, session: Session) -> None:
        with session.tool_call("t", {}) as call:
            assert call.run(lambda: {"when": (1, 2)}) == {"when": [1, 2]}

    def test_result_before_completion_is_an_error(self, session: Session) -> None:
        with session.tool_call("t", {}) as call, pytest.raises(ValidationError, match="run"):
            _ = call.result


class TestAmbiguousFailure:
    """Issue 11: send_email sent, then raised ConnectionResetError; the call was recorded
    `failed` and re-run on every retry — 3 e-mails. An error after dispatch is `unknown`."""

    def send_email_three_times(self, session: Session, **kw: object) -> list[str]:
        outbox: list[str] = []

        def send_email(to: str, body: str) -> dict:
            outbox.append(to)  # the mail server accepted it …
            raise ConnectionResetError("connection reset by peer")  # … and the reply was lost

        for _ in range(3):
            try:
                with session.tool_call("send_email", {"to": "a@b.c", "body": "hi"}, **kw) as call:  # type: ignore[arg-type]
                    if not call.done:
                        call.run(send_email)
            except (ConnectionResetError, OutcomeUnknownError):
                pass
        return outbox

    def test_a_non_idempotent_call_that_raised_after_dispatch_runs_once(self, session: Session) -> None:
        assert self.send_email_three_times(session) == ["a@b.c"]
        key = ledger_key("send_email", {"to": "a@b.c", "body": "hi"})
        entry = session.tasks.ledger.get(session.task.id, key)
        assert entry.status == "unknown" and "ConnectionResetError" in entry.error
        assert session.task.resume().unknown_calls == [key]
        assert session.task.state().calls["unknown"] == 1

    def test_the_retry_names_the_error_and_how_to_settle_it(self, session: Session) -> None:
        self.send_email_three_times(session)
        with pytest.raises(OutcomeUnknownError, match=r"raised after it was dispatched .*ConnectionResetError.*task resolve"), \
                session.tool_call("send_email", {"to": "a@b.c", "body": "hi"}):
            pass

    def test_resolving_it_settles_the_call(self, session: Session) -> None:
        self.send_email_three_times(session)
        key = ledger_key("send_email", {"to": "a@b.c", "body": "hi"})
        session.task.resolve(key, result={"sent": True})
        with session.tool_call("send_email", {"to": "a@b.c", "body": "hi"}) as call:
            assert call.done and call.result == {"sent": True}
        assert session.task.resume().unknown_calls == []

    def test_a_reconcile_hook_is_asked_before_anything_runs_again(self, session: Session) -> None:
        session.tasks.ledger.reconciler("send_email", lambda entry: NOT_RUN)
        outbox = self.send_email_three_times(session)
        assert len(outbox) == 3  # the hook said "not sent" each time: running again is right

    def test_an_idempotent_tool_may_retry(self, session: Session) -> None:
        assert len(self.send_email_three_times(session, idempotent=True)) == 3


class TestUnknownOutcome:
    def started_only(self, session: Session) -> None:
        """What a process that died inside the tool leaves behind."""
        session.tasks.ledger.start(session.task.id, "book_ticket", ARGS)

    def test_started_without_outcome_is_not_rerun(self, session: Session) -> None:
        self.started_only(session)
        tool = Booker()
        with pytest.raises(OutcomeUnknownError, match="not re-run automatically"):
            book(session, tool)
        assert tool.calls == 0
        assert session.task.resume().unknown_calls == [ledger_key("book_ticket", ARGS)]

    def test_safe_tools_simply_run_again(self, session: Session) -> None:
        session.tasks.ledger.start(session.task.id, "search", {"q": 1}, idempotent=True)
        with session.tool_call("search", {"q": 1}, idempotent=True) as call:
            assert call.run(lambda q: q + 1) == 2

    def test_reconcile_hook_supplies_the_result(self, session: Session) -> None:
        self.started_only(session)
        session.tasks.ledger.reconciler("book_ticket", lambda entry: {"booking_id": "TK001"})
        tool = Booker()
        assert book(session, tool) == {"booking_id": "TK001"} and tool.calls == 0
        entry = session.tasks.ledger.get(session.task.id, ledger_key("book_ticket", ARGS))
        assert entry.status == "completed" and entry.reconciled

    def test_reconcile_hook_can_clear_the_call_to_run(self, session: Session) -> None:
        self.started_only(session)
        session.tasks.ledger.reconciler("book_ticket", lambda entry: NOT_RUN)
        tool = Booker()
        book(session, tool)
        assert tool.calls == 1

    def test_manual_resolve(self, session: Session) -> None:
        self.started_only(session)
        key = ledger_key("book_ticket", ARGS)
        session.tasks.ledger.resolve(session.task.id, key, result={"booking_id": "TK009"})
        assert book(session, Booker()) == {"booking_id": "TK009"}
        with pytest.raises(ValidationError, match="already completed"):
            session.tasks.ledger.resolve(session.task.id, key, result={})

    def test_a_late_outcome_never_overwrites_a_settled_one(self, session: Session) -> None:
        # the live call finishes after a person already resolved it by hand (or the reverse):
        # the first outcome stands, one completion is recorded, the late writer gets it back
        ledger = session.tasks.ledger
        started = ledger.start(session.task.id, "book_ticket", ARGS)
        by_hand = ledger.resolve(session.task.id, started.key, result={"booking_id": "TK009"})
        late = ledger.finish(started, result={"booking_id": "TK010"})
        assert late.result == by_hand.result == {"booking_id": "TK009"} and late.reconciled
        assert ledger.get(session.task.id, started.key).result == {"booking_id": "TK009"}
        completions = [r for r in session.task.read() if type(r.event).__name__ == "ToolCallCompleted"]
        assert len(completions) == 1

    @pytest.mark.parametrize("bad", [float("nan"), {"paid": float("inf")}, {1, 2}])
    def test_manual_resolve_refuses_a_result_that_is_not_json(self, session: Session, bad: object) -> None:
        self.started_only(session)
        key = ledger_key("book_ticket", ARGS)
        with pytest.raises(ValidationError, match="result"):
            session.tasks.ledger.resolve(session.task.id, key, result=bad)
        assert session.tasks.ledger.get(session.task.id, key).status == "started"  # nothing stored


CHILD = textwrap.dedent("""
    import os, signal, sys
    from mindpalace import Memory
    mem = Memory.open(sys.argv[1], embed={"provider": "none"})
    s = mem.session("trip", user="u1")
    def book(place, date):
        with open(sys.argv[2], "a") as f:   # the external side effect
            f.write(place + "\\n")
        os.kill(os.getpid(), signal.SIGKILL)  # dies before 'completed' is written
    with s.tool_call("book_ticket", {"place": "Senso-ji", "date": "2025-05-20"}) as call:
        call.run(book)
""")


def test_sigkill_between_started_and_completed_is_never_rerun(tmp_path: Path) -> None:
    ws, world = tmp_path / "ws", tmp_path / "world.txt"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ws), str(world)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert world.read_text().splitlines() == ["Senso-ji"]
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        s = mem.session("trip", user="u1")
        tool = Booker()
        with pytest.raises(OutcomeUnknownError):
            book(s, tool)
        assert tool.calls == 0 and world.read_text().splitlines() == ["Senso-ji"]
        assert s.task.state().in_flight  # still visible as unknown, for a human or a hook


class TestTwoProcessesOneCall:
    def test_a_call_completed_by_another_process_after_enter_returns_its_result(self, session: Session) -> None:
        tool = Booker()
        with session.tool_call("book_ticket", ARGS) as call:
            assert not call.done
            other = session.tasks.ledger.start(session.task.id, "book_ticket", ARGS)  # the other process
            session.tasks.ledger.finish(other, result={"booking_id": "TK-other"})
            assert call.run(tool) == {"booking_id": "TK-other"}
        assert tool.calls == 0


class TestOutcomeWithCheckpoint:
    def test_outcome_and_checkpoint_are_one_append(self, session: Session) -> None:
        tool = Booker()
        with session.tool_call("book_ticket", ARGS) as call:
            result = call.run(tool, checkpoint={"step": 3, "artifacts": {"ticket": "TK001"}})
        events = session.task.history()
        assert [e.type for e in events][-2:] == ["tool_call_completed", "checkpoint"]
        assert events[-1].created_at == events[-2].created_at  # one append, one transaction
        state = session.task.state()
        assert result["booking_id"] == "TK001" and state.step == 3
        assert state.artifacts == {"ticket": "TK001"} and state.in_flight == {}

    def test_a_bad_checkpoint_is_refused_before_the_tool_runs(self, session: Session) -> None:
        tool = Booker()
        with session.tool_call("book_ticket", ARGS) as call, \
                pytest.raises(ValidationError, match="checkpoint"):
            call.run(tool, checkpoint={"step": -1})
        assert tool.calls == 0 and session.task.version == 0

    @pytest.mark.parametrize("artifacts", [{"rate": float("nan")}, {"rate": float("inf")}, {"when": object()}])
    def test_a_checkpoint_that_is_not_json_is_refused_before_the_tool_runs(
        self, session: Session, artifacts: dict
    ) -> None:
        # refused only at the append, the side effect had run and the call was left without an
        # outcome (every retry then raised OutcomeUnknownError)
        tool = Booker()
        with session.tool_call("book_ticket", ARGS) as call, \
                pytest.raises(ValidationError, match="checkpoint"):
            call.run(tool, checkpoint={"artifacts": artifacts})
        assert tool.calls == 0 and session.task.version == 0
        with session.tool_call("book_ticket", ARGS) as call:
            assert call.run(tool, checkpoint={"artifacts": {"n": 1}})["booking_id"]
        assert tool.calls == 1

    def test_a_replay_writes_no_second_checkpoint(self, session: Session) -> None:
        tool = Booker()
        for _ in range(2):
            with session.tool_call("book_ticket", ARGS) as call:
                if not call.done:
                    call.run(tool, checkpoint={"artifacts": {"n": 1}})
        assert tool.calls == 1
        assert [e.type for e in session.task.history()].count("checkpoint") == 1

    def test_a_failed_call_writes_no_checkpoint(self, session: Session) -> None:
        def broken(place: str, date: str) -> dict:
            raise EffectNotApplied("sold out")

        with session.tool_call("book_ticket", ARGS) as call, pytest.raises(EffectNotApplied):
            call.run(broken, checkpoint={"artifacts": {"n": 1}})
        assert "checkpoint" not in [e.type for e in session.task.history()]


class BlockingBooker(Booker):
    """A side-effecting tool that stays inside the call until released (no sleeps)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, place: str, date: str) -> dict:
        result = super().__call__(place, date)
        self.entered.set()
        assert self.release.wait(60), "never released"
        return result


class TestInFlight:
    """A call running in another thread or live process is in flight, not an unknown outcome:
    a second caller is refused with ToolCallInFlightError, resolve refuses, no hook is asked,
    and the side effect runs once (the new-user report: resolve-then-retry ran it twice)."""

    def run_in_thread(self, session: Session, tool: Booker) -> tuple[threading.Thread, list[object]]:
        out: list[object] = []
        thread = threading.Thread(target=lambda: out.append(book(session, tool)))
        thread.start()
        return thread, out

    def test_a_second_caller_is_told_the_call_is_in_flight(self, session: Session) -> None:
        tool, asked = BlockingBooker(), []
        session.tasks.ledger.reconciler("book_ticket", lambda entry: asked.append(entry) or NOT_RUN)
        thread, out = self.run_in_thread(session, tool)
        try:
            assert tool.entered.wait(60)
            key = ledger_key("book_ticket", ARGS)
            with pytest.raises(ToolCallInFlightError, match=rf"running now in process {os.getpid()}") as err:
                book(session, tool)
            assert err.value.key == key and err.value.checked
            with pytest.raises(ToolCallInFlightError):
                session.task.resolve(key, error="looked like a crash")
            with pytest.raises(ToolCallInFlightError):
                session.task.clear()
            r = session.task.resume()
            assert r.running_calls == [key] and r.unknown_calls == []
            assert session.tasks.ledger.get(session.task.id, key).status == "started"
        finally:
            tool.release.set()
            thread.join()
        assert asked == [] and tool.calls == 1 and out == [{"booking_id": "TK001", "place": "Senso-ji"}]
        assert book(session, tool) == out[0] and tool.calls == 1  # the repeat returns its result
        assert session.task.resume().running_calls == []

    def test_a_caller_that_looked_before_the_call_started_is_refused_at_run(self, session: Session) -> None:
        tool, second = BlockingBooker(), Booker()
        with session.tool_call("book_ticket", ARGS) as call:
            assert not call.done  # nothing recorded yet when this caller looked
            thread, _ = self.run_in_thread(session, tool)
            try:
                assert tool.entered.wait(60)
                with pytest.raises(ToolCallInFlightError):
                    call.run(second)
            finally:
                tool.release.set()
                thread.join()
        assert second.calls == 0 and tool.calls == 1

    def test_a_call_whose_owner_left_without_an_outcome_is_unknown(self, session: Session) -> None:
        ledger = session.tasks.ledger
        with claim() as owner:  # the low-level protocol: the claim is held while it runs
            ledger.start(session.task.id, "book_ticket", ARGS, owner=owner)
            with pytest.raises(ToolCallInFlightError):
                book(session, Booker())
        with pytest.raises(OutcomeUnknownError):  # the claim ended with no outcome written
            book(session, Booker())
        key = ledger_key("book_ticket", ARGS)
        assert session.task.resume().unknown_calls == [key]
        assert session.task.resolve(key, result={"booking_id": "TK1"}).status == "completed"

    def test_an_interrupt_inside_the_tool_records_an_unknown_outcome(self, session: Session) -> None:
        def interrupted(place: str, date: str) -> dict:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            book(session, interrupted)  # type: ignore[arg-type]
        entry = session.tasks.ledger.get(session.task.id, ledger_key("book_ticket", ARGS))
        assert entry.status == "unknown" and "KeyboardInterrupt" in entry.error

    def test_an_owner_on_another_host_is_in_flight_until_forced(self, session: Session) -> None:
        with claim() as mine:
            elsewhere = dataclasses.replace(mine, host="worker-7")
        ledger, key = session.tasks.ledger, ledger_key("book_ticket", ARGS)
        ledger.start(session.task.id, "book_ticket", ARGS, owner=elsewhere)
        with pytest.raises(ToolCallInFlightError, match=r"cannot be checked.*--force") as err:
            book(session, Booker())
        assert not err.value.checked
        with pytest.raises(ToolCallInFlightError):
            ledger.resolve(session.task.id, key, error="gone")
        assert ledger.resolve(session.task.id, key, error="worker-7 died before sending", force=True).status == "failed"
        assert book(session, Booker())["booking_id"] == "TK001"

    @pytest.mark.parametrize("error", [
        ToolCallInFlightError("t", "book:k", "book", 2, "process 7 on host 'h'", checked=False),
        OutcomeUnknownError("t", "book:k", "book", 2, "ConnectionResetError"),
    ])
    def test_the_errors_cross_a_process_boundary(self, error: Exception) -> None:
        # a worker process raises them to its pool (pickled): each comes back whole
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error) and vars(back) == vars(error)

    def test_force_never_overrides_a_live_owner_of_this_host(self, session: Session) -> None:
        with claim() as owner:
            session.tasks.ledger.start(session.task.id, "book_ticket", ARGS, owner=owner)
            with pytest.raises(ToolCallInFlightError):
                session.task.resolve(ledger_key("book_ticket", ARGS), error="x", force=True)


CHILD_BLOCKED = textwrap.dedent("""
    import sys
    from mindpalace import Memory
    mem = Memory.open(sys.argv[1], embed={"provider": "none"})
    s = mem.session("trip", user="u1")
    def book(place, date):
        with open(sys.argv[2], "a") as f:   # the external side effect
            f.write(place + "\\n")
        print("in the tool", flush=True)
        sys.stdin.readline()                # stays inside the call until told (or killed)
        return {"booking_id": "TK-child"}
    with s.tool_call("book_ticket", {"place": "Senso-ji", "date": "2025-05-20"}) as call:
        print(call.run(book)["booking_id"], flush=True)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
class TestAnotherProcessMidCall:
    def start_child(self, tmp_path: Path) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD_BLOCKED, str(tmp_path / "ws"), str(tmp_path / "world.txt")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline() == "in the tool\n", child.stderr
        return child

    def test_a_live_process_mid_call_is_in_flight_then_its_result_is_returned(self, tmp_path: Path) -> None:
        child = self.start_child(tmp_path)
        try:
            with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
                s, tool = mem.session("trip", user="u1"), Booker()
                with pytest.raises(ToolCallInFlightError, match=f"process {child.pid} "):
                    book(s, tool)
                with pytest.raises(ToolCallInFlightError):
                    s.task.resolve(ledger_key("book_ticket", ARGS), error="crashed?")
                out, err = child.communicate("go\n", timeout=60)
                assert child.returncode == 0 and out == "TK-child\n", err
                assert book(s, tool) == {"booking_id": "TK-child"} and tool.calls == 0
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        assert (tmp_path / "world.txt").read_text().splitlines() == ["Senso-ji"]

    def test_a_process_killed_mid_call_leaves_an_unknown_outcome(self, tmp_path: Path) -> None:
        child = self.start_child(tmp_path)
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
            s, tool = mem.session("trip", user="u1"), Booker()
            with pytest.raises(ToolCallInFlightError):
                book(s, tool)
            child.kill()  # SIGKILL: no outcome is ever written
            child.communicate()
            assert child.returncode == -signal.SIGKILL
            with pytest.raises(OutcomeUnknownError):
                book(s, tool)
            key = ledger_key("book_ticket", ARGS)
            assert s.task.resume().unknown_calls == [key]
            assert s.task.resolve(key, result={"booking_id": "TK-child"}).status == "completed"
            assert book(s, tool) == {"booking_id": "TK-child"} and tool.calls == 0
        assert (tmp_path / "world.txt").read_text().splitlines() == ["Senso-ji"]
