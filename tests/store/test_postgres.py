"""The PostgreSQL backend behind the facade: opened by URL, a whole agent turn on both
backends, the refusals (unreachable server, newer schema), and CI's no-skip guard."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from mindpalace import Memory
from mindpalace.errors import SchemaVersionError, StoreError
from mindpalace.session import SessionBusyError
from mindpalace.store import open_store
from mindpalace.store.postgres import SCHEMA_VERSION, PostgresStore
from mindpalace.testing import postgres


def test_ci_never_skips_the_postgresql_half() -> None:
    """With MINDPALACE_REQUIRE_POSTGRES=1 (set by .ci/run) the test server must be there and
    have pgvector and pg_trgm; without it this test says the run is a local one."""
    if not postgres.required():
        pytest.skip("local run: MINDPALACE_REQUIRE_POSTGRES is not set (CI sets it)")
    url = os.environ.get(postgres.URL_VAR)
    assert url, f"{postgres.URL_VAR} must be set when {postgres.REQUIRE_VAR}=1"
    with psycopg.connect(url) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM pg_available_extensions")}
    assert {"vector", "pg_trgm"} <= names


def test_open_by_url_keeps_only_disk_things_in_the_folder(pg_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    with Memory.open(pg_url, workspace=folder, embed={"provider": "hashing"}) as mem:
        assert isinstance(mem.store, PostgresStore)
        s = mem.session("trip", user="u1", agent="planner")
        s.add_message({"role": "user", "content": "my hotel budget is 2000 CNY a night"})
        s.remember("user:budget", "2000 CNY a night", importance=0.9)
        assert mem.stats().store.events >= 1
    assert not (folder / "memory.db").exists()
    assert (folder / "mindpalace.toml").is_file() and (folder / "knowledge" / ".git").is_dir()
    # a reader (create=False) opens the folder, the memory comes from the database
    with Memory.open(folder, create=False, database_url=pg_url,
                     embed={"provider": "hashing"}) as again:
        s = again.session("trip", user="u1", agent="planner")
        assert [m.message["content"] for m in s.messages.list()] == [
            "my hotel budget is 2000 CNY a night"]
        assert s.facts.get("user:budget").content == "2000 CNY a night"  # type: ignore[union-attr]


def test_a_whole_agent_turn(memory: Memory, uid: str) -> None:
    """Runs on both backends (the memory fixture): messages, prepare with consolidation,
    recall, remember, an exactly-once tool call and the turn lease."""
    s = memory.session(uid, user="u", agent="a")
    for i in range(30):
        s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                       "content": f"turn {i}: flight UA{100 + i} to Tokyo, hotel near Senso-ji " * 3})
    built = s.prepare(budget_tokens=900)
    assert built.report.consolidation is not None and built.report.consolidation.consolidated
    assert s.consolidator.last_consolidated > 0
    s.remember("user:city", "Lisbon", importance=0.9)
    assert any(h.fact is not None and h.fact.content == "Lisbon" for h in s.recall("Lisbon"))
    assert any("UA1" in h.text for h in s.recall("flight UA101 Tokyo", k=20))
    runs: list[int] = []
    for _ in range(2):
        with s.tool_call("book_hotel", {"night": 1}) as call:
            result = call.result if call.done else call.run(lambda night: runs.append(night) or "ok")
        assert result == "ok"
    assert runs == [1]
    with s.lease(holder="worker-1"), pytest.raises(SessionBusyError):  # noqa: SIM117
        with memory.session(uid, user="u", agent="a").lease(holder="worker-2"):
            pass


def test_an_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot connect"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_a_newer_schema_is_refused_and_left_alone(pg_url: str) -> None:
    PostgresStore(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO mp_schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaVersionError):
        PostgresStore(pg_url)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT max(version) FROM mp_schema_version").fetchone() == (
            SCHEMA_VERSION + 1,)


def test_many_stores_opening_at_once_migrate_once(pg_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: PostgresStore(pg_url), range(4)))
    for st in stores:
        st.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM mp_schema_version").fetchone() == (
            SCHEMA_VERSION,)
