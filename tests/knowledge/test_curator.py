"""The offline dream curator: what it promotes, with which sources, and never twice."""

from __future__ import annotations

from datetime import UTC, datetime

from mindpalace.facts.model import Fact
from mindpalace.history.log import HistoryEntry
from mindpalace.knowledge.curator import CuratorSettings, curate, statements
from mindpalace.knowledge.patches import apply_patch
from mindpalace.scope import Scope

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def entry(cursor: int, content: str, user: str = "u1") -> HistoryEntry:
    return HistoryEntry(cursor, T0, "s1", content, "summary", Scope("default", user, "a", "s1"))


def written(patches: list, files: dict[str, str | None]) -> dict[str, str | None]:  # type: ignore[type-arg]
    out = dict(files)
    for p in patches:
        out[p.file] = apply_patch(out.get(p.file), p)
    return out


class TestStatements:
    def test_speaker_labelled_turns_are_split_into_sentences(self) -> None:
        got = statements(entry(3, "[1] Caroline: Hey Mel! I moved from Sweden 4 years ago. "
                                  "[2] Melanie: I prefer painting at sunrise."))
        assert [(s.speaker, s.text) for s in got] == [
            ("Caroline", "Hey Mel!"), ("Caroline", "I moved from Sweden 4 years ago."),
            ("Melanie", "I prefer painting at sunrise.")]

    def test_plain_lines_keep_a_leading_speaker(self) -> None:
        got = statements(entry(1, "- user: my seat preference is aisle.\n- the budget is 8000 CNY"))
        assert [(s.speaker, s.text) for s in got] == [("user", "my seat preference is aisle."),
                                                      ("", "the budget is 8000 CNY")]


class TestPromotion:
    def test_preferences_go_to_user_md_verbatim_with_their_history_sources(self) -> None:
        new = [entry(7, "[1] user: I always fly with Star Alliance carriers. [2] assistant: I prefer to check.")]
        patches, promoted = curate(new, new, {"USER.md": None, "MEMORY.md": None})
        assert [(p.file, p.line()) for p in promoted] == [
            ("USER.md", "- user: I always fly with Star Alliance carriers. [history:7]")]
        files = written(patches, {})
        assert files["USER.md"] is not None and "I always fly with Star Alliance carriers. [history:7]" in files["USER.md"]
        assert "MEMORY.md" not in files  # the assistant's "I prefer" is not the user's preference

    def test_a_statement_seen_in_two_entries_is_promoted_to_memory_with_both_sources(self) -> None:
        old = entry(2, "- The staging database lives on db-staging-02 in Frankfurt.")
        new = entry(9, "- Reminder: the staging database lives on db-staging-02 in Frankfurt.\n"
                       "- The staging database lives on db-staging-02 in Frankfurt.")
        _, promoted = curate([new], [old, new], {"USER.md": None, "MEMORY.md": None})
        assert [(p.file, p.sources) for p in promoted] == [("MEMORY.md", ["history:2", "history:9"])]

    def test_a_statement_seen_once_or_chatter_seen_often_is_not_promoted(self) -> None:
        chatter = [entry(i, "[1] Caroline: Thanks, Mel! [2] Melanie: Wow, that's cool!") for i in (1, 2, 3)]
        once = entry(4, "- The staging database lives on db-staging-02.")
        _, promoted = curate([*chatter, once], [*chatter, once], {"USER.md": None, "MEMORY.md": None})
        assert promoted == []

    def test_important_long_term_facts_are_promoted_with_their_fact_reference(self) -> None:
        facts = [Fact("user:home_airport", "SFO", importance=0.9), Fact("trip:hotel", "Hoshino", importance=0.7),
                 Fact("user:mood", "tired", importance=0.2)]
        _, promoted = curate([entry(1, "- ok")], [], {"USER.md": None, "MEMORY.md": None}, facts)
        assert [(p.file, p.text, p.sources) for p in promoted] == [
            ("USER.md", "user:home_airport = SFO", ["fact:user:home_airport"]),
            ("MEMORY.md", "trip:hotel = Hoshino", ["fact:trip:hotel"])]

    def test_what_the_files_already_say_is_not_promoted_again(self) -> None:
        new = [entry(5, "[1] user: I prefer aisle seats on long flights.")]
        patches, _ = curate(new, new, {"USER.md": None, "MEMORY.md": None})
        files = written(patches, {})
        again, promoted = curate(new, new, files)
        assert (again, promoted) == ([], [])

    def test_at_most_max_promotions_lines_per_run_preferences_first(self) -> None:
        new = [entry(1, "\n".join([f"- The build server number {i} is in rack {i}." for i in range(5)]
                                  + ["- user: I prefer tea over coffee in the mornings."])),
               entry(2, "\n".join(f"- The build server number {i} is in rack {i}." for i in range(5)))]
        _, promoted = curate(new, new, {"USER.md": None, "MEMORY.md": None}, settings=CuratorSettings(max_promotions=2))
        assert [p.why for p in promoted] == ["repeated", "preference"] or [p.why for p in promoted] == ["preference", "repeated"]
        assert len(promoted) == 2 and any(p.why == "preference" for p in promoted)

    def test_an_agent_scope_has_no_user_file(self) -> None:
        new = [entry(1, "- user: I prefer aisle seats on long flights.")]
        patches, promoted = curate(new, new, {"MEMORY.md": None}, settings=CuratorSettings(user_file=False))
        assert {p.file for p in patches} <= {"MEMORY.md"} and all(p.file == "MEMORY.md" for p in promoted)

    def test_nothing_from_a_system_prompt_or_a_tool_output_is_promoted(self) -> None:
        prompt = ("# Airline policy\n\n- All payment methods must already be in user profile for safety reasons.\n"
                  "\n## Cancel\n\n- The agent must first obtain the user id and the reservation id.")
        quote = ("- All payment methods must already be in user profile for safety reasons. - The agent must "
                 "first obtain the user id and the reservation id.")
        entries = [entry(1, quote), entry(2, quote + "\n- tool: Error: payment amount does not add up at all"),
                   entry(3, "- tool: Error: payment amount does not add up at all\n- user: My user ID is mia_li_3668.")]
        _, promoted = curate(entries, entries, {"USER.md": None, "MEMORY.md": None}, prompts=[prompt])
        assert [(p.file, p.text) for p in promoted] == [("USER.md", "My user ID is mia_li_3668.")]
