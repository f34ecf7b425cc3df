"""The agent loop end to end: the real OpenAI client against the loopback stub server playing a
scripted model, on a real workspace (SQLite store, step memory, task log, ledger)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mindpalace import Memory
from mindpalace.agent import Agent, Tool, agent_llm, tool
from mindpalace.errors import (
    ConfigError,
    ContextBudgetError,
    EffectNotApplied,
    InvalidTextError,
    ProviderError,
    ValidationError,
)
from mindpalace.session.lease import SessionBusyError
from mindpalace.tasks import NOT_RUN
from mindpalace.testing.openai_stub import StubServer, api_error, chat, serve_stub, tool_call

BOOK = {"place": "Senso-ji", "date": "2025-05-20"}
CHILD = Path(__file__).with_name("agent_child.py")


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with serve_stub() as server:
        yield server


@pytest.fixture
def mem(tmp_path: Path, stub: StubServer) -> Iterator[Memory]:
    m = Memory.open(tmp_path / "ws", embed={"provider": "hashing"}, llm={"max_retries": 0},
                    agent={"base_url": stub.url, "api_key": "test-key", "model": "stub"})
    try:
        yield m
    finally:
        m.close()


@pytest.fixture
def effects() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def book_ticket(effects: list[dict[str, Any]]) -> Tool:
    @tool(side_effect=True)
    def book_ticket(place: str, date: str, quantity: int = 1) -> dict[str, Any]:
        """Book entry tickets (a side effect: each run is one more booking).

        Args:
            place: the attraction.
            date: the visit date, YYYY-MM-DD.
            quantity: tickets to book.
        """
        effects.append({"place": place, "date": date, "quantity": quantity})
        return {"booking_id": f"TK{len(effects):03d}", "quantity": quantity}

    return book_ticket


def lookup_code(door: str) -> str:
    """Look up the entry code of a door."""
    return f"the code of door {door} is 4711"


def agent_for(mem: Memory, tools: list[Any], session: str = "trip", **settings: Any) -> Agent:
    config = mem.settings.agent.model_copy(update=settings)
    return Agent(mem.session(session, user="u1"), tools, settings=config)


def sent(stub: StubServer, i: int) -> list[dict[str, Any]]:
    """The messages of the i-th request the stub received."""
    return list(stub.requests[i]["json"]["messages"])


def tool_results(stub: StubServer, i: int) -> dict[str, str]:
    """{tool_call_id: content} of the real (not memory) tool messages of request i."""
    return {m["tool_call_id"]: m["content"] for m in sent(stub, i)
            if m["role"] == "tool" and not m["tool_call_id"].startswith("mp-memory-")}


def text_of(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def assert_within_budget(mem: Memory, stub: StubServer, budget: int) -> None:
    for req in stub.requests:
        body = req["json"]
        assert mem.tokens.count_messages(body["messages"], body.get("tools")) <= budget


class TestToolCalls:
    def test_a_side_effect_runs_once_through_the_ledger_even_when_the_model_repeats_it(
        self, mem, stub, effects, book_ticket
    ):
        stub.script(
            chat("<summary>booking</summary>", tool_calls=[tool_call("book_ticket", BOOK, id="c1")]),
            chat(None, tool_calls=[tool_call("book_ticket", BOOK, id="c2")]),  # seed 004: forgot it
            chat("Booked TK001. <summary>booked Senso-ji TK001</summary>"),
        )
        with agent_for(mem, [book_ticket]) as agent:
            turn = agent.run("Book Senso-ji for 2025-05-20")
        assert turn.reply == "Booked TK001." and turn.stopped == "reply"
        assert effects == [{**BOOK, "quantity": 1}]
        assert [c.status for c in turn.tool_calls] == ["ok", "replayed"]
        results = tool_results(stub, 2)
        assert json.loads(results["c1"])["booking_id"] == "TK001"
        assert "not run again" in results["c2"] and "TK001" in results["c2"]
        s = mem.session("trip", user="u1")
        [entry] = s.task.ledger_entries()
        assert (entry.tool, entry.status, entry.attempt) == ("book_ticket", "completed", 1)
        assert s.task.state().steps_finished == 1 and s.task.state().current is None
        # each call is a step: pending → evaluated, a record the index lists
        assert [r.name for r in s.steps.records.list()] == ["step_2", "step_1"]
        assert "TK001" in s.read_records(["step_1"]).found["step_1"].body

    def test_the_schema_sent_is_derived_from_the_type_hints(self, mem, stub, book_ticket):
        stub.script(chat("Hi <summary>greeted</summary>"))
        with agent_for(mem, [book_ticket, lookup_code]) as agent:
            agent.run("hello")
        tools = {t["function"]["name"]: t["function"] for t in stub.requests[0]["json"]["tools"]}
        assert set(tools) == {"book_ticket", "lookup_code", "update_working_checkpoint"}
        params = tools["book_ticket"]["parameters"]
        assert params["required"] == ["place", "date"]
        assert params["properties"]["quantity"] == {"default": 1, "title": "Quantity", "type": "integer",
                                                    "description": "tickets to book."}
        assert tools["lookup_code"]["description"] == "Look up the entry code of a door."


class TestGuardRefusal:
    def test_a_guard_blocks_the_call_the_tool_never_runs_and_the_model_gets_the_refusal(
        self, mem, stub, effects, book_ticket
    ):
        s = mem.session("trip", user="u1")
        s.constraints.set("max_tickets", 2, source="user")
        s.constraints.guard("book_ticket", "quantity <= max_tickets")
        stub.script(
            chat(None, tool_calls=[tool_call("book_ticket", {**BOOK, "quantity": 5}, id="c1")]),
            chat("I may book at most 2 tickets. <summary>refused: over max_tickets</summary>"),
        )
        with agent_for(mem, [book_ticket]) as agent:
            turn = agent.run("Book 5 tickets for Senso-ji")
        assert effects == []
        assert turn.tool_calls[0].status == "refused"
        refusal = tool_results(stub, 1)["c1"]
        assert refusal.startswith("refused:") and "quantity <= max_tickets" in refusal
        assert "Protected constraints" in text_of(sent(stub, 0)) and "max_tickets = 2" in text_of(sent(stub, 0))
        state = s.task.state()
        assert state.refusals == 1 and state.calls["started"] == 0  # never in the ledger
        assert turn.reply.startswith("I may book at most 2")


class TestBadArguments:
    def test_bad_tool_calls_become_tool_result_errors_the_model_sees(self, mem, stub, effects, book_ticket):
        calls = [
            tool_call("book_ticket", '{"place": "Senso-ji", "date": ', id="truncated"),
            tool_call("book_ticket", {**BOOK, "quantity": "many"}, id="wrong-type"),
            tool_call("book_ticket", {"place": "Senso-ji"}, id="missing"),
            tool_call("book_ticket", {**BOOK, "seat": "12A"}, id="extra"),
            tool_call("book_ticket", '{"place": "x", "date": "y", "quantity": NaN}', id="nan"),
            tool_call("book_ticket", '["Senso-ji"]', id="not-an-object"),
            tool_call("cancel_everything", {}, id="no-such-tool"),
        ]
        stub.script(chat(None, tool_calls=calls), chat("Sorry. <summary>bad calls</summary>"))
        with agent_for(mem, [book_ticket]) as agent:
            turn = agent.run("Book Senso-ji")
        assert effects == [] and turn.stopped == "reply"
        statuses = {c.call_id: c.status for c in turn.tool_calls}
        assert statuses == {**dict.fromkeys(["truncated", "wrong-type", "missing", "extra", "nan",
                                             "not-an-object"], "invalid"), "no-such-tool": "unknown_tool"}
        results = tool_results(stub, 1)
        assert "Invalid JSON" in results["truncated"]
        assert "quantity" in results["wrong-type"] and "'many'" in results["wrong-type"]
        assert "date: Field required" in results["missing"]
        assert "seat" in results["extra"] and "Extra inputs" in results["extra"]
        assert "quantity" in results["nan"]
        assert "object" in results["not-an-object"]
        assert "no tool 'cancel_everything'" in results["no-such-tool"]
        assert all("did not run" in results[k] for k in statuses if k != "no-such-tool")
        assert mem.session("trip", user="u1").task.ledger_entries() == []

    def test_oversized_arguments_are_refused_unparsed(self, mem, stub, effects, book_ticket):
        huge = json.dumps({**BOOK, "place": "x" * 5_000})
        stub.script(chat(None, tool_calls=[tool_call("book_ticket", huge, id="c1")]), chat("ok <summary>s</summary>"))
        with agent_for(mem, [book_ticket], tool_arguments_max_chars=1_000) as agent:
            turn = agent.run("Book")
        assert effects == [] and turn.tool_calls[0].status == "invalid"
        assert "over the limit of 1000" in tool_results(stub, 1)["c1"]


class TestToolFailures:
    def test_failures_are_tool_results_and_only_a_proven_non_effect_may_run_again(self, mem, stub):
        attempts: list[str] = []

        @tool(side_effect=True)
        def pay(amount: int) -> str:
            """Pay an amount."""
            attempts.append(f"pay {amount}")
            if amount == 1:
                raise EffectNotApplied("card declined before charging")
            raise ConnectionResetError("connection reset after the request was sent")

        def flaky(x: int) -> str:
            """A read-only tool that fails."""
            raise RuntimeError("index offline")

        stub.script(
            chat(None, tool_calls=[tool_call("pay", {"amount": 1}, id="declined"),
                                   tool_call("pay", {"amount": 2}, id="reset"),
                                   tool_call("flaky", {"x": 1}, id="ro")]),
            chat(None, tool_calls=[tool_call("pay", {"amount": 1}, id="declined-again"),
                                   tool_call("pay", {"amount": 2}, id="reset-again")]),
            chat("Payment unclear. <summary>one declined, one unknown</summary>"),
        )
        with agent_for(mem, [pay, flaky]) as agent:
            turn = agent.run("Pay")
        assert [(c.call_id, c.status) for c in turn.tool_calls] == [
            ("declined", "error"), ("reset", "unknown"), ("ro", "error"),
            ("declined-again", "error"), ("reset-again", "unknown")]
        assert attempts == ["pay 1", "pay 2", "pay 1"]  # the unknown outcome never ran again
        first, second = tool_results(stub, 1), tool_results(stub, 2)
        assert "did not take effect" in first["declined"] and "may be tried again" in first["declined"]
        assert "outcome unknown" in first["reset"] and "ConnectionResetError" in first["reset"]
        assert "RuntimeError: index offline" in first["ro"]
        assert "outcome unknown, not run again" in second["reset-again"]
        assert len(turn.unknown_calls) == 1 and turn.unknown_calls[0].startswith("pay:")


class TestLedgerOptions:
    def test_a_reconcile_hook_settles_an_unknown_outcome_and_a_key_names_the_call(self, mem, stub):
        charged: dict[str, int] = {}

        def reconcile(entry: Any) -> Any:  # asks the payment system by the call's key
            ref = entry.args["ref"]
            return {"charged": charged[ref]} if ref in charged else NOT_RUN

        @tool(side_effect=True, key=lambda args: args["ref"], reconcile=reconcile)
        def pay(ref: str, amount: int) -> dict[str, int]:
            """Charge an amount once per payment reference."""
            charged[ref] = charged.get(ref, 0) + amount
            if len(charged) == 1 and charged[ref] == amount:
                raise ConnectionResetError("reset after the charge went through")
            return {"charged": charged[ref]}

        stub.script(
            chat(None, tool_calls=[tool_call("pay", {"ref": "hotel-1", "amount": 100}, id="a")]),
            chat(None, tool_calls=[tool_call("pay", {"ref": "hotel-1", "amount": 120}, id="b")]),
            chat("Paid. <summary>paid hotel-1</summary>"),
        )
        with agent_for(mem, [pay]) as agent:
            turn = agent.run("Pay the hotel")
        assert [c.status for c in turn.tool_calls] == ["unknown", "replayed"]
        assert charged == {"hotel-1": 100}  # the key made the second call the same call
        assert '"charged": 100' in tool_results(stub, 2)["b"]
        [entry] = mem.session("trip", user="u1").task.ledger_entries()
        assert (entry.key, entry.status, entry.reconciled) == ("pay:hotel-1", "completed", True)


class TestToolNames:
    def test_a_tool_named_like_the_memory_blocks_call_is_refused(self, mem, stub):
        # new-user finding: with memory_role = "tool" every prompt holds an assistant call to
        # a tool named "memory" (the memory blocks); a user tool of that name was accepted, so
        # the model saw its own "memory" calls with the wrong arguments and could run the
        # user's function with {"block": …}
        def memory(query: str) -> str:
            """Search my notes."""
            return "notes"

        with pytest.raises(ValidationError, match=r"'memory'.*memory_role"):
            agent_for(mem, [memory])
        s = mem.session("trip", user="u1")
        assert s.messages.count() == 0 and stub.requests == []
        with Memory.open(mem.workspace.root, embed={"provider": "hashing"}, context={"memory_role": "user"},
                         agent={"base_url": stub.url, "api_key": "k", "model": "stub"}) as other:
            Agent(other.session("trip", user="u1"), [memory]).close()  # no such call in its prompts


class TestInput:
    @pytest.mark.parametrize("message", ["", "   ", "a\x00b", "lone \ud800 surrogate"])
    def test_an_unusable_message_is_refused_before_anything_is_stored(self, mem, stub, message):
        with agent_for(mem, []) as agent, pytest.raises(InvalidTextError):
            agent.run(message)
        s = mem.session("trip", user="u1")
        assert s.messages.count() == 0 and s.task.version == 0 and stub.requests == []

    def test_a_message_the_budget_cannot_show_is_refused_before_anything_is_stored(self, mem, stub):
        # new-user finding: the message was stored and its step started, then every prepare
        # refused the budget — the open turn was resumed first on each later run, so the
        # session answered nothing again until the budget was raised
        stub.script(chat("short answer <summary>s</summary>"))
        with agent_for(mem, [], budget_tokens=520) as agent:
            with pytest.raises(ContextBudgetError, match="newest user message"):
                agent.run("please summarise this: " + "lorem ipsum dolor sit amet " * 400)
            s = mem.session("trip", user="u1")
            assert s.messages.count() == 0 and s.task.version == 0 and stub.requests == []
            assert agent.run("short question").reply == "short answer"

    def test_a_session_with_a_turn_in_flight_elsewhere_is_refused(self, mem, stub):
        s = mem.session("trip", user="u1")
        with s.lease(holder="another agent"), agent_for(mem, []) as agent, \
                pytest.raises(SessionBusyError, match="another agent"):
            agent.run("hello")
        assert stub.requests == [] and s.messages.count() == 0


class TestReadFiles:
    def test_a_read_files_request_loads_the_record_and_reinvokes_the_model(self, mem, stub):
        stub.script(
            chat(None, tool_calls=[tool_call("lookup_code", {"door": "A"}, id="c1")]),
            chat("Noted. <summary>looked up door A</summary>"),
            chat('{"read_files": {"files": ["step_1", "step_99"]}}'),
            chat("The code is 4711. <summary>read step_1: code 4711</summary>"),
        )
        with agent_for(mem, [lookup_code]) as agent:
            agent.run("Look up the code of door A")
            turn = agent.run("What was the code of door A again?")
        assert turn.reply == "The code is 4711."
        assert turn.read_files == ["step_1"] and turn.missing_files == ["step_99"]
        assert turn.model_calls == 2
        first, again = sent(stub, 2), sent(stub, 3)
        assert "- step_1 (step, step 1)" in text_of(first)  # the memory index
        assert again[-2] == {"role": "assistant", "content": '{"read_files": {"files": ["step_1", "step_99"]}}'}
        assert again[-1]["role"] == "user" and "the code of door A is 4711" in again[-1]["content"]
        assert "Not found: step_99" in again[-1]["content"]
        # the recall exchange is not stored: the conversation holds the final answer only
        stored = [m.message for m in mem.session("trip", user="u1").messages.list()]
        assert stored[-1]["content"].startswith("The code is 4711.")
        assert not any("read_files" in str(m.get("content")) for m in stored)

    def test_reinvocations_stop_at_the_cap(self, mem, stub):
        mem.session("trip", user="u1").steps.add_info("user_profile", "prefers window seats",
                                                       description="the user's seat preference")
        stub.script(chat('{"read_files": {"files": ["user_profile"]}}'))  # repeats forever
        with Memory.open(mem.workspace.root, steps={"max_read_files_reinvocations": 2},
                         embed={"provider": "hashing"}, agent={"base_url": stub.url, "model": "stub"}) as capped, \
                agent_for(capped, []) as agent:
            turn = agent.run("Which seat?")
        assert turn.model_calls == 3 and len(stub.requests) == 3
        assert turn.read_files == ["user_profile", "user_profile"]


class TestSummaryAndCheckpoint:
    def test_summary_lines_and_the_working_checkpoint_reach_the_next_prompt(self, mem, stub):
        stub.script(
            chat("<summary>saving the door code</summary>",
                 tool_calls=[tool_call("update_working_checkpoint", {"key_info": "door A code 4711"}, id="c1")]),
            chat("Saved. <summary>checkpoint holds the code</summary>"),
        )
        with agent_for(mem, []) as agent:
            turn = agent.run("Remember: door A has code 4711")
        assert turn.summaries == ["saving the door code", "checkpoint holds the code"]
        second = text_of(sent(stub, 1))
        assert "<key_info>door A code 4711</key_info>" in second
        assert "[Agent] saving the door code" in second
        assert "checkpoint holds the code" in mem.session("trip", user="u1").steps.summary_lines[-1]


class TestCorrections:
    def test_a_user_correction_is_at_the_top_of_the_next_prompt(self, mem, stub, effects, book_ticket):
        stub.script(chat("Planned for one. <summary>plan 1 ticket</summary>"),
                    chat("Now for two. <summary>plan 2 tickets</summary>"))
        with agent_for(mem, [book_ticket]) as agent:
            agent.run("Plan Senso-ji for me")
            agent.correct("We are two people, not one", party_size=2)
            agent.run("Go on")
        before, after = sent(stub, 0), sent(stub, 1)
        assert "We are two people" not in text_of(before)
        assert after[0]["role"] == "system" and "We are two people, not one" in after[0]["content"]
        assert mem.session("trip", user="u1").constraints.get("party_size") == 2
        assert "party_size = 2" in text_of(after)


class TestBudget:
    def test_no_prompt_the_model_receives_exceeds_the_budget(self, mem, stub):
        def fetch_page(n: int) -> str:
            """Fetch page n of the guide book."""
            return f"page {n}: " + " ".join(f"Temple{n}-{i} opens at {6 + i % 5}:00." for i in range(120))

        budget = 2_000
        replies = []
        for n in range(4):
            replies += [chat(None, tool_calls=[tool_call("fetch_page", {"n": n}, id=f"c{n}")]),
                        chat(f"Read page {n}. <summary>page {n} read</summary>")]
        stub.script(*replies, chat('{"read_files": {"files": ["step_1", "step_2", "step_3"]}}'),
                    chat("Done. <summary>done</summary>"))
        with agent_for(mem, [fetch_page], budget_tokens=budget) as agent:
            turns = [agent.run(f"Read page {n}") for n in range(4)]
            last = agent.run("Summarize pages 0 to 2")
        assert len(stub.requests) == 10
        assert_within_budget(mem, stub, budget)
        assert all(t <= budget for t in [*last.prompt_tokens, *(p for t in turns for p in t.prompt_tokens)])
        stored = [m.message for m in mem.session("trip", user="u1").messages.list()]
        assert mem.tokens.count_messages(stored) > 2 * budget  # the budget was binding
        assert last.read_files  # records were loaded (cut to fit if needed) within the budget


class TestStops:
    def test_max_iterations_closes_the_turn(self, mem, stub):
        stub.script(chat(None, tool_calls=[tool_call("lookup_code", {"door": "A"}, id="c")]))  # forever
        with agent_for(mem, [lookup_code], max_iterations=2) as agent:
            turn = agent.run("loop")
            assert turn.stopped == "max_iterations" and turn.model_calls == 2 and turn.reply == ""
            assert len(turn.tool_calls) == 2  # the last call's result is stored: pairing holds
            assert agent.resume() is None
        state = mem.session("trip", user="u1").task.state()
        assert state.current is None and state.last_output == {"stopped": "max_iterations"}

    def test_a_model_failure_leaves_the_turn_unfinished_and_resume_continues_it(self, mem, stub):
        stub.script(api_error(400, "bad request"))
        with agent_for(mem, []) as agent:
            with pytest.raises(ProviderError, match="HTTP 400"):
                agent.run("hello")
            s = mem.session("trip", user="u1")
            assert s.task.resume().next_step is not None
            stub.script(chat("Hello! <summary>greeted</summary>"))
            turn = agent.resume()
        assert turn is not None and turn.resumed and turn.reply == "Hello!"
        assert s.task.resume().next_step is None
        assert [m.message["role"] for m in s.messages.list()] == ["user", "assistant"]


class TestConfiguration:
    def test_the_endpoint_key_and_model_come_from_the_environment_when_settings_leave_them_unset(
        self, tmp_path, stub, monkeypatch
    ):
        monkeypatch.setenv("OPENAI_BASE_URL", stub.url)
        monkeypatch.setenv("OPENAI_API_KEY", "env-key")
        monkeypatch.setenv("OPENAI_MODEL", "env-model")
        stub.script(chat("Hi <summary>hi</summary>"))
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as m, \
                Agent(m.session("s")) as agent:
            agent.run("hello")
        [req] = stub.requests
        assert req["auth"] == "Bearer env-key" and req["json"]["model"] == "env-model"

    def test_settings_win_over_the_environment(self, tmp_path, stub, monkeypatch):
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
        monkeypatch.setenv("OPENAI_MODEL", "env-model")
        with Memory.open(tmp_path / "ws", agent={"base_url": stub.url, "model": "mine"}) as m:
            llm = agent_llm(m.settings, m.tokens)
        assert llm.model == "mine" and str(llm.client.base_url).rstrip("/") == stub.url  # type: ignore[attr-defined]
        llm.close()

    def test_no_endpoint_and_no_key_is_a_config_error_naming_the_setting(self, tmp_path, monkeypatch):
        for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        with Memory.open(tmp_path / "ws") as m, pytest.raises(ConfigError, match=r"agent\.base_url"):
            Agent(m.session("s"))


def child(ws: Path, stub: StubServer, effects: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(ws), "--session", "trip", "--base-url", stub.url,
         "--effects", str(effects), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def kill_when_parked(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the child once it reports (through its stdout pipe) that it is parked in a tool."""
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "PARKED"
    proc.kill()
    proc.communicate()  # reaps it (its lease's pid is then dead) and closes the pipes
    assert proc.returncode == -9


def finish(proc: subprocess.Popen[str]) -> Any:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    [line] = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


class TestKillAndResume:
    def test_after_a_kill_the_completed_side_effect_is_not_repeated_and_the_turn_finishes(
        self, tmp_path, stub
    ):
        ws, effects = tmp_path / "ws", tmp_path / "effects.txt"
        stub.script(
            chat("<summary>booking, then waiting</summary>", tool_calls=[
                tool_call("book_ticket", BOOK, id="c1"), tool_call("wait_for_operator", {}, id="c2")]),
            chat("Booked TK001 and confirmed. <summary>done</summary>"),
        )
        kill_when_parked(child(ws, stub, effects, "--park-in", "wait", "--message", "Book Senso-ji"))
        assert effects.read_text().splitlines() == ["Senso-ji 2025-05-20"] and len(stub.requests) == 1

        result = finish(child(ws, stub, effects))  # a fresh process: resume
        assert effects.read_text().splitlines() == ["Senso-ji 2025-05-20"]  # exactly once
        assert result["resumed"] and result["reply"] == "Booked TK001 and confirmed."
        assert [(c["name"], c["status"]) for c in result["tool_calls"]] == [
            ("book_ticket", "replayed"), ("wait_for_operator", "ok")]
        results = tool_results(stub, 1)
        assert "TK001" in results["c1"] and "not run again" in results["c1"]
        with Memory.open(ws, embed={"provider": "hashing"}) as mem:
            s = mem.session("trip", user="u1")
            assert s.task.resume().next_step is None and s.task.state().steps_finished == 1
            [entry] = s.task.ledger_entries()
            assert (entry.status, entry.attempt) == ("completed", 1)
            assert s.steps.state.pending == ()  # the step parked at the kill was swept

    def test_an_unknown_outcome_is_surfaced_not_rerun(self, tmp_path, stub):
        ws, effects = tmp_path / "ws", tmp_path / "effects.txt"
        stub.script(
            chat(None, tool_calls=[tool_call("book_ticket", BOOK, id="c1")]),
            chat("The booking may or may not have gone through; please check. <summary>unknown</summary>"),
        )
        kill_when_parked(child(ws, stub, effects, "--park-in", "book", "--message", "Book Senso-ji"))
        with Memory.open(ws, embed={"provider": "hashing"}) as mem:
            unknown = mem.session("trip", user="u1").task.resume().unknown_calls
        assert len(unknown) == 1

        result = finish(child(ws, stub, effects, "--park-in", "book"))  # would park again if re-run
        assert effects.read_text().splitlines() == ["Senso-ji 2025-05-20"]
        assert result["tool_calls"][0]["status"] == "unknown" and result["unknown_calls"] == unknown
        assert "outcome unknown" in tool_results(stub, 1)["c1"]
        with Memory.open(ws, embed={"provider": "hashing"}) as mem:
            s = mem.session("trip", user="u1")
            assert s.task.resume().next_step is None
            [entry] = s.task.ledger_entries()
            assert entry.status == "started" and entry.attempt == 1
