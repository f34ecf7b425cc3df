"""Every component is built from a store and fakes alone — no workspace folder, no facade.

This is what constructor injection buys (DESIGN.md §2): each test below builds one component
from exactly what it uses and checks one behaviour through it, and afterwards the folder holds
only the database (and, for consolidation, the history log and its lock): no mindpalace.toml,
no knowledge/ repository.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mindpalace.blocks import Block, Message
from mindpalace.context import ContextBuilder, ContextSources
from mindpalace.facts import FactMemory, Recall
from mindpalace.history import HistoryLog
from mindpalace.retrieval.hybrid import HybridRetriever
from mindpalace.scope import ANY, Scope
from mindpalace.session.autocompact import AutoCompact
from mindpalace.session.consolidator import Consolidator
from mindpalace.session.messages import MessageLog
from mindpalace.settings import LLMSettings, SessionSettings, StepSettings
from mindpalace.steps import StepMemory
from mindpalace.store import SQLiteStore
from mindpalace.summary import Summarizer
from mindpalace.tasks import Tasks
from mindpalace.testing.fakes import FakeLLM
from mindpalace.timeutil import utcnow
from mindpalace.tokens import get_counter

COUNTER = get_counter("o200k_base")
SCOPE = Scope("t", "u", "a", "s1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    st = SQLiteStore(tmp_path / "only.db")
    yield st
    st.close()
    assert not (tmp_path / "mindpalace.toml").exists() and not (tmp_path / "knowledge").exists()


def summarizer(llm: FakeLLM | None = None) -> Summarizer:
    return Summarizer(llm or FakeLLM(settings=LLMSettings(max_retries=0)), COUNTER)


def consolidator(store: SQLiteStore, tmp_path: Path, llm: FakeLLM | None = None,
                 window: int = 600) -> Consolidator:
    settings = SessionSettings(context_window_tokens=window, max_completion_tokens=100,
                               safety_buffer_tokens=0)
    return Consolidator(store, SCOPE, history=HistoryLog(tmp_path / "history"), counter=COUNTER,
                        summarizer=summarizer(llm), settings=settings)


def chat(store: SQLiteStore, n: int, at: datetime | None = None) -> None:
    log = MessageLog(store, SCOPE)
    for i in range(n):
        log.add({"role": "user" if i % 2 == 0 else "assistant",
                 "content": f"turn {i}: flight UA{100 + i} to Tokyo " * 4}, timestamp=at)


class TestStepMemory:
    def test_compacts_with_the_injected_summarizer(self, store: SQLiteStore) -> None:
        llm = FakeLLM(settings=LLMSettings(max_retries=0))
        steps = StepMemory(store, SCOPE, counter=COUNTER, summarizer=summarizer(llm),
                           settings=StepSettings(budget_tokens=60))
        for i in range(8):
            steps.evaluate(steps.begin(f"look up reservation R{i:04d} for passenger {i}"), "success")
        assert llm.calls > 0 and steps.state.summary
        assert steps.read_records(["step_1"]).found  # the raw record stays readable by name


class TestConsolidator:
    def test_archives_into_the_injected_history(self, store: SQLiteStore, tmp_path: Path) -> None:
        chat(store, 30)
        c = consolidator(store, tmp_path)
        r = c.maybe_consolidate()
        assert r.consolidated and c.last_consolidated > 0
        assert c.history.read(session=SCOPE)[0].messages == (1, c.last_consolidated)
        assert r.prompt_tokens_after <= c.budget_tokens


class TestAutoCompact:
    def test_compacts_an_idle_session_through_the_given_consolidator(
        self, store: SQLiteStore, tmp_path: Path
    ) -> None:
        t0 = utcnow() - timedelta(hours=2)
        chat(store, 12, at=t0)
        c = consolidator(store, tmp_path, window=100_000)
        ac = AutoCompact(store, lambda scope: c, settings=c.settings, clock=utcnow)
        assert ac.sessions(Scope("t", ANY, ANY, ANY)) == [SCOPE]
        assert ac.compact(SCOPE).status == "compacted" and c.last_consolidated > 0


class FakeSources:
    """A ContextSources with fixed blocks and messages: the builder needs no store at all."""

    def __init__(self, blocks: Mapping[Block, str], messages: list[Message]) -> None:
        self.blocks, self.messages = dict(blocks), messages

    def memory_blocks(self) -> Mapping[Block, str]:
        return self.blocks

    def system_message(self) -> Message | None:
        return None

    def message_range(self) -> tuple[int, int]:
        return 1, len(self.messages)

    def read_messages(self, first: int, last: int) -> list[Message]:
        return self.messages[first - 1:last]


class TestContextBuilder:
    def test_builds_from_any_sources(self) -> None:
        sources: ContextSources = FakeSources(
            {Block.CONSTRAINTS: "budget_per_night_cny = 2000", Block.RECENT_STEPS: "Recent steps:\n" + "x " * 400},
            [{"role": "user", "content": f"question {i} " * 20} for i in range(20)],
        )
        built = ContextBuilder(sources, COUNTER).build(300, system_prompt="You plan trips.")
        assert built.report.total_tokens == COUNTER.count_messages(built.messages) <= 300
        assert built.messages[0]["content"] == "You plan trips."
        assert built.messages[1]["content"] == "budget_per_night_cny = 2000"  # never cut (I7)
        assert built.report.degradations


class TestFacts:
    def test_remember_and_recall_without_a_workspace(self, store: SQLiteStore) -> None:
        facts = FactMemory(store, SCOPE)
        facts.remember("user:city", "Lisbon", importance=0.9)
        hits = Recall(facts, HybridRetriever(store, None))("which city does the user live in", 3)
        assert hits and hits[0].fact is not None and hits[0].fact.content == "Lisbon"


class TestTasks:
    def test_constraints_and_the_prompt_blocks(self, store: SQLiteStore) -> None:
        tasks = Tasks(store, SCOPE)
        tasks.current.constraints.set("budget_per_night_cny", 2000, source="user")
        tasks.current.constraints.feedback("no hostels")
        corrections, constraints = tasks.prompt_blocks()
        assert corrections is not None and "no hostels" in corrections
        assert constraints is not None and "budget_per_night_cny = 2000" in constraints


def test_the_summarizer_needs_only_a_model_and_a_counter() -> None:
    out = summarizer(FakeLLM(["Reservation R0001 confirmed for passenger one on flight UA100 today."],
                             settings=LLMSettings(max_retries=0))).summarize(
        "Reservation R0001 was confirmed for passenger one on flight UA100. " * 20, max_tokens=64)
    assert out.ok


def test_no_component_takes_the_facade() -> None:
    import inspect

    from mindpalace.memory import Memory, Session

    for component in (StepMemory, Consolidator, AutoCompact, ContextBuilder, FactMemory, Recall,
                      Tasks, Summarizer, HybridRetriever, MessageLog):
        hints: dict[str, Any] = {p.name: p.annotation for p in
                                 inspect.signature(component).parameters.values()}
        assert not any(h in (Memory, Session, "Memory", "Session") for h in hints.values()), component
