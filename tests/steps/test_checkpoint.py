"""Seed 003: the working checkpoint and the per-reply <summary> line with its fallback."""

from __future__ import annotations

from mindpalace import Memory
from mindpalace.steps import extract_summary
from mindpalace.steps.checkpoint import render_checkpoint
from mindpalace.testing import wiring

from .conftest import new_session

CALL = {"id": "c1", "type": "function",
        "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'}}


class TestExtractSummary:
    def test_the_tag_is_taken_on_one_line(self) -> None:
        assert extract_summary("Booked.\n<summary>booked HAT136\n for Mia</summary>") == "booked HAT136 for Mia"

    def test_without_the_tag_the_tool_call_gives_the_line(self) -> None:
        assert extract_summary(None, [CALL]) == 'called tool get_user_details, args: {"user_id":"mia_li_3668"}'

    def test_fallback_arguments_are_cut(self) -> None:
        call = {"id": "c", "function": {"name": "f", "arguments": {"text": "x" * 500}}}
        line = extract_summary("", [call], args_max_chars=30)
        assert line.startswith("called tool f, args: ") and len(line) == len("called tool f, args: ") + 30

    def test_arguments_nested_past_the_parser_are_shown_as_text(self) -> None:
        call = {"id": "c", "function": {"name": "f", "arguments": "[" * 100_000}}
        assert extract_summary(None, [call], args_max_chars=10) == "called tool f, args: " + "[" * 9 + "…"

    def test_a_plain_reply_gives_its_first_line(self) -> None:
        assert extract_summary("\nWhich cabin class?\nEconomy or business") == "Which cabin class?"
        assert extract_summary(None) == "(no reply)"


class TestInSession:
    def test_the_last_40_lines_are_kept_for_injection(self, small_memory: Memory) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        for i in range(45):
            steps.note_reply(f"<summary>turn {i}</summary>")
        assert steps.summary_lines == [f"turn {i}" for i in range(5, 45)]

    def test_checkpoint_updates_only_the_fields_given(self, small_memory: Memory) -> None:
        steps = wiring.step_memory(new_session(small_memory))
        steps.checkpoint(key_info="reservation ZFA04Y, seat 12A")
        cp = steps.checkpoint(related_sop="rebooking_sop")
        assert (cp.key_info, cp.related_sop) == ("reservation ZFA04Y, seat 12A", "rebooking_sop")
        assert cp.updated_at is not None
        assert render_checkpoint(cp) == (
            "Working checkpoint (key facts to keep across turns):\n"
            "<key_info>reservation ZFA04Y, seat 12A</key_info>\n<related_sop>rebooking_sop</related_sop>"
        )
