"""The async facade: same results as the sync one, and many concurrent coroutines on one
workspace lose nothing (real SQLite store, real worker threads)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mindpalace import Memory
from mindpalace.aio import AsyncMemory, AsyncSession
from mindpalace.errors import ConstraintError, NotFoundError, ValidationError

CONCURRENT = 50


def _open(path: Path, **kw: object) -> AsyncMemory:
    # every coroutine may hold a pending step at once: room for all of them in the pending buffer
    mem = Memory.open(path, embed={"provider": "hashing"}, steps={"pending_max_lines": 2 * CONCURRENT})
    return AsyncMemory(mem, **kw)  # type: ignore[arg-type]


async def _write_all(s: AsyncSession, n: int, tag: str) -> None:
    """n coroutines each add a message, remember a fact and begin + evaluate a step."""
    async def one(i: int) -> None:
        await s.add_message({"role": "user", "content": f"{tag} message {i}"})
        await s.remember(f"item{i}:colour", f"{tag} colour {i}", importance=0.9)
        step = await s.steps.begin(f"{tag} goal {i}")
        await s.steps.evaluate(step, "success", analysis=f"{tag} analysis {i}")
        await s.checkpoint(artifacts={f"k{i}": i})

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)


def test_many_coroutines_on_one_session_lose_nothing(workspace_dir: Path, uid: str) -> None:
    async def main() -> None:
        async with _open(workspace_dir, max_threads=8) as mem:
            s = mem.session(f"s-{uid}", user="u", agent="a")
            await _write_all(s, CONCURRENT, "one")
            msgs = await s.messages.list()
            assert sorted(m.index for m in msgs) == list(range(1, CONCURRENT + 1))
            assert {m.message["content"] for m in msgs} == {f"one message {i}" for i in range(CONCURRENT)}
            facts = {f.key: f.content for f in await s.facts.list()}
            assert facts == {f"item{i}:colour": f"one colour {i}" for i in range(CONCURRENT)}
            records = await s.steps.records(type="step")
            assert len(records) == CONCURRENT
            assert len({r.name for r in records}) == CONCURRENT
            state = await s.steps.state()
            assert not state.pending
            # 50 checkpoint events: every one landed, with a distinct version
            history = await s.task.history()
            assert sum(1 for e in history if e.type == "checkpoint") == CONCURRENT
            assert len({e.version for e in history}) == len(history)

    anyio.run(main)


def test_many_coroutines_on_several_sessions_stay_apart(workspace_dir: Path, uid: str) -> None:
    sessions = 5

    async def main() -> None:
        async with _open(workspace_dir) as mem:
            ss = [mem.session(f"s{j}-{uid}", user=f"u{j}") for j in range(sessions)]
            async with anyio.create_task_group() as tg:
                for j, s in enumerate(ss):
                    tg.start_soon(_write_all, s, CONCURRENT // sessions, f"t{j}")
            for j, s in enumerate(ss):
                msgs = await s.messages.list()
                assert [m.index for m in msgs] == list(range(1, CONCURRENT // sessions + 1))
                assert all(m.message["content"].startswith(f"t{j} ") for m in msgs)
                facts = await s.facts.list()
                assert len(facts) == CONCURRENT // sessions
                assert all(f.content.startswith(f"t{j} ") for f in facts)
                hits = await s.recall("colour", k=50)
                assert hits and all(h.text.find(f"t{j} ") >= 0 for h in hits)  # never another user's

    anyio.run(main)


def test_async_twin_returns_what_the_sync_facade_returns(workspace_dir: Path, uid: str) -> None:
    async def main() -> None:
        async with _open(workspace_dir) as mem:
            s = mem.session(f"s-{uid}", user="u")
            await s.add_message({"role": "user", "content": "Five days in Tokyo, 8000 CNY"})
            await s.remember("user:city", "Tokyo", importance=0.9)
            await s.constraints.set("budget_cny", 8000, source="user")
            step = await s.steps.begin("find hotels")
            await s.steps.evaluate(step, "success", analysis="three under budget")
            version = await s.checkpoint(step=step, artifacts={"hotels": 3})
            built = await s.context(budget_tokens=4_000)
            prepared = await s.prepare(budget_tokens=4_000)
            read = await s.read_records([f"step_{step}", "nope_1"])
            hits = await s.recall("Tokyo", k=3)

            sync = mem.memory.session(f"s-{uid}", user="u")
            assert any("Tokyo" in str(m.get("content")) for m in built.messages)
            assert prepared.messages == (await s.context(budget_tokens=4_000)).messages
            assert prepared.messages == sync.context(budget_tokens=4_000).messages
            assert read.missing == sync.read_records([f"step_{step}", "nope_1"]).missing
            assert [h.ref for h in hits] == [h.ref for h in sync.recall("Tokyo", k=3)]
            assert await s.constraints.all() == {"budget_cny": 8000}
            assert (await s.task.state()).artifacts == {"hotels": 3}
            assert await s.task.version() == version
            assert await s.forget("user:city") is True
            assert await s.facts.get("user:city") is None

    anyio.run(main)


def test_errors_are_the_sync_errors(workspace_dir: Path, uid: str) -> None:
    async def main() -> None:
        async with _open(workspace_dir) as mem:
            s = mem.session(f"s-{uid}")
            with pytest.raises(ValidationError, match="entity:attribute"):
                await s.remember("no-colon", "x")
            with pytest.raises(NotFoundError):
                await s.steps.evaluate(99, "success")
            with pytest.raises(ConstraintError):
                await s.constraints.set("budget", 1, source="tool")
            with pytest.raises(NotFoundError):
                await mem.find_task("nothing-here")
            with pytest.raises(ValidationError):
                mem.session("x" * 300)

    anyio.run(main)


def test_bad_thread_bound_is_refused(workspace_dir: Path) -> None:
    mem = Memory.open(workspace_dir)
    try:
        for bad in (0, -1, True, 2.5):
            with pytest.raises(ValidationError, match="max_threads"):
                AsyncMemory(mem, max_threads=bad)  # type: ignore[arg-type]
    finally:
        mem.close()


def test_open_and_find_task(workspace_dir: Path, uid: str) -> None:
    async def main() -> None:
        mem = await AsyncMemory.open(workspace_dir, embed={"provider": "hashing"})
        async with mem:
            s = mem.session(f"s-{uid}", user="u")
            await s.tasks("trip").plan(["a", "b"])
            found = await mem.find_task("trip")
            assert (await found.state()).plan == ["a", "b"]
            assert await s.tasks.list() == [("trip", 1)]

    anyio.run(main)
