"""Compression of stored messages into L4 exchanges (seed 003 compress_session)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mindpalace.archive.exchanges import compress, content_key, split_exchanges
from mindpalace.session.messages import StoredMessage

T0 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def stored(*messages: dict[str, Any]) -> list[StoredMessage]:
    return [StoredMessage(i, m, T0) for i, m in enumerate(messages, start=1)]


def call(name: str, args: str = "{}") -> dict[str, Any]:
    return {"id": f"c-{name}", "type": "function", "function": {"name": name, "arguments": args}}


def one(messages: list[StoredMessage], cap: int = 100):  # type: ignore[no-untyped-def]
    ex = compress(messages, tenant="t", user="u", agent="a", session="s1", tool_output_max_chars=cap)
    assert ex is not None
    return ex


class TestCompress:
    def test_system_prompt_and_assistant_echoes_are_stripped(self) -> None:
        ex = one(stored(
            {"role": "system", "content": "You are a travel agent. Policy: …"},
            {"role": "user", "content": "I prefer aisle seats."},
            {"role": "assistant", "content": "I prefer  aisle seats."},  # echo of the question
            {"role": "assistant", "content": "<think>note it</think>Noted: aisle seats."},
            {"role": "assistant", "content": "Noted: aisle seats."},  # echo of its own text
        ))
        assert [(t.role, t.content) for t in ex.turns] == [
            ("user", "I prefer aisle seats."), ("assistant", "Noted: aisle seats.")]
        assert (ex.first, ex.last) == (1, 5)

    def test_user_and_agent_text_are_kept_verbatim(self) -> None:
        text = "Line one\n  keeps   its   spacing & <markup> [x]"
        ex = one(stored({"role": "user", "name": "Caroline", "content": text},
                        {"role": "assistant", "name": "Mel", "content": text + "!"}))
        assert [t.content for t in ex.turns] == [text, text + "!"]
        assert ex.text() == f"Caroline (user): {text}\nMel (assistant): {text}!"

    def test_long_tool_output_is_bounded_with_a_reference_to_the_full_message(self) -> None:
        ex = one(stored(
            {"role": "user", "content": "find order 42"},
            {"role": "assistant", "content": None, "tool_calls": [call("get_order", '{"id": 42}')]},
            {"role": "tool", "tool_call_id": "c-get_order", "name": "get_order", "content": "y" * 500},
        ), cap=100)
        tool = ex.turns[2]
        assert tool.content.startswith("y" * 100) and "400 more chars: read message:3@s1" in tool.content
        assert ex.turns[1].calls == ('get_order({"id": 42})',)

    def test_a_group_of_system_messages_only_is_nothing(self) -> None:
        got = compress(stored({"role": "system", "content": "x"}), tenant="t", user="u",
                       agent="a", session="s", tool_output_max_chars=100)
        assert got is None


class TestIdentity:
    def test_the_hash_ignores_session_and_message_numbers_but_not_the_owner(self) -> None:
        msgs = stored({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})
        a = compress(msgs, tenant="t", user="u", agent="a", session="s1", tool_output_max_chars=9)
        later = [StoredMessage(7, msgs[0].message, T0), StoredMessage(8, msgs[1].message, T0)]
        b = compress(later, tenant="t", user="u", agent="a", session="s9", tool_output_max_chars=9)
        assert a is not None and b is not None and a.key == b.key
        assert content_key("t", "other", "a", a.turns) != a.key

    def test_each_user_message_starts_an_exchange(self) -> None:
        msgs = stored({"role": "system", "content": "p"}, {"role": "user", "content": "1"},
                      {"role": "assistant", "content": "a"}, {"role": "user", "content": "2"})
        assert [[m.index for m in g] for g in split_exchanges(msgs)] == [[1], [2, 3], [4]]
