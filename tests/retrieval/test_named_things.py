"""Two things of one kind are not one subject for a query that names one of them: "Server db-8
has 128 GB of RAM." was taken as the correction of "Server db-7 has 64 GB of RAM." (alike
sentences, shared subject words), so "How much RAM does server db-7 have?" ranked db-8 first
and marked db-7's line corrected (a new-user test with the offline default embedder)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.retrieval.supersession import identifiers, names_another

STATEMENTS = ("Server db-7 has 64 GB of RAM.", "Server db-8 has 128 GB of RAM.")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    mem = Memory.open(Path(tmp_path_factory.mktemp("named")) / "ws", embed={"provider": "use"})
    start = datetime(2025, 3, 1, tzinfo=UTC)
    s = mem.session("ops", user="u", agent="a")
    for n, text in enumerate(STATEMENTS):
        s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))
        s.add_message({"role": "assistant", "content": "Noted."}, timestamp=start + timedelta(days=n, minutes=1))
    try:
        yield mem
    finally:
        mem.close()


def _marks(mem: Memory, query: str) -> list[tuple[str, object, object]]:
    hits = mem.session("q", user="u", agent="a").recall(query, k=4)
    return [(h.text, h.meta.get("supersedes"), h.meta.get("superseded_by")) for h in hits]


@pytest.mark.slow
class TestNamedThings:
    @pytest.mark.parametrize(("query", "named"), [
        ("How much RAM does server db-7 have?", "db-7"), ("How much RAM does server db-8 have?", "db-8"),
    ])
    def test_the_thing_the_query_names_is_neither_corrected_nor_corrects(
        self, servers: Memory, query: str, named: str
    ) -> None:
        marks = _marks(servers, query)
        assert named in marks[0][0]
        assert all(m[1] is None and m[2] is None for m in marks), marks

    def test_a_query_naming_nothing_still_sees_the_newer_statement_first(self, servers: Memory) -> None:
        marks = _marks(servers, "How much RAM does the server have?")
        assert "db-8" in marks[0][0]

    def test_a_later_statement_on_the_named_thing_is_still_its_correction(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws", embed={"provider": "use"}) as mem:
            s = mem.session("ops", user="u", agent="a")
            start = datetime(2025, 3, 1, tzinfo=UTC)
            texts = (*STATEMENTS, "Server db-7 was upgraded to 256 GB of RAM.")
            for n, text in enumerate(texts):
                s.add_message({"role": "user", "content": text}, timestamp=start + timedelta(days=n))
            hits = s.recall("How much RAM does server db-7 have?", k=3)
            assert "256 GB" in hits[0].text
            older = next(h for h in hits if "64 GB" in h.text)
            assert older.meta.get("superseded_by")


class TestIdentifiers:
    @pytest.mark.parametrize(("text", "names"), [
        ("Server db-7 has 64 GB of RAM.", {"db-7"}),
        ("The A320 left gate B12 at 5pm; ticket PR-1234.", {"a320", "b12", "pr-1234"}),
        ("I ran 10k on the 3rd, 2023-05-08.", set()),
        ("Nothing numbered here.", set()),
    ])
    def test_names_with_a_number_in_them(self, text: str, names: set[str]) -> None:
        assert identifiers(text) == names

    def test_two_named_things_for_a_query_naming_one(self) -> None:
        a, b = STATEMENTS
        assert names_another(identifiers("RAM of db-7?"), a, b)
        assert names_another(identifiers("RAM of db-8?"), a, b)

    def test_no_veto_without_a_named_thing_or_a_rival_name(self) -> None:
        a, b = STATEMENTS
        assert not names_another(frozenset(), a, b)  # "We moved from B12 to C14" may correct
        assert not names_another(identifiers("RAM of db-7?"), a, "It has 128 GB now.")
        assert not names_another(identifiers("RAM of db-7?"), a, "db-7 got 128 GB; db-9 too.")
