"""Patch-only edits (seed 003): located spans, mandatory removal reasons, idempotent re-runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mindpalace.errors import AxiomViolation, KnowledgeError
from mindpalace.knowledge.patches import Patch, apply_patch

DOC = "# Facts\n- repo at /srv/app\n- db port 5432\n"


def test_replace_changes_exactly_the_located_span() -> None:
    out = apply_patch(DOC, Patch.replace("MEMORY.md", "port 5432", "port 6543"))
    assert out == DOC.replace("5432", "6543")


def test_an_anchor_that_occurs_twice_is_refused_naming_the_count() -> None:
    with pytest.raises(KnowledgeError, match="occurs 2 times"):
        apply_patch(DOC, Patch.replace("MEMORY.md", "- ", "* "))


def test_an_anchor_that_is_absent_is_refused() -> None:
    with pytest.raises(KnowledgeError, match="not in the file"):
        apply_patch(DOC, Patch.insert("MEMORY.md", "- x", after="no such line"))


def test_a_removal_needs_a_reason() -> None:
    with pytest.raises(AxiomViolation, match=r"no-silent-deletion.*reason"):
        Patch.remove("MEMORY.md", "- db port 5432", reason=" ")


def test_remove_takes_whole_lines_with_their_line_break() -> None:
    out = apply_patch(DOC, Patch.remove("MEMORY.md", "- db port 5432", reason="moved to L2"))
    assert out == "# Facts\n- repo at /srv/app\n"


def test_a_replace_of_the_whole_file_is_an_overwrite_and_refused() -> None:
    with pytest.raises(AxiomViolation, match="overwrite"):
        apply_patch(DOC, Patch.replace("MEMORY.md", DOC, "# Facts\n- nothing\n"))


def test_a_replace_with_empty_text_is_a_removal_and_refused() -> None:
    with pytest.raises(AxiomViolation, match="use remove"):
        apply_patch(DOC, Patch.replace("MEMORY.md", "- db port 5432", "  "))


def test_insert_after_and_before_a_line_and_at_the_end() -> None:
    after = apply_patch(DOC, Patch.insert("MEMORY.md", "- cache redis", after="repo at"))
    assert after.splitlines() == ["# Facts", "- repo at /srv/app", "- cache redis", "- db port 5432"]
    before = apply_patch(DOC, Patch.insert("MEMORY.md", "intro", before="# Facts"))
    assert before.startswith("intro\n# Facts")
    assert apply_patch(None, Patch.insert("MEMORY.md", "first")) == "first\n"


def test_a_patch_of_a_missing_file_other_than_a_plain_insert_is_refused() -> None:
    with pytest.raises(KnowledgeError, match="does not exist"):
        apply_patch(None, Patch.replace("MEMORY.md", "a", "b"))


@pytest.mark.parametrize("name", ["/etc/passwd", "../USER.md", "L3/../../x.md", "L3/./a.md", "L3\\a.md",
                                  "L3/.hidden.md", "notes.txt", "L3/a.exe", "L3/sub/a.md", "", "C:/x.md",
                                  "USER.md\x00"])
def test_path_tricks_in_patch_file_names_are_refused(name: str) -> None:
    with pytest.raises(KnowledgeError):
        Patch.insert(name, "x")


def test_json_round_trip_and_unknown_fields() -> None:
    p = Patch.insert("L3/deploy.md", "step", after="# Deploy", source="record:step_3")
    assert Patch.from_json(p.to_json()) == p
    with pytest.raises(KnowledgeError, match="unknown patch fields"):
        Patch.from_json({**p.to_json(), "overwrite": True})


lines = st.lists(st.text(alphabet="abcxyz -", min_size=1, max_size=12).filter(str.strip), min_size=1, max_size=8)


@given(lines, st.text(alphabet="klmn ", min_size=1, max_size=10).filter(str.strip))
def test_applying_an_insert_twice_equals_applying_it_once(body: list[str], new: str) -> None:
    doc = "\n".join(f"{i}:{line}" for i, line in enumerate(body)) + "\n"
    patch = Patch.insert("MEMORY.md", new, after="0:")
    once = apply_patch(doc, patch)
    assert apply_patch(once, patch) == once
    assert new.rstrip() in once.split("\n")[1]


@given(lines)
def test_applying_a_replace_twice_equals_applying_it_once(body: list[str]) -> None:
    doc = "\n".join(f"{i}:{line}" for i, line in enumerate(body)) + "\n"
    patch = Patch.replace("MEMORY.md", "0:", "ZERO=")
    once = apply_patch(doc, patch)
    assert apply_patch(once, patch) == once
