"""The axioms as pure checks: volatile state, L1 limits and shape, scope folders."""

from __future__ import annotations

import pytest

from mindpalace.errors import AxiomViolation, KnowledgeError
from mindpalace.knowledge.axioms import L1Limits, check_l1, volatile_spans
from mindpalace.knowledge.layout import KnowledgeScope, check_file, scope_of_folder
from mindpalace.tokens import get_counter

COUNTER = get_counter("o200k_base")


@pytest.mark.parametrize(("text", "what"), [
    ("deployed 2024-05-01T10:00:00Z", "ISO date-time"),
    ("last run 2024-05-01 09:30", "ISO date-time"),
    ("request 123e4567-e89b-12d3-a456-426614174000 failed", "UUID"),
    ("session id: 8f2c1d", "session id"),
    ("resume sess_a8f93k2l", "session id"),
    ("worker pid 4242", "process id"),
    ("ts=1714557600", "epoch timestamp"),
    ("output in /tmp/build-3/out.txt", "temporary path"),
    ("cache at /var/tmp/x", "temporary path"),
    ("made by mkdtemp: tmpa8f9k2l1", "temporary path"),
])
def test_volatile_state_is_found_and_named(text: str, what: str) -> None:
    found = volatile_spans(text)
    assert found and what in found[0][0], found


@pytest.mark.parametrize("text", [
    "born 1990-05-01",  # a calendar date is a fact, not state
    "repo at /srv/app; config /etc/app/config.toml",
    "port 5432, database 'orders'",
    "ledger:trip/book:ab12cd34ef56ab12cd34ef56ab12cd34",  # a content hash is stable
    "see templates/tmp_files.md",
])
def test_stable_facts_pass(text: str) -> None:
    assert volatile_spans(text) == []


def test_l1_over_its_line_limit_is_refused_with_both_numbers() -> None:
    text = "".join(f"topic {i} → L3/t{i}.md\n" for i in range(31))
    with pytest.raises(AxiomViolation) as info:
        check_l1(text, L1Limits(30, 1024), COUNTER)
    assert "31 lines" in str(info.value) and "30 lines" in str(info.value)
    assert info.value.axiom == "l1-limits"


def test_l1_over_its_token_limit_is_refused_with_both_numbers() -> None:
    text = "search → " + "L3/a_very_long_pointer_name.md, " * 40 + "\n"
    tokens = COUNTER.count(text)
    with pytest.raises(AxiomViolation, match=f"{tokens} tokens.*100 tokens"):
        check_l1(text, L1Limits(30, 100), COUNTER)


@pytest.mark.parametrize("line", ["1. open the browser, then click upload", "Step 2 run make",
                                  "the deploy needs a maintenance window and a backup before it starts"])
def test_l1_refuses_procedures_and_prose(line: str) -> None:
    with pytest.raises(AxiomViolation, match="not a pointer"):
        check_l1(f"# Insight index\n{line}\n", L1Limits(30, 1024), COUNTER)


def test_l1_accepts_pointers_headings_and_settings() -> None:
    check_l1("# [Global Memory Insight]\nbrowser upload, PDF blob → L3/browser.md\n"
             "deploy: L3/deploy.md | L2_facts.md\nsearch_engine = ddg\n", L1Limits(30, 1024), COUNTER)


@pytest.mark.parametrize("name", ["..", ".", "a/b", "x y", "ünï", "../../etc"])
def test_a_scope_name_is_one_folder_and_round_trips(name: str) -> None:
    scope = KnowledgeScope.user(name, tenant="t/../x")
    parts = scope.folder.split("/")
    assert len(parts) == 3 and ".." not in parts and "." not in parts
    assert scope_of_folder(scope.folder) == scope


def test_bad_scopes_are_refused() -> None:
    with pytest.raises(KnowledgeError):
        KnowledgeScope.user("")
    with pytest.raises(KnowledgeError):
        KnowledgeScope.parse("team:x")
    assert KnowledgeScope.parse("agent:planner") == KnowledgeScope.agent("planner")


def test_layout_names() -> None:
    assert check_file("L3/deploy.md") == "L3/deploy.md"
    assert check_file("L3/fetch.py") == "L3/fetch.py"
    assert check_file(".dream_cursor") == ".dream_cursor"
