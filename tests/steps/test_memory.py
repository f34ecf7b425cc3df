"""StepMemory: tiers, step records, orphan sweep, restart exactness, crash safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.errors import NotFoundError, ValidationError
from mindpalace.settings import LLMSettings
from mindpalace.steps import StepMemory
from mindpalace.steps.tiers import parse_step_line
from mindpalace.testing import wiring
from mindpalace.testing.fakes import FakeLLM

from .conftest import SMALL, new_session, run_steps, step_memory


class TestBeginAndEvaluate:
    def test_begin_adds_a_pending_line_with_the_goal(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        sid = steps.begin("search flights JFK to SEA", action="search()")
        assert sid == 1
        assert steps.state.pending_text() == "Step 1 | Eval: pending | Goal: search flights JFK to SEA"
        assert steps.state.recent == ()

    def test_evaluate_moves_the_line_to_recent_and_saves_the_step_record(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        sid = steps.begin("search flights", action="search_direct_flight(JFK, SEA)")
        record = steps.evaluate(sid, "success", analysis="HAT136 at 11:00", tool_outputs=['[{"flight": "HAT136"}]'])
        assert steps.state.pending == ()
        assert steps.state.recent_text() == "Step 1 | Eval: success | Goal: search flights"
        assert record.name == "step_1" and record.type == "step" and record.step_id == 1
        assert record.description == "Step 1 (success): search flights"
        assert record.body.splitlines() == [
            "Goal: search flights", "Action: search_direct_flight(JFK, SEA)", "Evaluation: success",
            "Analysis: HAT136 at 11:00", "Tool outputs:", '[1] [{"flight": "HAT136"}]',
        ]

    def test_binary_tool_output_is_escaped_and_a_lone_string_is_one_output(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        sid = steps.begin("cat the file")
        record = steps.evaluate(sid, "success", tool_outputs=["bin \x00 out \ud800"])
        assert record.body.splitlines()[-1] == "[1] bin \\x00 out \\ud800"
        sid = steps.begin("cat it again")
        record = steps.evaluate(sid, "success", tool_outputs="one output")  # type: ignore[arg-type]
        assert record.body.splitlines()[-1] == "[1] one output"

    def test_free_text_evaluation_stays_on_one_line(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        sid = steps.begin("pay")
        steps.evaluate(sid, "failed:\n card declined")
        assert parse_step_line(steps.state.recent[0].line) == (1, "failed: card declined", "pay")

    def test_evaluating_an_unknown_or_finished_step_raises_not_found(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        with pytest.raises(NotFoundError, match="pending step 7"):
            steps.evaluate(7, "success")
        sid = steps.begin("x")
        steps.evaluate(sid, "success")
        with pytest.raises(NotFoundError):
            steps.evaluate(sid, "success")

    @pytest.mark.parametrize("bad", [0, -1, "1", True, None])
    def test_a_step_that_is_not_a_positive_id_is_refused(self, small_memory: Memory, bad: object) -> None:
        with pytest.raises(ValidationError):
            step_memory(small_memory).evaluate(bad, "success")  # type: ignore[arg-type]

    def test_an_empty_goal_is_refused_and_nothing_changes(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        with pytest.raises(ValidationError):
            steps.begin("   ")
        assert steps.state.next_step == 1 and steps.tiers.version == 0


class TestRepeatedErrors:
    """Seed 004 checklist item 8: the same error repeated in a loop is stored once with a count."""

    def fail(self, steps: StepMemory, error: str = "ConnectionError: host unreachable") -> int:
        sid = steps.begin("book the hotel", action='book_hotel({"city": "Tokyo"})')
        steps.evaluate(sid, "failed", analysis=error, tool_outputs=[error])
        return sid

    def test_seven_identical_failures_are_one_line_and_one_record_with_the_count(self, memory: Memory) -> None:
        steps = step_memory(memory)
        ids = [self.fail(steps) for _ in range(7)]
        lines = steps.state.recent
        assert len(lines) == 1 and lines[0].count == 7
        assert f"Eval: failed (×7, last step {ids[-1]})" in lines[0].line
        assert steps.render_recent() is not None and "(×7" in steps.render_recent()
        assert [r.name for r in steps.records.list(type="step")] == [f"step_{ids[0]}"]
        record = steps.records.get(f"step_{ids[0]}")
        assert "Repeated: 7 attempts" in record.body and "×7" in record.description
        assert steps.read_records([f"step_{ids[1]}"]).missing == [f"step_{ids[1]}"]
        assert steps.counters["steps_evaluated"] == 7 and steps.counters["repeats_folded"] == 6

    def test_the_count_survives_a_reload_and_other_work_in_between(self, memory: Memory) -> None:
        s = new_session(memory)
        steps = wiring.step_memory(s)
        first = self.fail(steps)
        run_steps(steps, 1)
        self.fail(steps)
        again = wiring.step_memory(s)  # a new handle: the state comes from the store
        self.fail(again)
        folded = [r for r in again.state.recent if r.step == first]
        assert [r.count for r in folded] == [3] and again.state.recent[-1].step == first

    def test_a_different_error_or_a_success_is_not_folded(self, memory: Memory) -> None:
        steps = step_memory(memory)
        self.fail(steps)
        self.fail(steps, "TimeoutError: 30 s")
        for _ in range(2):
            sid = steps.begin("book the hotel", action='book_hotel({"city": "Tokyo"})')
            steps.evaluate(sid, "success", analysis="booked", tool_outputs=["ok"])
        assert [r.count for r in steps.state.recent] == [1, 1, 1, 1]

    @pytest.mark.parametrize("attempts", [
        # (action, evaluation, analysis, output): the same call and error, written differently
        [('book_hotel({"city": "Tokyo", "nights": 2})', "failed: timeout", "", '{"error": "timeout", "code": 504}'),
         ('book_hotel({"nights":2,"city":"Tokyo"})', "failed: timeout", "", '{"code":504,"error":"timeout"}')],
        [("book_hotel({'city': 'Tokyo', 'nights': 2})", "failed", "", "x"),
         ("book_hotel(nights=2, city='Tokyo')", "failed", "", "x"),
         ("book_hotel(city='Tokyo', nights=2)", "failed", "", "x")],
        [("book_hotel(Tokyo)", "failed:  timeout\n", " host   unreachable ", "Error: timeout\r\n"),
         (" book_hotel( Tokyo ) ", "failed: timeout", "host unreachable", "Error:  timeout")],
    ])
    def test_key_order_and_spacing_do_not_make_a_new_error(
        self, memory: Memory, attempts: list[tuple[str, str, str, str]]
    ) -> None:
        steps = step_memory(memory)
        for action, evaluation, analysis, output in attempts:
            sid = steps.begin("book the hotel", action=action)
            steps.evaluate(sid, evaluation, analysis=analysis, tool_outputs=[output])
        assert [r.count for r in steps.state.recent] == [len(attempts)]  # main: one line per attempt

    def test_other_arguments_are_another_error(self, memory: Memory) -> None:
        steps = step_memory(memory)
        for action in ('book({"city": "Tokyo"})', 'book({"city": "Kyoto"})', "book(city='Osaka')",
                       "book(city)", "book(town)"):
            sid = steps.begin("book the hotel", action=action)
            steps.evaluate(sid, "failed", tool_outputs=["timeout"])
        assert [r.count for r in steps.state.recent] == [1] * 5


class TestOrphans:
    def test_sweep_marks_pending_lines_unknown_and_writes_their_records(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        a, b = steps.begin("first"), steps.begin("second")
        assert steps.sweep_orphans("model call failed") == [a, b]
        assert steps.state.pending == ()
        assert [parse_step_line(r.line)[1] for r in steps.state.recent] == ["unknown", "unknown"]
        body = steps.records.get("step_2").body
        assert "Evaluation: unknown" in body and "orphaned pending step: model call failed" in body
        assert steps.counters["orphans_swept"] == 2

    def test_a_full_pending_buffer_sweeps_its_oldest_line(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        cap = steps.settings.pending_max_lines
        for i in range(cap + 1):
            steps.begin(f"goal {i}")
        assert len(steps.state.pending) == cap
        assert steps.state.pending[0].step == 2
        assert "Eval: unknown" in steps.state.recent_text()
        assert steps.records.get("step_1").description.startswith("Step 1 (unknown)")


class TestBudgets:
    def test_recent_over_the_hard_limit_is_compacted_behind_a_snapshot(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        run_steps(steps, 6)
        state = steps.state
        assert state.counters["compactions"] >= 1
        block = state.summary[0]
        snap = steps.records.get(block.raw)
        assert snap.type == "snapshot"
        assert snap.description == f"Pre-summarization snapshot of recent memory at step {snap.step_id}"
        assert state.recent_tokens(steps.counter) <= steps.settings.budget_tokens
        assert block.render().startswith(f"[steps {block.first_step}-{block.last_step} · raw: {block.raw}] ")

    def test_a_warning_is_logged_between_warn_and_hard_ratio(
        self, small_memory: Memory, caplog: pytest.LogCaptureFixture
    ) -> None:
        steps = step_memory(small_memory)
        with caplog.at_level("WARNING", logger="mindpalace.steps"):
            run_steps(steps, 6)
        assert steps.counters["warnings"] >= 1
        assert any("recent memory at" in r.message for r in caplog.records)

    def test_summary_over_its_budget_becomes_a_summary_of_summaries(self, small_memory: Memory) -> None:
        steps = step_memory(small_memory)
        run_steps(steps, 60)
        state = steps.state
        assert state.counters["summary_compactions"] >= 1
        first = state.summary[0]
        assert first.raw.startswith("memory_snapshot_summary_step_")
        assert first.first_step == 1
        snap = steps.records.get(first.raw)
        assert snap.description.startswith("Pre-summarization snapshot of summary memory at step")
        assert "memory_snapshot_recent_step_" in snap.body  # the older pointers are inside


class TestRestart:
    def test_tiers_counters_checkpoint_and_summary_lines_survive_a_reopen(self, tmp_path: Path) -> None:
        path = tmp_path / "ws"
        with Memory.open(path, embed={"provider": "none"}, steps=SMALL) as mem:
            s = mem.session("trip", user="u1")
            steps = wiring.step_memory(s)
            run_steps(steps, 9)
            steps.begin("still pending")
            steps.checkpoint(key_info="booking ZFA04Y keeps seat 12A", related_sop="rebooking_sop")
            steps.note_reply("done <summary>booked HAT136</summary>")
            before = (steps.state.to_json(), steps.summary_lines, steps.tiers.version)
        with Memory.open(path, embed={"provider": "none"}, steps=SMALL) as mem:
            again = mem.session("trip", user="u1").steps
            assert (again.state.to_json(), again.summary_lines, again.tiers.version) == before
            sid = again.state.pending[0].step
            again.evaluate(sid, "success")  # work continues where it stopped
            assert again.state.next_step == before[0]["next_step"]

    def test_a_second_writer_with_a_stale_view_does_not_overwrite(self, small_memory: Memory) -> None:
        s = new_session(small_memory)
        one, two = wiring.step_memory(s), wiring.step_memory(s)
        a = one.begin("from writer one")
        b = two.begin("from writer two")  # two's cache is stale: it reloads and retries
        assert (a, b) == (1, 2)
        assert [p.step for p in one.reload().pending] == [1, 2]


    def test_a_compaction_of_lines_another_handle_compacted_adds_no_second_summary(self, memory: Memory) -> None:
        s = new_session(memory)
        one, two = wiring.step_memory(s), wiring.step_memory(s)
        run_steps(one, 3)  # default budget: nothing compacts by itself
        two.refresh()
        assert two.compact() is not None
        one.compact()  # one's cached view still shows the three lines in recent
        state = one.reload()
        assert len(state.summary) == 1 and state.recent == ()

    def test_a_handle_that_compacts_while_this_one_summarizes_wins_once(self, memory: Memory) -> None:
        s = new_session(memory)
        two = wiring.step_memory(s)
        raced: list[int] = []

        def summarize(messages: object, max_tokens: object) -> str:
            if not raced:  # the same lines are compacted by another handle meanwhile
                raced.append(1)
                two.refresh()
                two.compact()
            return "summary: looked up reservations R0000 R0001 R0002"

        one = wiring.step_memory(s, FakeLLM(default=summarize, settings=LLMSettings(max_retries=0)))
        run_steps(one, 3)
        one.compact()
        state = one.reload()
        assert raced and len(state.summary) == 1 and state.recent == ()
        assert [b.first_step for b in state.summary] == [1]


CONCURRENT_CHILD = textwrap.dedent(
    """
    import json, sys
    from mindpalace import Memory

    mem = Memory.open(sys.argv[1], embed={"provider": "none"})
    steps = mem.session("shared", user="u").steps
    print("ready", flush=True)
    sys.stdin.readline()
    done = []
    for i in range(int(sys.argv[2])):
        sid = steps.begin(f"writer {sys.argv[3]} step {i}")
        steps.evaluate(sid, "success")
        done.append(sid)
    print(json.dumps(done), flush=True)
    """
)


def test_concurrent_writer_processes_on_one_session_never_conflict_or_lose_a_step(tmp_path: Path) -> None:
    """Each transition runs on the state re-read inside its write transaction: processes
    writing one session's tiers at once get no ConcurrencyError and every step is kept. (Before,
    a handle retried once on a stale view and raised on a second conflict: with 6 writers × 60
    steps that happened in every run; this small guard does not always reproduce it.)"""
    path, per_writer = tmp_path / "ws", 20
    Memory.open(path, embed={"provider": "none"}).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT_CHILD, str(path), str(per_writer), name],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in "abc"
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    outs = [p.communicate("go\n", timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    acked = [sid for out, _ in outs for sid in json.loads(out)]
    assert sorted(acked) == list(range(1, 3 * per_writer + 1))
    with Memory.open(path, embed={"provider": "none"}) as mem:
        steps = mem.session("shared", user="u").steps
        state = steps.state
        kept = {r.step for r in state.recent} | {
            s for b in state.summary for s in range(b.first_step, b.last_step + 1)}
        assert kept == set(acked) and state.pending == ()
        assert steps.records.exists([f"step_{i}" for i in acked]) == {f"step_{i}" for i in acked}


CRASH_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    from mindpalace import Memory
    from mindpalace.testing import wiring
    from mindpalace.testing.fakes import FakeLLM
    from mindpalace.settings import LLMSettings

    path, kill_at_call = sys.argv[1], int(sys.argv[2])
    calls = {"n": 0}

    def summarize(messages, max_tokens):
        calls["n"] += 1
        if calls["n"] == kill_at_call:
            os.kill(os.getpid(), signal.SIGKILL)  # dies after the snapshot, before the tiers
        return "summary of reservations " + " ".join(f"R{i:04d}" for i in range(3))

    mem = Memory.open(path, embed={"provider": "none"}, steps={"budget_tokens": 60, "line_max_chars": 120})
    steps = wiring.step_memory(mem.session("crash", user="u"), FakeLLM(default=summarize, settings=LLMSettings(max_retries=0)))
    for i in range(40):
        sid = steps.begin(f"look up reservation R{i:04d} for passenger number {i}")
        print(json.dumps({"begun": sid}), flush=True)
        steps.evaluate(sid, "success")
        print(json.dumps({"evaluated": sid}), flush=True)
    """
)


@pytest.mark.parametrize("kill_at_call", [1, 3])
def test_kill_9_during_compaction_loses_no_acknowledged_step(tmp_path: Path, kill_at_call: int) -> None:
    path = tmp_path / "ws"
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, str(path), str(kill_at_call)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    acks = [json.loads(line) for line in proc.stdout.splitlines()]
    begun = {a["begun"] for a in acks if "begun" in a}
    evaluated = {a["evaluated"] for a in acks if "evaluated" in a}
    with Memory.open(path, embed={"provider": "none"}, steps=SMALL) as mem:
        steps = mem.session("crash", user="u").steps
        state = steps.state
        in_recent = {r.step for r in state.recent}
        in_summary = {s for b in state.summary for s in range(b.first_step, b.last_step + 1)}
        assert {p.step for p in state.pending} | in_recent | in_summary >= begun
        assert evaluated <= in_recent | in_summary
        assert all(f"step_{i}" in steps.records.exists([f"step_{i}"]) for i in evaluated)
        # the compaction that was killed left its snapshot, and recent still holds its lines
        snaps = steps.records.list(type="snapshot")
        assert snaps
        assert all(r.line in snaps[0].body.splitlines() for r in state.recent if r.step <= snaps[0].step_id)


def test_refresh_sees_a_transition_committed_by_another_handle(small_memory: Memory) -> None:
    s = new_session(small_memory)
    reader, writer = wiring.step_memory(s), wiring.step_memory(s)
    assert reader.state.pending == ()
    writer.begin("written elsewhere")
    assert reader.state.pending == ()  # the cached view
    assert [p.goal for p in reader.refresh().pending] == ["written elsewhere"]


KILL_INSIDE_EVALUATE = textwrap.dedent(
    """
    import os, signal, sys
    from mindpalace import Memory
    from mindpalace.testing import wiring

    mem = Memory.open(sys.argv[1], embed={"provider": "none"})
    steps = wiring.step_memory(mem.session("crash", user="u"))
    for i in range(3):
        steps.evaluate(steps.begin(f"goal {i}"), "success")
    sid = steps.begin("the step being evaluated when the process dies")
    real_put = steps.book.put

    def put_then_die(*args, **kwargs):
        real_put(*args, **kwargs)  # the step record is written inside the transaction ...
        os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the tiers are

    steps.book.put = put_then_die
    steps.evaluate(sid, "success")
    """
)


def test_kill_9_inside_an_evaluation_leaves_the_step_pending_and_no_half_record(tmp_path: Path) -> None:
    path = tmp_path / "ws"
    proc = subprocess.run([sys.executable, "-c", KILL_INSIDE_EVALUATE, str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    with Memory.open(path, embed={"provider": "none"}) as mem:
        steps = mem.session("crash", user="u").steps
        assert [r.step for r in steps.state.recent] == [1, 2, 3]
        assert [p.step for p in steps.state.pending] == [4]
        assert steps.records.exists(["step_3", "step_4"]) == {"step_3"}  # rolled back together
        steps.evaluate(4, "success")  # and the step can still be finished
        assert steps.records.get("step_4").body.startswith("Goal: the step being evaluated")
