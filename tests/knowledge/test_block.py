"""The knowledge block in the prompt: quoted memory (never system text), SOUL/USER/MEMORY/L0/L1
every prompt under its own share, counted exactly, never over budget (I9); L1 shown again in long
conversations; a pure build."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.blocks import Block, is_memory_message
from mindpalace.errors import ContextBudgetError
from mindpalace.knowledge import Patch
from mindpalace.knowledge.block import HEADER, REMINDER_HEADER, KnowledgePrompt
from mindpalace.session.pairing import check_pairing


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    m = Memory.open(tmp_path_factory.mktemp("kb") / "ws", embed={"provider": "none"})
    s = m.session("seed", user="ann", agent="planner")
    s.knowledge.apply([Patch.insert("SOUL.md", "You are a calm travel planner. " * 20),
                       Patch.insert("L0_rules.md", "- only verified facts go to L2/L3")], whose="agent",
                      message="persona and rules")
    s.knowledge.apply([Patch.insert("USER.md", "- Ann prefers window seats\n- Ann is vegetarian"),
                       Patch.insert("MEMORY.md", "- trip to Kyoto in spring; budget 8000 CNY\n" * 30),
                       Patch.insert("L1_index.md", "temples, opening hours → L3/temples.md\nhotels → L2_facts.md")],
                      message="what Ann told us")
    yield m
    m.close()


def knowledge_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content")) for m in messages if HEADER in str(m.get("content")))


def test_the_block_is_quoted_memory_not_system_text(mem: Memory) -> None:
    s = mem.session("a", user="ann", agent="planner")
    built = s.context(8_000, system_prompt="sys")
    systems = [m for m in built.messages if m["role"] == "system"]
    assert all(HEADER not in str(m["content"]) for m in systems)
    carrier = next(m for m in built.messages if HEADER in str(m.get("content")))
    assert carrier["role"] == "tool" and is_memory_message(carrier)
    text = carrier["content"]
    for file in ("SOUL.md", "L0_rules.md", "USER.md", "MEMORY.md", "L1_index.md"):
        assert f'file="{file}"' in text
    assert text.index('file="SOUL.md"') < text.index('file="USER.md"') < text.index('file="L1_index.md"')
    assert ('knowledge', next(t for n, t in built.report.blocks if n == Block.KNOWLEDGE.value)) in built.report.blocks
    other = mem.session("b", user="bob", agent="planner")  # another user sees the agent's files only
    theirs = knowledge_text(other.context(8_000, system_prompt="sys").messages)
    assert "SOUL.md" in theirs and "vegetarian" not in theirs


def test_a_short_share_keeps_l0_and_l1_first_and_says_how_to_read_the_rest(mem: Memory) -> None:
    s = mem.session("c", user="ann", agent="planner")
    prompt = KnowledgePrompt(mem.knowledge, s.knowledge.scopes, mem.tokens, mem.settings.knowledge)
    text = prompt.render(220)
    assert mem.tokens.count(text) <= 220
    assert 'file="L0_rules.md"' in text and 'file="L1_index.md"' in text
    assert "MEMORY.md" not in text or "read knowledge:user/MEMORY.md whole" in text


def test_the_l1_index_is_shown_again_in_a_long_conversation(mem: Memory) -> None:
    s = mem.session("long", user="ann", agent="planner")
    every = mem.settings.knowledge.l1_reinject_every_turns
    convo: list[dict[str, Any]] = []
    for i in range(every):
        convo += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    assert REMINDER_HEADER not in str(s.context(8_000, messages=convo).messages)
    convo += [{"role": "user", "content": f"q{every}"}]
    built = s.context(8_000, messages=convo)
    at = next(i for i, m in enumerate(built.messages) if REMINDER_HEADER in str(m.get("content")))
    assert built.messages[at + 1] == {"role": "user", "content": f"q{every}"}  # opens the new window
    assert check_pairing(built.messages) == []
    convo += [{"role": "assistant", "content": "a"}, {"role": "user", "content": "next"}]
    again = s.context(8_000, messages=convo)  # the spot stays until the next window
    at2 = next(i for i, m in enumerate(again.messages) if REMINDER_HEADER in str(m.get("content")))
    assert again.messages[at2 + 1] == {"role": "user", "content": f"q{every}"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(min_value=40, max_value=6_000), share=st.floats(min_value=0, max_value=1),
       turns=st.integers(min_value=0, max_value=25))
def test_the_block_stays_under_its_share_and_the_prompt_under_budget(mem: Memory, budget: int, share: float,
                                                                     turns: int) -> None:
    mem.settings.knowledge.prompt_share = share
    try:
        s = mem.session("h", user="ann", agent="planner")
        convo = [m for i in range(turns) for m in ({"role": "user", "content": f"question {i} " * 5},
                                                  {"role": "assistant", "content": f"answer {i} " * 5})]
        try:
            built = s.context(budget, system_prompt="sys", messages=convo)
        except ContextBudgetError:
            assert budget < mem.tokens.count_messages([{"role": "system", "content": "sys"}])
            return
        exact = mem.tokens.count_messages(built.messages)
        assert built.report.total_tokens == exact <= budget
        assert sum(t for _, t in built.report.blocks) == exact
        rows = dict(built.report.blocks)
        assert rows.get(Block.KNOWLEDGE.value, 0) <= max(0, int(share * budget))
        assert check_pairing(built.messages) == []
    finally:
        mem.settings.knowledge.prompt_share = 0.15


def test_building_never_writes_even_with_a_hand_edit_pending(mem: Memory, tmp_path: Path) -> None:
    s = mem.session("pure", user="ann", agent="planner")
    path = mem.workspace.knowledge_dir / s.knowledge.scope().folder / "USER.md"
    before = path.read_text()
    head = mem.knowledge.log(limit=1)[0].sha
    path.write_text(before + "- Ann hates queues\n")
    try:
        built = s.context(8_000, system_prompt="sys")
        assert "hates queues" not in knowledge_text(built.messages)
        assert mem.knowledge.log(limit=1)[0].sha == head
    finally:
        path.write_text(before)
