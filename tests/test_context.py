"""ContextBuilder: block order, exact counts (I9), never over budget, named degradations, I1."""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.blocks import Block, block_messages, block_text, is_memory_message, memory_exchange
from mindpalace.context import IMAGE_PLACEHOLDER
from mindpalace.errors import ContextBudgetError, ValidationError
from mindpalace.memory import Session
from mindpalace.session.pairing import check_pairing

TOOLS = [{"type": "function", "function": {"name": "get_user_details", "description": "Get a user",
          "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    m = Memory.open(tmp_path_factory.mktemp("ctx") / "ws", embed={"provider": "none"},
                    steps={"budget_tokens": 200})
    try:
        yield m
    finally:
        m.close()


def memory_block(built: Any, name: str) -> str:
    """The envelope of memory block `name` (``<memory source="name">…</memory>``) inside the
    prompt's memory exchange ('' when absent): the blocks share one exchange."""
    opening = f'<memory source="{name}">'
    for m in built.messages:
        content = m.get("content")
        if is_memory_message(m) and isinstance(content, str) and opening in content:
            rest = content[content.index(opening):]
            return rest[:rest.index("</memory>") + len("</memory>")]
    return ""


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


def fresh(mem: Memory) -> Session:
    return mem.session(uuid.uuid4().hex[:10], user="u")


def tool_turn(i: int) -> list[dict[str, Any]]:
    cid = f"call_{i}"
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "get_user_details", "arguments": f'{{"user_id": "u_{i}"}}'}}]},
        {"role": "tool", "tool_call_id": cid, "content": f'{{"reservations": ["R{i:05d}"]}} ' * 5},
    ]


def filled(mem: Memory, steps: int = 8, turns: int = 6) -> Session:
    s = fresh(mem)
    for i in range(steps):
        sid = s.steps.begin(f"look up reservation R{i:05d}", action="get_reservation_details()")
        s.steps.evaluate(sid, "success", tool_outputs=[f"R{i:05d} confirmed"])
        s.steps.note_reply(f"<summary>looked up R{i:05d}</summary>")
    s.steps.begin("book HAT136")
    s.steps.checkpoint(key_info="user mia_li_3668 pays with certificate_7504069")
    for i in range(turns):
        s.add_message({"role": "user", "content": f"please check reservation R{i:05d}"})
        for m in tool_turn(i):
            s.add_message(m)
    return s


class TestAssembly:
    def test_blocks_come_in_the_documented_order(self, mem: Memory) -> None:
        built = filled(mem).context(100_000, system_prompt="You are an airline agent.", tools=TOOLS)
        names = [n for n, _ in built.report.blocks]
        assert names == ["system prompt", "working checkpoint", "memory index", "recent steps",
                         "pending steps", "summary lines", "recalled memory", "message dates",
                         "messages (18)", "tool schemas", "reply priming"]
        assert built.messages[0] == {"role": "system", "content": "You are an airline agent."}
        assert built.report.degradations == []

    def test_summarized_memory_block_has_the_seed_heading(self, mem: Memory) -> None:
        s = filled(mem, steps=30)
        built = s.context(100_000)
        summary = memory_block(built, "summarized memory")
        assert summary.removeprefix('<memory source="summarized memory">').startswith(
            "Summarized memory (compressed from earlier steps):\n[steps 1-")

    def test_counts_are_exact_and_blocks_sum_to_the_total(self, mem: Memory) -> None:
        s = filled(mem)
        built = s.context(100_000, tools=TOOLS)
        exact = s.memory.tokens.count_messages(built.messages, TOOLS)
        assert built.report.total_tokens == exact
        assert sum(t for _, t in built.report.blocks) == exact

    def test_a_stored_system_message_stays_the_system_prompt_after_it_is_archived(self, mem: Memory) -> None:
        s = fresh(mem)
        s.add_message({"role": "system", "content": "You plan Tokyo trips."})
        for i in range(40):
            s.add_message({"role": "user", "content": f"question {i} " + "about hotels " * 20})
            s.add_message({"role": "assistant", "content": f"answer {i} " + "a plan " * 20})
            built = s.prepare(600)
            assert built.messages[0] == {"role": "system", "content": "You plan Tokyo trips."}
        assert s.consolidator.last_consolidated > 1  # the system message itself was archived
        assert s.context(600).messages[0]["content"] == "You plan Tokyo trips."

    def test_a_system_message_of_the_conversation_becomes_the_system_prompt(self, mem: Memory) -> None:
        s = fresh(mem)
        built = s.context(10_000, messages=[{"role": "system", "content": "policy"}, {"role": "user", "content": "hi"}])
        assert [m["role"] for m in built.messages] == ["system", "user"]
        assert built.messages[0]["content"] == "policy"


class TestOneMemoryExchange:
    """The memory blocks travel together: one exchange (issue 10: delivery overhead)."""

    def test_every_memory_block_shares_one_exchange_and_each_keeps_its_row(self, mem: Memory) -> None:
        built = filled(mem).context(100_000, system_prompt="You are an airline agent.", tools=TOOLS)
        memory = [m for m in built.messages if is_memory_message(m)]
        assert [m["role"] for m in memory] == ["assistant", "tool"]
        assert memory[0]["tool_calls"][0]["id"] == memory[1]["tool_call_id"] == "mp-memory-1"
        rows = dict(built.report.blocks)
        pair = memory_exchange([(Block.CHECKPOINT, "a"), (Block.MEMORY_INDEX, "b")])
        shell = sum(mem.tokens.count_message(m) for m in pair) - mem.tokens.count(pair[1]["content"])
        for k, name in enumerate(("working checkpoint", "memory index", "recent steps", "pending steps", "summary lines")):
            envelope = memory_block(built, name)
            assert envelope and envelope in memory[1]["content"]
            # the row is what the block adds to the exchange: its envelope and the joining line
            # (a few tokens either way where tokens merge across the join); the first block
            # also carries the exchange's shell
            assert abs(rows[name] - (0 if k else shell) - mem.tokens.count(envelope)) <= 8, name

    def test_one_exchange_costs_less_than_one_per_block(self, mem: Memory) -> None:
        parts = [(Block.CHECKPOINT, "step 3 of 5"), (Block.MEMORY_INDEX, "- step_1"), (Block.RECENT_STEPS, "ok")]
        one = mem.tokens.count_messages(memory_exchange(parts))
        each = mem.tokens.count_messages(
            [m for k, (b, t) in enumerate(parts, start=1) for m in block_messages(b, t, seq=k)])
        assert each - one >= 2 * 20  # two shells saved (~28 tokens each with the tool role)

    def test_memory_exchange_shapes_and_refusals(self) -> None:
        with pytest.raises(ValidationError, match="system prompt"):
            memory_exchange([(Block.SYSTEM_PROMPT, "be nice"), (Block.MEMORY_INDEX, "- step_1")])
        assert memory_exchange([]) == []
        assert memory_exchange([(Block.MEMORY_INDEX, "- s")], seq=3) == block_messages(Block.MEMORY_INDEX, "- s", seq=3)
        [user] = memory_exchange([(Block.CHECKPOINT, "a"), (Block.MEMORY_INDEX, "b")], memory_role="user")
        assert is_memory_message(user) and user["content"].count("<memory source=") == 2
        call, result = memory_exchange([(Block.CHECKPOINT, "a"), (Block.MEMORY_INDEX, "</memory>b")], seq=2)
        assert is_memory_message(call) and is_memory_message(result) and result["tool_call_id"] == "mp-memory-2"
        assert "&lt;/memory>b" in result["content"]  # quoted text still cannot close its envelope


class TestDegradation:
    def test_images_are_dropped_first(self, mem: Memory) -> None:
        s = fresh(mem)
        msgs = [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
        built = s.context(200, messages=msgs)
        assert built.report.degradations == ["dropped 1 images"]
        assert built.messages[-1]["content"][1] == {"type": "text", "text": IMAGE_PLACEHOLDER}

    def test_oldest_messages_go_in_whole_tool_groups(self, mem: Memory) -> None:
        s = filled(mem)
        full = s.context(100_000)
        built = s.context(full.report.total_tokens - 60)
        assert any(d.startswith("dropped") and "oldest messages" in d for d in built.report.degradations)
        assert check_pairing(built.messages) == []
        assert built.messages[-1]["role"] == "tool"

    def test_prepare_consolidates_over_budget_messages_into_history_first(self, mem: Memory) -> None:
        s = filled(mem)
        total = s.messages.count()
        full = s.prepare(100_000, query=[])  # no recalled block: it is not a fixed part
        assert full.report.consolidation is not None and not full.report.consolidation.consolidated
        built = s.prepare(full.report.total_tokens - 60, query=[])
        assert built.report.consolidation is not None and built.report.consolidation.consolidated
        archived = s.consolidator.last_consolidated
        assert 0 < archived < total
        covered = {i for e in s.consolidator.history.read(0, session=s.scope) if e.messages
                   for i in range(e.messages[0], e.messages[1] + 1)}
        assert covered >= set(range(1, archived + 1))  # I2: nothing left the prompt without a copy
        assert memory_block(built, "archived summary").startswith(
            '<memory source="archived summary">Archived context summary')
        assert built.report.total_tokens <= full.report.total_tokens - 60
        assert check_pairing(built.messages) == []

    def test_prepare_refuses_two_tool_schemas_of_one_name_before_it_archives(self, mem: Memory) -> None:
        s = filled(mem)
        full = s.prepare(100_000, query=[])
        dup = [*TOOLS, {"type": "function", "function": {"name": "get_user_details"}}]
        with pytest.raises(ValidationError, match="get_user_details"):
            s.prepare(full.report.total_tokens - 60, query=[], tools=dup)
        assert s.consolidator.last_consolidated == 0

    def test_a_tiny_budget_run_does_not_leave_the_archived_block_cut_at_later_budgets(
            self, mem: Memory) -> None:
        # a new user's finding: after prepare(50) the block's stored cap (16 tokens) hid every
        # range at every later budget ("Not shown: messages 1")
        s = fresh(mem)
        for i in range(12):
            s.add_message({"role": "user", "content": f"Codename Falcon{i}; the deadline is March {i + 1}."})
            s.add_message({"role": "assistant", "content": f"Noted, Falcon{i} is due March {i + 1}."})
        s.prepare(50)
        assert s.consolidator.last_consolidated > 0
        block = memory_block(s.context(4000, query=[]), "archived summary")
        assert "Not shown" not in block
        assert f"[messages 1-{s.consolidator.last_consolidated} · history:" in block

    def test_the_system_prompt_is_never_cut_a_budget_below_it_is_refused(self, mem: Memory) -> None:
        s = fresh(mem)
        with pytest.raises(ContextBudgetError, match=r"system prompt \d+ tokens, which are never cut"):
            s.context(120, system_prompt="policy " * 400, messages=[{"role": "user", "content": "hi"}])
        s.add_message({"role": "system", "content": "policy " * 400})  # a stored one, too
        with pytest.raises(ContextBudgetError, match="system prompt"):
            s.prepare(120)
        built = s.context(600, system_prompt="policy " * 400,
                          messages=[{"role": "user", "content": "hi " * 400}])
        assert built.messages[0]["content"] == "policy " * 400  # whole; the message was cut
        assert built.report.total_tokens <= 600


    def test_the_refusal_names_each_uncuttable_part_with_its_own_tokens(self, mem: Memory) -> None:
        # new-user finding: with tool schemas the parts were reported minus the schemas too
        # ("protected constraints -206, system prompt 132 tokens" for a 361-token prompt)
        s = fresh(mem)
        s.constraints.set("budget_cny", 2000, source="user")
        system = "You are a careful assistant. " * 60
        with pytest.raises(ContextBudgetError) as err:
            s.context(300, system_prompt=system, tools=TOOLS * 1,
                      messages=[{"role": "user", "content": "hi"}])
        sizes = {name: int(n) for name, n in re.findall(r"(system prompt|protected constraints) (-?\d+)",
                                                       str(err.value))}
        counter = mem.tokens
        alone = counter.count_messages([{"role": "system", "content": system}]) - counter.count_messages([])
        assert sizes["system prompt"] == alone
        assert sizes["protected constraints"] > 0
        assert err.value.minimum > 300
    def test_a_cut_message_keeps_its_head_and_tail_and_names_its_reference(self, mem: Memory) -> None:
        s = fresh(mem)
        s.add_message({"role": "user", "content": "run the build"})
        log = "\n".join(f"compiling module {i} ok" for i in range(3_000))
        s.add_message({"role": "assistant", "content": log + "\nFINAL: 3 submodules failed (m7, m9, m12)"})
        built = s.context(400)
        text = built.messages[-1]["content"]
        assert built.report.total_tokens <= 400
        assert text.startswith("compiling module 0 ok")
        assert text.endswith("FINAL: 3 submodules failed (m7, m9, m12)")
        assert "in full as message:2" in text
        assert s.read_records(["message:2"]).found["message:2"].body.endswith("(m7, m9, m12)")
        assert any("message:2" in d and "head + tail" in d for d in built.report.degradations)

    def test_the_longest_parts_are_cut_to_a_common_level_keeping_their_heads(self, mem: Memory) -> None:
        s = filled(mem, steps=40, turns=0)
        # a request over half the budget (a shorter one is kept whole while others give way)
        msgs = [{"role": "user", "content": "policy " * 1400}]
        full = s.context(100_000, messages=msgs)
        sizes = dict(full.report.blocks)
        built = s.context(full.report.total_tokens // 2, messages=msgs)
        cut = dict(built.report.blocks)
        assert built.report.total_tokens <= full.report.total_tokens // 2
        assert cut["messages (1)"] < sizes["messages (1)"] and cut["memory index"] < sizes["memory index"]
        counter = s.memory.tokens
        # the index shares the memory exchange with the checkpoint before it: its row is its
        # envelope, the line joining it and its text
        assert [n for n, _ in built.report.blocks][:2] == ["working checkpoint", "memory index"]
        envelope = (counter.count(block_text(Block.MEMORY_INDEX, "")) + 1
                    - counter.count_message({"role": "user", "content": ""}))
        # one level for the longest (then the message gets back what fitting left over)
        assert abs(cut["messages (1)"] - (cut["memory index"] - envelope)) <= 16
        assert cut["pending steps"] == sizes["pending steps"]  # short blocks untouched
        index = memory_block(built, "memory index")
        assert index.startswith('<memory source="memory index">Memory index')
        assert index.splitlines()[1].startswith("- step_40 ")  # the newest entries survive

    def test_a_request_of_at_most_half_the_budget_stays_whole_while_memory_gives_way(self, mem: Memory) -> None:
        s = filled(mem, steps=40, turns=0)
        msgs = [{"role": "user", "content": "policy " * 600}]
        full = s.context(100_000, messages=msgs)
        built = s.context(full.report.total_tokens // 2, messages=msgs)
        assert built.report.total_tokens <= full.report.total_tokens // 2
        assert built.messages[-1] == msgs[0]
        assert dict(built.report.blocks)["memory index"] < dict(full.report.blocks)["memory index"]

    def test_a_budget_that_cannot_show_the_request_is_refused_naming_it(self, mem: Memory) -> None:
        # new-user finding: below the request's size the prompt went out without the question —
        # at 12-15 tokens the user message was dropped (only the system prompt was left), at
        # 20-25 it was sent empty, at 30-50 cut to its head with no reference to read it back
        s = fresh(mem)
        request = "hello there, please tell me about Tokyo temples " * 20
        s.add_message({"role": "user", "content": request})
        refused, served = [], []
        for budget in range(12, 160, 3):
            try:
                built = s.context(budget, system_prompt="You plan trips.")
            except ContextBudgetError as err:
                assert "newest user message (message:1)" in str(err), str(err)
                assert err.minimum > budget
                refused.append(budget)
                continue
            served.append(budget)
            assert built.report.total_tokens <= budget
            last = built.messages[-1]
            assert last["role"] == "user" and last["content"].startswith("hello there")
            assert last["content"].rstrip().endswith("Tokyo temples"), last["content"]
            assert "in full as message:1" in last["content"]
        assert refused and served and max(refused) < min(served)  # one threshold, no gaps
        with pytest.raises(ContextBudgetError, match="newest user message"):  # a given conversation
            s.context(30, system_prompt="You plan trips.", messages=[{"role": "user", "content": request}])
        with pytest.raises(ContextBudgetError, match="newest user message"):  # refused before writing
            s.prepare(30, system_prompt="You plan trips.")
        assert s.consolidator.last_consolidated == 0

    def test_a_request_in_content_parts_is_cut_like_text_never_dropped(self, mem: Memory) -> None:
        # new-user finding: a user message as content parts ([text, image], the form vision and
        # several SDKs send) was never cut — under budget it was dropped whole ("non-text
        # parts") and the prompt went out with the system prompt only
        s = fresh(mem)
        s.remember("user:city", "Lisbon", importance=0.9)
        text = "describe this picture in detail please " * 100
        s.add_message({"role": "user", "content": [{"type": "text", "text": text},
                                                   {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]})
        with pytest.raises(ContextBudgetError, match=r"newest user message \(message:1\)"):
            s.context(30, system_prompt="sys")
        for budget in (100, 300):
            built = s.context(budget, system_prompt="sys")
            assert built.report.total_tokens <= budget
            last = built.messages[-1]["content"]
            assert isinstance(last, str) and last.startswith("describe this picture") and "message:1" in last
            assert IMAGE_PLACEHOLDER in last  # the image's place is still said
        whole = s.context(4000, system_prompt="sys").messages[-1]["content"]
        assert whole[0] == {"type": "text", "text": text}  # parts untouched when nothing must be cut

    def test_a_budget_below_the_irreducible_minimum_is_a_clear_error(self, mem: Memory) -> None:
        with pytest.raises(ContextBudgetError, match="irreducible minimum"):
            fresh(mem).context(20, tools=TOOLS)
        with pytest.raises(ValidationError):
            fresh(mem).context(0)

    @pytest.mark.parametrize(
        ("options", "why"),
        [
            ({"system_prompt": 123}, "system_prompt"),
            ({"system_prompt": "be brief \ud800"}, "lone surrogate"),
            ({"tools": "get_user_details"}, "list of tool schemas"),
            ({"tools": {"type": "function"}}, "list of tool schemas"),
            ({"tools": [{"type": "function", "x": object()}]}, "JSON"),
            ({"messages": "hello"}, "list of chat messages"),
            ({"messages": [{"role": "user", "content": "hi"}, 5]}, r"messages\[1\]"),
            ({"messages": [{"role": "alien", "content": "x"}]}, "role"),
            ({"messages": [{"role": "user", "content": {"a": 1}}]}, "content"),
            ({"messages": [{"role": "user", "content": "x", "extra": {1, 2}}]}, "JSON"),
            ({"messages": [{"role": "user", "content": "x", "extra": float("nan")}]}, "JSON"),
            ({"tools": [{1: "x", "b": 2}]}, "JSON"),
            ({"tools": [{"type": "function", "name": "f\ud800"}]}, "lone surrogate"),
            ({"tools": [{"type": "function", "function": {"name": "f", "parameters": deep(3_000)}}]},
             "nested deeper"),  # was a RecursionError (new-user finding)
            # new-user finding: two schemas of one name were sent (OpenAI answers 400, and a
            # model's call to the name is ambiguous)
            ({"tools": [{"type": "function", "function": {"name": "book", "parameters": {}}},
                        {"type": "function", "function": {"name": "book", "description": "x"}}]},
             r"tools\[1\].*'book'.*tools\[0\]"),
            ({"tools": [{"type": "function", "name": "book"}, {"type": "function", "name": "book"}]},
             "'book'"),  # the flat (Responses API) form
        ],
    )
    def test_a_request_the_model_api_could_not_take_is_refused(
        self, mem: Memory, options: dict[str, Any], why: str
    ) -> None:
        with pytest.raises(ValidationError, match=why):
            fresh(mem).context(2_000, **options)

    def test_a_dangling_tool_call_is_repaired_and_reported(self, mem: Memory) -> None:
        s = fresh(mem)
        msgs = [{"role": "user", "content": "go"}, tool_turn(1)[0], {"role": "user", "content": "next"}]
        built = s.context(5_000, messages=msgs)
        assert built.report.pairing.closed_calls == ["call_1"]
        assert check_pairing(built.messages) == []

    def test_only_the_tail_of_a_long_log_is_read(self, mem: Memory) -> None:
        s = fresh(mem)
        for i in range(300):
            s.add_message({"role": "user", "content": f"message {i} " + "words " * 30})
        built = s.context(1_000)
        assert built.report.total_tokens <= 1_000
        assert built.report.degradations[0].endswith("oldest messages (not loaded)")
        assert built.messages[-1]["content"].startswith("message 299 ")


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=400)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    budget=st.integers(min_value=80, max_value=4_000),
    system=st.one_of(st.none(), TEXT),
    user_texts=st.lists(TEXT, max_size=12),
    tool_turns=st.integers(min_value=0, max_value=4),
    with_tools=st.booleans(),
    images=st.integers(min_value=0, max_value=2),
)
def test_the_prompt_never_exceeds_its_budget(
    mem: Memory, budget: int, system: str | None, user_texts: list[str], tool_turns: int,
    with_tools: bool, images: int,
) -> None:
    s = filled(mem, steps=3, turns=1)
    msgs: list[dict[str, Any]] = []
    for i, text in enumerate(user_texts):
        msgs.append({"role": "user", "content": text})
        if i < tool_turns:
            msgs.extend(tool_turn(i))
    for _ in range(images):
        msgs.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})
    tools = TOOLS if with_tools else None
    floor = s.memory.tokens.count_messages([{"role": "system", "content": system}] if system else [], tools)
    if system and floor > budget:  # the system prompt is never cut (I7): refused, naming it
        with pytest.raises(ContextBudgetError, match="system prompt"):
            s.context_builder.build(budget, system_prompt=system, tools=tools, messages=msgs)
        return
    request = msgs[-1] if msgs and msgs[-1]["role"] == "user" and isinstance(msgs[-1]["content"], str) \
        and msgs[-1]["content"] else None
    try:
        built = s.context_builder.build(budget, system_prompt=system, tools=tools, messages=msgs)
    except ContextBudgetError as err:  # the question it answers is never dropped, emptied or gutted
        assert request is not None and "newest user message" in str(err) and err.minimum > budget
        return
    if request is not None:  # shown, whole or as head + tail + the cut note
        assert built.messages[-1]["role"] == "user" and built.messages[-1]["content"]
        assert built.messages[-1]["content"] == request["content"] or "cut from the middle" in built.messages[-1]["content"]
    exact = s.memory.tokens.count_messages(built.messages, tools)
    assert built.report.total_tokens == exact <= budget
    assert sum(t for _, t in built.report.blocks) == exact
    assert check_pairing(built.messages) == []
    # Anything cut is named. The recalled block is a best-first selection under its share of
    # THIS budget (more room holds more matching records; the pool also grows with the other
    # examples' sessions in this workspace), so it is compared out of both sides.
    big = s.context_builder.build(10**7, system_prompt=system, tools=tools, messages=msgs)

    def not_recalled(b: Any) -> int:
        return b.report.total_tokens - dict(b.report.blocks).get("recalled memory", 0)

    if not_recalled(built) < not_recalled(big):
        assert built.report.degradations


def test_default_budget_is_window_minus_completion_minus_buffer(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"},
                     session={"context_window_tokens": 8_000, "max_completion_tokens": 1_000,
                              "safety_buffer_tokens": 500}) as m:
        built = fresh(m).context(messages=[{"role": "user", "content": "hi"}])
        assert built.report.budget_tokens == 6_500


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _tables(db: Path) -> list[str]:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


class TestReadOnly:
    """Session.context is a pure build: same stored state in, same prompt out, nothing written."""

    def _workspace(self, root: Path) -> None:
        root.mkdir()
        (root / "mindpalace.toml").write_text(
            '[embed]\nprovider = "none"\n[steps]\nbudget_tokens = 80\n[session]\n'
            "context_window_tokens = 2000\nmax_completion_tokens = 200\nsafety_buffer_tokens = 0\n",
            encoding="utf-8")
        with Memory.open(root) as m:
            s = m.session("trip", user="u")
            s.add_message({"role": "system", "content": "You plan Tokyo trips."})
            for i in range(30):
                s.add_message({"role": "user", "content": f"question {i} " + "about hotels " * 20})
                s.add_message({"role": "assistant", "content": f"answer {i} " + "a plan " * 20})
            s.prepare()  # an archived summary exists: the build reads it
            for i in range(30, 60):  # and the session is far over budget again
                s.add_message({"role": "user", "content": f"question {i} " + "about hotels " * 20})
                for m_ in tool_turn(i):
                    s.add_message(m_)
            for i in range(12):
                s.steps.evaluate(s.steps.begin(f"look up hotel H{i:03d}"), "success",
                                 tool_outputs=[f"H{i:03d} at 1800 CNY"])
            s.steps.begin("book the hotel")
            s.constraints.set("budget_per_night_cny", 2000, source="user")
            s.task.constraints.feedback("no hostels")
            s.remember("user:city", "Tokyo", importance=0.9)

    def test_building_leaves_every_file_and_table_unchanged(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        self._workspace(root)
        files, tables = _files(root), _tables(root / "memory.db")
        with Memory.open(root) as m:
            s = m.session("trip", user="u")
            assert s.consolidator.prompt_tokens() > m.settings.session.input_budget_tokens
            cursor = s.consolidator.last_consolidated
            first = s.context()
            assert s.consolidator.state().last_consolidated == cursor
            for budget in (None, 300, 600, 1_500, 100_000):
                built = s.context(budget, tools=TOOLS)
                assert built.report.consolidation is None
                assert built.report.total_tokens <= built.report.budget_tokens
            assert any(d.startswith("dropped") for d in s.context(600).report.degradations)
            assert s.context().messages == first.messages  # same state in, same prompt out
            s.context(400, system_prompt="be brief", messages=[{"role": "user", "content": "hi"}])
        assert _files(root) == files
        assert _tables(root / "memory.db") == tables

    def test_prepare_is_the_call_that_writes(self, tmp_path: Path) -> None:
        root = tmp_path / "ws"
        self._workspace(root)
        tables = _tables(root / "memory.db")
        with Memory.open(root) as m:
            s = m.session("trip", user="u")
            before = s.consolidator.last_consolidated
            built = s.prepare()
            assert built.report.consolidation is not None and built.report.consolidation.consolidated
            assert s.consolidator.last_consolidated > before
        assert _tables(root / "memory.db") != tables


MEMORY_NAMED_TOOL = {"type": "function", "function": {"name": "memory", "description": "my notes",
                                                      "parameters": {"type": "object", "properties": {}}}}


def test_a_tool_named_memory_is_refused_by_context_and_prepare_as_by_the_agent(memory: Memory) -> None:
    # left-alone finding: Agent refused a tool named "memory" while memory_role = "tool" (every
    # prompt's memory blocks travel in an assistant call of that name), but prepare()/context()
    # outside the Agent sent both — the model saw two meanings of one tool name
    s = memory.session("s1", user="u")
    for i in range(40):
        s.add_message({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 30})
    before = (s.messages.count(), s.consolidator.last_consolidated)
    for call in (s.context, s.prepare):
        with pytest.raises(ValidationError, match=r"'memory'.*memory_role"):
            call(300, tools=[MEMORY_NAMED_TOOL])
    assert (s.messages.count(), s.consolidator.last_consolidated) == before  # nothing consolidated


def test_a_tool_named_memory_is_accepted_when_memory_travels_in_user_messages(workspace_dir: Path) -> None:
    with Memory.open(workspace_dir, embed={"provider": "none"}, context={"memory_role": "user"}) as mem:
        s = mem.session("s1", user="u")
        s.add_message({"role": "user", "content": "hello"})
        assert s.prepare(2_000, tools=[MEMORY_NAMED_TOOL]).tools == [MEMORY_NAMED_TOOL]


def test_a_query_list_longer_than_the_cap_is_refused_before_any_search(memory: Memory) -> None:
    # a new user's finding: query=[…] had no length bound — each text is one hybrid search (twice
    # when the block is re-packed), so one REST body of 100,000 one-letter queries (under the 1 MB
    # body limit) held a server thread for hours
    from mindpalace.context import MAX_QUERIES
    s = memory.session("s1", user="u")
    s.add_message({"role": "user", "content": "hello"})
    assert s.context(1_000, query=["hello"] * MAX_QUERIES).report.queries == ["hello"] * MAX_QUERIES
    for call in (s.context, s.prepare):
        with pytest.raises(ValidationError, match=rf"{MAX_QUERIES + 1} queries.*at most {MAX_QUERIES}"):
            call(1_000, query=["hello"] * (MAX_QUERIES + 1))
    assert s.messages.count() == 1
