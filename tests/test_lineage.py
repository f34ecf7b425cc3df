"""Memory lineage (seed 001 §5.3): when written, why kept, when recalled, which prompt — scoped
(I10), recorded by the writing calls only (``Session.context`` stays pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.errors import ValidationError
from mindpalace.lineage import STREAM, Lineage
from mindpalace.replay import load_transcripts, replay
from mindpalace.scope import Scope

FACT = ("trip:request", "Mia Li (user id mia_li_3668) wants a one-way economy flight from New "
        "York to Seattle on May 20; pays with certificates first, then the card ending 7447")


@pytest.fixture
def mem(tmp_path: Path):
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as m:
        yield m


def replayed(mem: Memory, shared_data: Path):
    """τ-bench run 0 replayed through session t1 with a prompt prepared before every model
    call; the agent remembers the booking request once the user has stated it (message 6)."""
    s = mem.session("t1", user="mia", agent="airline")
    runs = load_transcripts(shared_data / "tau-bench" / "gpt-4o-airline.json")

    def remember_request(session) -> None:  # type: ignore[no-untyped-def]
        if session.messages.count() == 6:
            session.remember(*FACT, importance=0.9, source="message:6")

    replay(s, runs[:1], budget_tokens=3_000, on_model_call=remember_request)
    return s


@pytest.mark.integration
def test_a_replayed_tau_bench_run_answers_written_kept_recalled_and_which_prompt(
    mem: Memory, shared_data: Path
) -> None:
    s = replayed(mem, shared_data)
    chain = s.lineage.trace("trip:request")
    types = [e.type for e in chain]
    assert types[:2] == ["written", "promoted"]  # when written, why kept
    written = chain[0]
    assert written.data["source"] == "message:6" and written.data["where"] == "long-term"
    assert "importance 0.9 >= threshold" in written.data["why"]
    fact_id = s.facts.get("trip:request").id
    assert fact_id in written.subjects and s.lineage.trace(fact_id) == chain  # by key or by id
    recalled = next(e for e in chain if e.type == "recalled")  # when recalled: step, rank, score
    hit = next(h for h in recalled.data["hits"] if "trip:request" in h["subjects"])
    assert recalled.step is not None and hit["rank"] >= 1 and hit["score"] > 0
    assert "certificates" in recalled.data["query"]  # the user message it was recalled for
    injected = next(e for e in chain if e.type == "injected")  # which prompt
    assert injected.step == recalled.step and injected.position > recalled.position
    prompt = s.lineage.prompt_at(injected.step)
    assert prompt is not None and prompt.position == injected.position
    blocks = {b["block"]: b["tokens"] for b in prompt.data["blocks"]}
    assert "recalled memory" in blocks
    recalls = s.lineage.prompt_recalls(prompt)  # what the block held: rank, score, why, tokens
    item = next(r for r in recalls if fact_id in r["subjects"])
    assert item["rank"] == hit["rank"] and item["tokens"] > 0 and item["why"]
    assert sum(blocks.values()) == prompt.data["total_tokens"] <= prompt.data["budget_tokens"] == 3_000
    # every step record has its written event with the step it belongs to
    step_1 = s.lineage.trace("step_1")
    assert step_1[0].type == "written" and step_1[0].step == 1


@pytest.mark.integration
def test_trace_and_why_print_the_chain(tmp_path: Path, shared_data: Path) -> None:
    ws = tmp_path / "ws"
    with Memory.open(ws, embed={"provider": "none"}) as m:
        s = replayed(m, shared_data)
        step = next(e.step for e in s.lineage.trace("trip:request") if e.type == "injected")
    run = CliRunner().invoke
    args = ["-w", str(ws), "--user", "mia", "--agent", "airline"]
    out = run(app, ["trace", "trip:request", "-s", "t1", "--json", *args])
    assert out.exit_code == 0, out.output
    assert [e["type"] for e in json.loads(out.output)][:2] == ["written", "promoted"]
    out = run(app, ["why", "t1", "--step", str(step), "--json", *args])
    assert out.exit_code == 0, out.output
    why = {b["block"]: b["why"] for b in json.loads(out.output)["blocks"]}
    assert "recalled" in why["recalled memory"] and why["system prompt"]
    out = run(app, ["why", "t1", "--step", str(step), *args])  # the tables a person reads
    assert out.exit_code == 0 and "recalled memory" in out.output and "trip:request" in out.output
    out = run(app, ["why", "t1", "--step", "9999", *args])
    assert out.exit_code == 1 and "9999" in str(out.exception)


def test_context_writes_nothing_and_prepare_records_one_prompt(mem: Memory) -> None:
    s = mem.session("c1", user="u1")
    s.add_message({"role": "user", "content": "I live in Lisbon and love trams"})
    s.remember("user:city", "Lisbon", importance=0.9)
    before = mem.store.stats()
    version = mem.store.stream_version(s.scope, STREAM)
    s.context(query="which city")
    s.context()
    after = mem.store.stats()
    assert (after.events, after.kv_entries, after.records, after.documents) == (
        before.events, before.kv_entries, before.records, before.documents)
    assert mem.store.stream_version(s.scope, STREAM) == version
    s.prepare(query="which city")
    types = [e.type for e in s.lineage.events()][-2:]
    assert types == ["recalled", "injected"]


def test_superseded_tombstoned_and_disabled(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
        s = mem.session("s", user="u")
        s.remember("user:city", "Lisbon", importance=0.9)
        second = s.remember("user:city", "Porto", importance=0.9).fact
        s.forget("user:city")
        types = [e.type for e in s.lineage.trace("user:city")]
        assert types == ["written", "promoted", "written", "promoted", "superseded", "tombstoned"]
        superseded = s.lineage.trace("user:city")[4]
        assert superseded.data["by"] == second.id and second.id not in superseded.subjects
    with Memory.open(tmp_path / "ws2", embed={"provider": "none"}, lineage={"enabled": False}) as mem:
        s = mem.session("s", user="u")
        s.remember("user:city", "Lisbon", importance=0.9)
        s.recall("Lisbon")
        assert s.lineage.events() == [] and mem.store.stream_version(s.scope, STREAM) == 0


def test_an_unknown_event_type_or_empty_subject_is_refused(mem: Memory) -> None:
    lineage = Lineage(mem.store, Scope("t", "u", "a", "s"))
    with pytest.raises(ValidationError, match="unknown lineage event type"):
        lineage.record("deleted", ["x"])
    with pytest.raises(ValidationError, match="trace needs"):
        lineage.trace("  ")
    assert lineage.events() == []


ids = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6)


def readable_by(writer: Scope, reader: Scope) -> bool:
    """Who may read a lineage event (I10): the same tenant, user and agent (any session), or —
    for a knowledge scope's events (user-only or agent-only, no session) — its user's / agent's
    sessions."""
    if writer.tenant != reader.tenant:
        return False
    if (writer.user, writer.agent) == (reader.user, reader.agent):
        return True
    return writer.session == "" and (writer.user, writer.agent) in {(reader.user, ""), ("", reader.agent)}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=st.tuples(ids.filter(bool), ids, ids, ids), b=st.tuples(ids.filter(bool), ids, ids, ids))
def test_a_trace_never_reads_another_scope(mem: Memory, a: tuple[str, ...], b: tuple[str, ...]) -> None:
    """I10: whatever ids either side picks, a trace returns exactly the events its scope may
    read — never another tenant's, user's or agent's."""
    sa, sb = Scope(*a), Scope(*b)
    Lineage(mem.store, sa).record("written", ["k:x"], writer=list(a))
    for e in Lineage(mem.store, sb).trace("k:x"):
        assert readable_by(Scope(*e.data["writer"]), sb), (e.data["writer"], b)
        assert e.scope == Scope(*e.data["writer"])
    seen = [tuple(e.data["writer"]) for e in Lineage(mem.store, sb).trace("k:x")]
    assert (tuple(a) in seen) == readable_by(sa, sb)


def test_compaction_and_archiving_are_recorded_with_their_snapshot(mem: Memory) -> None:
    s = mem.session("long", user="u")
    for i in range(30):
        s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                       "content": f"message {i}: the Kyoto temples and the night train"})
    outcome = s.compact()
    assert outcome.result is not None and outcome.result.entries > 0
    summarized = [e for e in s.lineage.events() if e.type == "summarized"]
    last = outcome.result.last_consolidated
    assert [e.data["snapshot"] for e in summarized] == [
        f"message:{last - outcome.result.archived_messages + 1}-{last}"]
    archived = s.archive()
    events = s.lineage.trace(f"archive:{s.id}")
    assert archived.appended > 0 and [e.type for e in events] == ["archived"]
    assert events[0].data["through"] == f"message:{archived.through}"
