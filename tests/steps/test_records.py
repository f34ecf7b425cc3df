"""Records: names validated, scoped reads, markdown with YAML front matter, read-by-name."""

from __future__ import annotations

import pytest

from mindpalace import Memory
from mindpalace.errors import InvalidNameError, NotFoundError, ValidationError
from mindpalace.steps.records import RecordBook, parse_front_matter, render_record

from .conftest import new_session


def book(mem: Memory) -> RecordBook:
    s = new_session(mem)
    return RecordBook(s.store, s.scope)


class TestNames:
    @pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "a\\b", "..", ".hidden", "", "x" * 129, "a b"])
    def test_unsafe_names_are_refused_before_anything_is_stored(self, small_memory: Memory, name: str) -> None:
        b = book(small_memory)
        with pytest.raises(InvalidNameError):
            b.put(name, "info", "body")
        assert b.list() == []

    def test_records_of_another_session_are_not_visible(self, small_memory: Memory) -> None:
        mine, theirs = book(small_memory), book(small_memory)
        mine.put_info("user_profile", "window seat", description="seat preference")
        assert theirs.read(["user_profile"]).missing == ["user_profile"]
        with pytest.raises(NotFoundError, match="user_profile"):
            theirs.get("user_profile")


class TestRender:
    def test_markdown_has_the_front_matter_fields_then_the_body(self, small_memory: Memory) -> None:
        rec = book(small_memory).put_info("user_profile", "prefers window seats\nno insurance",
                                          description="user prefers window seats", step_id=3)
        text = render_record(rec)
        head, body = parse_front_matter(text)
        assert list(head)[:5] == ["name", "description", "type", "step_id", "created_at"]
        assert head["name"] == "user_profile" and head["type"] == "info" and head["step_id"] == 3
        assert head["description"] == "user prefers window seats"
        assert body == "prefers window seats\nno insurance"
        assert text.startswith("---\nname: user_profile\n")


class TestReadByName:
    def test_unknown_and_invalid_names_are_reported_in_request_order(self, small_memory: Memory) -> None:
        b = book(small_memory)
        b.put_info("user_profile", "window seat", description="seat")
        result = b.read(["nope", "user_profile", "../x", "user_profile"])
        assert list(result.found) == ["user_profile"]
        assert result.missing == ["nope", "../x"]
        assert result.render().endswith("Not found: nope, ../x")

    def test_a_single_name_as_a_string_is_one_name_not_its_characters(self, small_memory: Memory) -> None:
        b = book(small_memory)
        b.put_info("user_profile", "window seat", description="seat")
        assert list(b.read("user_profile").found) == ["user_profile"]
        assert b.read("nope").missing == ["nope"]
        with pytest.raises(ValidationError, match="list of names"):
            b.read(None)  # type: ignore[arg-type]
