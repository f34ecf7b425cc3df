"""Ending a task (``Session.clear_task``) removes its short-term memory — ledger, snapshot, step
tiers, step records and the search documents they were indexed as, working-memory facts — and
keeps the logs and long-term memory (seed 004 checklist 7 and 10); the store does not grow
across finished tasks beyond them (issue 11)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from mindpalace import Memory, NotFoundError, OutcomeUnknownError
from mindpalace.memory import Session
from mindpalace.scope import ANY, Scope


def run_task(s: Session, i: int, task_id: str | None = None) -> None:
    task = s.task if task_id is None else s.tasks(task_id)
    s.add_message({"role": "user", "content": f"task {i}: book the Senso-ji ticket for day {i}"})
    step = s.steps.begin(f"book Senso-ji for day {i}", action="book_ticket(...)")
    with task.tool_call("book_ticket", {"day": i}) as call:
        result = call.result if call.done else call.run(lambda day: {"ticket": f"T-{day}"})
    s.steps.evaluate(step, "success", analysis=f"ticket {result['ticket']}", tool_outputs=[str(result)])
    task.checkpoint(artifacts={"ticket": result["ticket"]}, snapshot=True)
    s.remember(f"trip:note{i % 3}", f"scratch note {i}", importance=0.2)   # working memory only
    s.remember(f"user:visit{i}", f"visited Senso-ji on day {i}", importance=0.9)  # long-term
    s.add_message({"role": "assistant", "content": f"booked ticket {result['ticket']}"})


def fresh_default(mem: Memory) -> dict[str, int]:
    """clear_task() on a session whose default task has no events: still its short-term memory."""
    s = mem.session("no-events", user="u1")
    s.remember("trip:scratch", "draft", importance=0.1)
    return s.clear_task()


def inventory(mem: Memory) -> dict[str, Any]:
    everything = Scope(mem.tenant, ANY, ANY, ANY)
    st = mem.store
    kinds = Counter(d.kind for d in st.iter_documents(everything))
    namespaces = Counter(
        ns for ns in ("facts", "working_memory", "steps", "task_ledger", "task_snapshots",
                      "task_working", "messages", "session")
        for _ in st.kv_list(everything, ns))
    return {"records": len(st.list_records(everything)), "docs": dict(kinds), "kv": dict(namespaces),
            "events": st.stats().events}


class TestClearTask:
    def test_short_term_state_goes_logs_and_long_term_facts_stay(self, tmemory: Memory) -> None:
        s = tmemory.session("trip-1", user="u1")
        run_task(s, 1)
        events_before = tmemory.store.stats().events
        removed = s.clear_task()
        assert removed["ledger_rows"] == 1 and removed["snapshots"] == 1 and removed["records"] >= 1
        assert removed["step_state"] == 1 and removed["working_facts"] >= 1
        inv = inventory(tmemory)
        assert inv["records"] == 0 and set(inv["docs"]) == {"message", "fact"}
        assert inv["kv"] == {"facts": 1, "steps": 1}  # the emptied tiers keep the step numbering
        assert tmemory.store.stats().events == events_before + 1  # the logs are kept; the clear is journaled
        assert s.task.state().artifacts == {"ticket": "T-1"}  # recovered from the log alone
        assert next(h.text for h in s.recall("visited Senso-ji")).endswith("day 1")
        assert all(h.tier != "working" for h in s.recall("scratch note"))
        assert s.steps.index() == [] and s.read_records(["step_1"]).missing == ["step_1"]

    def test_the_session_goes_on_after_its_task_ended(self, tmemory: Memory) -> None:
        s = tmemory.session("trip-2", user="u1")
        run_task(s, 1)
        s.clear_task()
        run_task(s, 2, task_id="second")
        assert s.steps.counters["steps_evaluated"] == 1
        assert s.tasks("second").state().artifacts == {"ticket": "T-2"}

    def test_step_names_are_not_reused_after_a_task_ended(self, tmemory: Memory) -> None:
        # kept logs and summaries name steps: a new task's first step must not be step_1 again
        s = tmemory.session("trip-3", user="u1")
        run_task(s, 1)
        s.clear_task()
        fresh = tmemory.session("trip-3", user="u1")  # another handle, e.g. after a restart
        assert fresh.steps.begin("next task's first step") == 2
        assert s.steps.begin("and from the handle that cleared") == 3

    def test_the_store_does_not_grow_across_100_finished_tasks(self, tmemory: Memory) -> None:
        s = tmemory.session("long", user="u1")
        sizes = []
        for i in range(100):
            run_task(s, i, task_id=f"t{i}")
            s.clear_task(f"t{i}")
            sizes.append(inventory(tmemory))
        last = sizes[-1]
        assert last["records"] == 0 and last["kv"] == {"facts": 100, "steps": 1}  # one fact per task
        assert last["docs"] == {"message": 200, "fact": 100}  # the log's documents and the facts
        # besides the logs and the long-term facts, nothing accumulates
        assert all(inv["records"] == 0 and set(inv["kv"]) == {"facts", "steps"} and inv["kv"]["steps"] == 1
                   for inv in sizes)

    def test_an_unknown_task_id_is_refused_and_nothing_is_removed(self, tmemory: Memory) -> None:
        # new-user finding: clear_task("trp") (a typo of "trip") removed the session's step
        # memory and its working-memory facts — a fact below the importance threshold lives
        # only there, so it was gone for good
        s = tmemory.session("typo", user="u1")
        run_task(s, 1, task_id="trip")
        before = inventory(tmemory)
        with pytest.raises(NotFoundError, match="'trp'"):
            s.clear_task("trp")
        assert inventory(tmemory) == before
        assert s.facts.peek("trip:note1") is not None and s.steps.state.next_step == 2
        assert s.clear_task("trip")["working_facts"] == 2  # the real one still ends
        assert fresh_default(tmemory)["working_facts"] == 1  # the default task needs no events

    def test_a_task_with_an_unsettled_side_effect_is_not_cleared(self, tmemory: Memory) -> None:
        # clearing would drop the ledger's `unknown` row, and the same call would run again:
        # the e-mail the reset connection may already have sent, sent twice (I8)
        s = tmemory.session("mail", user="u1")
        sent: list[str] = []

        def send_email(to: str) -> None:
            sent.append(to)
            raise ConnectionResetError("reset after the request was sent")

        with pytest.raises(ConnectionResetError), s.tool_call("send_email", {"to": "a@b"}) as call:
            call.run(send_email)
        with pytest.raises(OutcomeUnknownError, match="task resolve"):
            s.clear_task()
        assert [e.status for e in s.task.ledger.entries(s.task.id)] == ["unknown"]  # nothing removed
        with pytest.raises(OutcomeUnknownError), s.tool_call("send_email", {"to": "a@b"}) as call:
            call.run(send_email)
        assert sent == ["a@b"]
        key = s.task.ledger.entries(s.task.id)[0].key
        s.task.resolve(key, result={"sent": True})
        assert s.clear_task()["ledger_rows"] == 1  # settled: the task can end
