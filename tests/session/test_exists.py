"""Session.exists: whether anything is stored in the session's own scope (new-user finding:
the REST status and `session show` of a typo answered like an empty session)."""

from __future__ import annotations

from pathlib import Path

import anyio

from mindpalace import Memory
from mindpalace.aio import AsyncMemory


def test_a_session_exists_once_anything_is_stored_in_its_scope(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}, lineage={"enabled": False}) as mem:
        def fresh(sid: str):  # type: ignore[no-untyped-def]
            s = mem.session(sid, user="u1", agent="a")
            assert not s.exists()
            return s
        fresh("m").add_message({"role": "user", "content": "hi"})
        fresh("s").steps.begin("search")
        fresh("t").checkpoint(step=1)
        fresh("f").remember("user:city", "Lisbon", importance=0.1)  # working memory only
        for sid in "mstf":
            assert mem.session(sid, user="u1", agent="a").exists()
        assert not mem.session("m", user="u2", agent="a").exists()  # another scope
        assert not mem.session("nope", user="u1", agent="a").exists()
        assert not mem.for_tenant("other").session("m", user="u1", agent="a").exists()


def test_the_async_twin(tmp_path: Path) -> None:
    async def main() -> None:
        async with await AsyncMemory.open(tmp_path / "ws", embed={"provider": "none"}) as amem:
            s = amem.session("m", user="u1")
            assert not await s.exists()
            await s.add_message({"role": "user", "content": "hi"})
            assert await s.exists()
    anyio.run(main)
