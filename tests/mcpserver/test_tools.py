"""The tools in-process (no transport): concurrent calls, one idempotency key raced by many
requests, tenant handles."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver.exceptions import ToolError

from mindpalace import Memory
from mindpalace.aio import AsyncMemory
from mindpalace.errors import ValidationError
from mindpalace.mcpserver import MemoryTools, ToolDefaults


def _tools(ws: Path) -> MemoryTools:
    return MemoryTools(AsyncMemory(Memory.open(ws, embed={"provider": "hashing"})),
                       ToolDefaults(user_id="u1", session_id="s1"))


def test_one_key_raced_by_many_requests_writes_once(tmp_path: Path) -> None:
    tools = _tools(tmp_path / "ws")
    outcomes: list[str] = []

    async def one() -> None:
        try:
            r = await tools.remember("user:city", "Kyoto", importance=0.9, idempotency_key="race")
            outcomes.append("replayed" if r.replayed else "wrote")
        except ToolError as exc:  # the key is in flight in another request: nothing written
            assert "ToolCallInFlightError" in str(exc) and "still running" in str(exc)
            outcomes.append("in flight")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(one)
        after = await tools.remember("user:city", "Kyoto", importance=0.9, idempotency_key="race")
        assert after.replayed
        await tools.memory.aclose()

    anyio.run(main)
    assert outcomes.count("wrote") == 1 and len(outcomes) == 20
    with Memory.open(tmp_path / "ws", create=False) as mem:
        assert len(mem.session("s1", user="u1").facts.history("user:city")) == 1


def test_many_concurrent_writes_on_one_session_lose_nothing(tmp_path: Path) -> None:
    tools = _tools(tmp_path / "ws")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(lambda i=i: tools.remember(f"item{i}:name", f"thing {i}",
                                                         importance=0.9, idempotency_key=f"k{i}"))
                tg.start_soon(lambda i=i: tools.checkpoint(artifacts={f"a{i}": i}))
        status = await tools.task_status()
        assert status.version == 30
        assert {f"item{i}:name" for i in range(30)} <= {
            h.key for h in (await tools.recall("thing", limit=100)).results if h.key}
        await tools.memory.aclose()

    anyio.run(main)


def test_tenant_handles_share_the_store_and_nothing_else(tmp_path: Path) -> None:
    async def main() -> None:
        root = AsyncMemory(Memory.open(tmp_path / "ws", embed={"provider": "hashing"}))
        a, b = root.for_tenant("a"), root.for_tenant("b")
        assert root.for_tenant("a") is a and a.memory.store is root.memory.store
        await a.session("s", user="u").remember("user:x", "only a", importance=0.9)
        assert await b.session("s", user="u").facts.get("user:x") is None
        assert (await a.session("s", user="u").facts.get("user:x")) is not None
        await a.aclose()  # a tenant handle closes nothing
        assert (await root.for_tenant("a").session("s", user="u").recall("only a"))
        await root.aclose()

    anyio.run(main)
    with Memory.open(tmp_path / "ws2") as mem, pytest.raises(ValidationError, match=r"scope\.tenant"):
        mem.for_tenant(1)  # type: ignore[arg-type]


_ids = st.sampled_from(["", "u1", "u2", "trip-42", "mcp"])


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writer=st.tuples(_ids, _ids, _ids), reader=st.tuples(_ids, _ids, _ids),
       key=st.sampled_from(["same-key", "other-key"]))
def test_i10_no_read_tool_of_another_tenant_sees_a_write(
    tmp_path_factory: pytest.TempPathFactory, writer: tuple[str, str, str],
    reader: tuple[str, str, str], key: str,
) -> None:
    """Whatever user / agent / session ids either side picks, nothing tenant a wrote comes back
    through any read tool of tenant b, and an idempotency key of a's is unknown to b (I10)."""
    ws = tmp_path_factory.mktemp("i10") / "ws"
    secret = "tenant-a-secret-walrus"

    async def main() -> None:
        root = AsyncMemory(Memory.open(ws, embed={"provider": "hashing"}))
        a = MemoryTools(root, ToolDefaults(tenant="a"))
        b = MemoryTools(root, ToolDefaults(tenant="b"))
        wu, wa, wsn = writer
        ru, ra, rs = reader
        w = {"user_id": wu, "agent_id": wa, "session_id": wsn or "s"}
        r = {"user_id": ru, "agent_id": ra, "session_id": rs or "s"}
        await a.remember("user:code", secret, importance=0.9, idempotency_key="same-key", **w)
        step = await a.record_step(goal=f"note {secret}", evaluation="success", **w)
        await a.set_constraint("code", secret, **w)
        await a.checkpoint(artifacts={"code": secret}, **w)
        seen = [
            await b.recall(secret, limit=50, **r),
            await b.read_records([f"step_{step.step}", "fact:user:code", "history:1"], **r),
            await b.get_context(query=secret, **r),
            await b.task_status(**r),
        ]
        assert all(secret not in out.model_dump_json() for out in seen)
        assert not (await b.forget("user:code", **r)).forgotten
        again = await b.remember("user:code", "b's own", importance=0.9, idempotency_key=key, **r)
        assert not again.replayed
        assert secret in (await a.recall(secret, **w)).model_dump_json()  # a's memory is intact
        await root.aclose()

    anyio.run(main)


def test_numbers_and_flags_are_as_strict_as_rest(tmp_path: Path) -> None:
    """REST refuses ``"budget_tokens": "100"`` (422); MCP's argument models were lax and
    coerced "0.9", true, "5", 5.0 into numbers and stored them. The same inputs are tool
    errors naming the argument, and nothing is written."""
    from mcp import Client

    from mindpalace.mcpserver.server import build_server

    from .helpers import call, refused

    async def main() -> None:
        amem = AsyncMemory(Memory.open(tmp_path / "ws", embed={"provider": "hashing"}))
        async with amem, Client(build_server(amem, ToolDefaults(user_id="u1"))) as c:
            cases: list[tuple[str, dict[str, object], str]] = [
                ("remember", {"key": "user:x", "content": "x", "importance": "0.9"}, "importance"),
                ("remember", {"key": "user:x", "content": "x", "importance": True}, "importance"),
                ("recall", {"query": "x", "limit": "5"}, "limit"),
                ("recall", {"query": "x", "limit": 5.0}, "limit"),
                ("recall", {"query": "x", "limit": True}, "limit"),
                ("get_context", {"budget_tokens": "100"}, "budget_tokens"),
                ("get_context", {"budget_tokens": 100.0}, "budget_tokens"),
                ("record_step", {"goal": "g", "evaluation": "success", "step": "1"}, "step"),
                ("checkpoint", {"step": "2"}, "step"),
                ("checkpoint", {"step": True}, "step"),
            ]
            for tool, args, named in cases:
                message = await refused(c, tool, **args)
                assert named in message, f"{tool}({args}): {message!r} does not name {named!r}"
            status = await call(c, "task_status")
            assert status["version"] == 0 and status["exists"] is False
            assert (await call(c, "recall", query="x"))["results"] == []
            # an int is still a number for a share, as in REST's strict float
            assert (await call(c, "remember", key="user:x", content="x", importance=1))["fact"]["importance"] == 1.0

    anyio.run(main)


def test_a_key_names_one_call_of_one_tool_with_arguments_of_the_same_json_types(tmp_path: Path) -> None:
    """New-user findings: a replay compared arguments with Python equality, so true == 1 ==
    1.0 — set_constraint(value=true) after set_constraint(value=1) with one key answered
    ``replayed`` and left the constraint 1; and a key was one call per tool, so forget with
    the key a remember used ran a second write."""
    from mcp import Client

    from mindpalace.mcpserver.server import build_server

    from .helpers import call, refused

    async def main() -> None:
        amem = AsyncMemory(Memory.open(tmp_path / "ws", embed={"provider": "hashing"}))
        async with amem, Client(build_server(amem, ToolDefaults(user_id="u1"))) as c:
            await call(c, "set_constraint", name="n", value=1, idempotency_key="x1")
            for other in (True, 1.0):
                message = await refused(c, "set_constraint", name="n", value=other, idempotency_key="x1")
                assert "first used with other arguments" in message
            again = await call(c, "set_constraint", name="n", value=1, idempotency_key="x1")
            assert again["replayed"] and (await call(c, "task_status"))["constraints"] == {"n": 1}
            await call(c, "checkpoint", artifacts={"a": 1}, idempotency_key="c1")
            assert "other arguments" in await refused(c, "checkpoint", artifacts={"a": True}, idempotency_key="c1")
            await call(c, "remember", key="user:city", content="Porto", importance=0.9, idempotency_key="k1")
            message = await refused(c, "forget", key="user:city", idempotency_key="k1")
            assert "'k1'" in message and "remember" in message
            # a refused call holds no key: another tool may use it
            assert "entity:attribute" in await refused(c, "remember", key="nocolon", content="x",
                                                       idempotency_key="k2")  # refused by the engine
            assert (await call(c, "forget", key="user:x", idempotency_key="k2"))["replayed"] is False
            hits = (await call(c, "recall", query="city"))["results"]
            assert [h["memory"] for h in hits if h["key"] == "user:city"] == ["user:city: Porto"]

    anyio.run(main)


def test_one_key_raced_by_two_tools_runs_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """New-user finding: a key was refused for a second tool only when the first tool's ledger
    row already existed — two tools racing one key both passed that look and both wrote. Here
    remember(key K) is held right before its ledger row is written while forget(key K) runs."""
    import threading

    from mindpalace.mcpserver.idempotency import LEDGER_TASK
    from mindpalace.tasks.ledger import ToolCall

    held, other_done = threading.Event(), threading.Event()
    original = ToolCall.run

    def run(self: ToolCall, fn, **kw):  # type: ignore[no-untyped-def]
        if self.task != LEDGER_TASK:
            return original(self, fn, **kw)
        if not held.is_set():  # the first keyed write: wait until the other one finished
            held.set()
            assert other_done.wait(timeout=60)
            return original(self, fn, **kw)
        try:
            return original(self, fn, **kw)
        finally:
            other_done.set()

    monkeypatch.setattr(ToolCall, "run", run)
    tools = _tools(tmp_path / "ws")
    outcomes: dict[str, str] = {}

    async def main() -> None:
        await tools.remember("user:city", "Porto", importance=0.9)  # no key: not held

        async def first() -> None:
            try:
                await tools.remember("user:city", "Kyoto", importance=0.9, idempotency_key="K")
                outcomes["remember"] = "wrote"
            except ToolError as exc:
                outcomes["remember"] = str(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await anyio.to_thread.run_sync(held.wait)
            forgot = await tools.forget("user:city", idempotency_key="K")
            outcomes["forget"] = "wrote" if forgot.forgotten else "nothing"
        await tools.memory.aclose()

    anyio.run(main)
    assert outcomes["forget"] == "wrote"
    assert "'K'" in outcomes["remember"] and "forget" in outcomes["remember"], outcomes
    with Memory.open(tmp_path / "ws", create=False) as mem:
        assert mem.session("s1", user="u1").facts.peek("user:city") is None  # Kyoto never written


def test_the_write_tools_are_the_tools_that_take_an_idempotency_key(tmp_path: Path) -> None:
    import inspect

    from mindpalace.mcpserver.tools import TOOL_NAMES, TOOLS, WRITE_TOOLS

    tools = _tools(tmp_path / "ws")
    listed = tools.all()
    assert [n for n, _, _ in listed] == list(TOOL_NAMES) == [n for n, _ in TOOLS]
    writes = [n for n, fn, _ in listed if "idempotency_key" in inspect.signature(fn).parameters]
    assert writes == list(WRITE_TOOLS) == [n for n, _, read_only in listed if not read_only]
    anyio.run(tools.memory.aclose)


def test_a_key_held_by_a_row_of_an_earlier_version_is_still_honoured(tmp_path: Path) -> None:
    """Rows written before keys were one row per key (``<tool>:<key>``) still replay their
    call and refuse another tool's."""
    from mindpalace.mcpserver.idempotency import LEDGER_SESSION, LEDGER_TASK

    with Memory.open(tmp_path / "ws", embed={"provider": "hashing"}) as mem:
        args = {"key": "user:city", "user_id": "u1", "agent_id": "", "session_id": "s1"}
        with mem.session(LEDGER_SESSION).tasks(LEDGER_TASK).tool_call("forget", args, key="old") as call:
            call.run(lambda **_: {"key": "user:city", "forgotten": True})
    tools = _tools(tmp_path / "ws")

    async def main() -> None:
        again = await tools.forget("user:city", idempotency_key="old")
        assert again.replayed and again.forgotten
        with pytest.raises(ToolError, match="first used by the tool 'forget'"):
            await tools.remember("user:city", "Kyoto", importance=0.9, idempotency_key="old")
        assert (await tools.forget("user:city", idempotency_key="new")).forgotten is False
        await tools.memory.aclose()

    anyio.run(main)


def test_an_unknown_argument_is_refused_naming_it_and_nothing_is_stored(tmp_path: Path) -> None:
    """New-user finding: a misspelt argument was dropped without a word — remember(importnace=0.9)
    stored the fact at the default 0.5 (not kept long-term) and remember(idempotencyKey="k")
    ran without exactly-once; REST refuses unknown fields, and so does the agent loop."""
    from mcp import Client

    from mindpalace.mcpserver.server import build_server

    from .helpers import call, refused

    async def main() -> None:
        amem = AsyncMemory(Memory.open(tmp_path / "ws", embed={"provider": "hashing"}))
        async with amem, Client(build_server(amem, ToolDefaults(user_id="u1"))) as c:
            for typo in ({"importnace": 0.9}, {"idempotencyKey": "k1"}, {"user": "u2"}):
                message = await refused(c, "remember", key="user:city", content="Kyoto", **typo)
                assert next(iter(typo)) in message and "Extra inputs are not permitted" in message
            assert "tool_id" in await refused(c, "task_status", tool_id="x")  # a read tool too
            assert (await call(c, "task_status"))["version"] == 0
            assert (await call(c, "recall", query="Kyoto"))["results"] == []
            listed = await c.list_tools()
            assert all(t.input_schema.get("additionalProperties") is False for t in listed.tools)

    anyio.run(main)
