"""What every transport must do: the same calls and assertions over stdio and over HTTP."""

from __future__ import annotations

import math
from typing import Any

from mcp import Client

from mindpalace.mcpserver import TOOL_NAMES

from .helpers import call, names, refused


async def every_tool_works(c: Client, **scope: Any) -> None:
    """List the tools, then call each one on its happy path (`scope`: user_id / session_id …)."""
    tools = {t.name: t for t in (await c.list_tools()).tools}
    assert sorted(tools) == sorted(TOOL_NAMES)
    assert all(t.output_schema is not None for t in tools.values())  # structured outputs
    assert "idempotency_key" in tools["remember"].input_schema["properties"]
    assert "idempotency_key" not in tools["recall"].input_schema["properties"]  # reads have none

    kept = await call(c, "remember", key="user:city", content="Tokyo", importance=0.9, **scope)
    assert kept["fact"]["key"] == "user:city" and kept["fact"]["id"] and not kept["replayed"]
    hits = (await call(c, "recall", query="which city", limit=5, **scope))["results"]
    assert hits[0]["id"] == "fact:user:city" and "Tokyo" in hits[0]["memory"]

    done = await call(c, "record_step", goal="search hotels", evaluation="success",
                      analysis="three under budget", tool_outputs=["Hilton 1800", "APA 900"], **scope)
    assert done == {"replayed": False, "step": 1, "status": "evaluated", "record": "step_1"}
    pending = await call(c, "record_step", goal="book the APA", action="book(APA)", **scope)
    assert pending["status"] == "pending" and pending["step"] == 2
    failed = await call(c, "record_step", step=2, evaluation="failed", analysis="sold out", **scope)
    assert failed["record"] == "step_2"

    read = await call(c, "read_records", names=["step_1", "fact:user:city", "step_99"], **scope)
    assert names(read["records"]) == ["step_1", "fact:user:city"]
    assert "Hilton 1800" in read["records"][0]["content"] and read["missing"] == ["step_99"]

    constraint = await call(c, "set_constraint", name="budget_cny", value=2000, note="per night", **scope)
    assert constraint["constraints"] == {"budget_cny": 2000}
    point = await call(c, "checkpoint", step=2, artifacts={"hotel": "APA"}, pending=["pay"], **scope)
    status = await call(c, "task_status", **scope)
    assert status["version"] == point["version"] and status["exists"]
    assert status["artifacts"] == {"hotel": "APA"} and status["pending"] == ["pay"]
    assert status["constraints"] == {"budget_cny": 2000}

    built = await call(c, "get_context", budget_tokens=4_000, query="city", **scope)
    assert built["total_tokens"] <= built["budget_tokens"] == 4_000
    prompt = str(built["messages"])
    assert "budget_cny = 2000" in prompt and "Step 1" in prompt and "Tokyo" in prompt

    assert (await call(c, "forget", key="user:city", **scope))["forgotten"] is True
    after = (await call(c, "recall", query="which city", **scope))["results"]
    assert "fact:user:city" not in names(after, "id")
    assert (await call(c, "forget", key="user:city", **scope))["forgotten"] is False


async def bad_input_is_a_tool_error(c: Client, **scope: Any) -> None:
    """Each bad input comes back as a tool error naming what was wrong; the server lives on."""
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("remember", {"key": "user:x"}, "content"),  # missing argument
        ("remember", {"key": "nocolon", "content": "x"}, "entity:attribute"),
        ("remember", {"key": "user:x", "content": "x", "importance": 7}, "importance"),
        ("remember", {"key": "user:x", "content": "x", "importance": math.nan}, "importance"),
        ("remember", {"key": "user:x", "content": 42}, "content"),
        ("recall", {"query": "x", "limit": 0}, "limit"),
        ("recall", {"query": ""}, "query"),
        ("read_records", {"names": []}, "names"),
        ("read_records", {"names": "step_1"}, "names"),
        ("record_step", {}, "goal"),
        ("record_step", {"step": 1}, "evaluation"),
        ("record_step", {"step": 99, "evaluation": "success"}, "pending step"),
        ("set_constraint", {"name": "budget", "value": 1, "source": "tool"}, "refused"),
        ("set_constraint", {"name": "budget", "value": 1, "source": "root"}, "source"),
        ("set_constraint", {"name": "../etc", "value": 1}, "path separator"),
        ("checkpoint", {"artifacts": "not an object"}, "artifacts"),
        ("get_context", {"budget_tokens": -5}, "budget_tokens"),
        ("task_status", {"task_id": "a/b"}, "a/b"),
        ("no_such_tool", {}, "Unknown tool"),
        ("remember", {"key": "user:x", "content": "x", "session_id": "mcp-idempotency"}, "reserved"),
    ]
    for tool, args, named in cases:
        message = await refused(c, tool, **{**scope, **args})
        assert named in message, f"{tool}({args}): {message!r} does not name {named!r}"
    # nothing above was stored, and the server still answers
    status = await call(c, "task_status", **scope)
    assert "budget" not in status["constraints"]


async def idempotency_key_replays(c: Client, **scope: Any) -> dict[str, Any]:
    """A repeated key returns the first result and writes nothing; returns the first result."""
    first = await call(c, "remember", key="user:pet", content="a cat named Miso", importance=0.9,
                       idempotency_key="pet-1", **scope)
    again = await call(c, "remember", key="user:pet", content="a cat named Miso", importance=0.9,
                       idempotency_key="pet-1", **scope)
    assert not first["replayed"] and again["replayed"]
    assert again["fact"] == first["fact"]  # same version: nothing new was stored
    other = await refused(c, "remember", key="user:pet", content="a dog", importance=0.9,
                          idempotency_key="pet-1", **scope)
    assert "first used with other arguments" in other

    step = await call(c, "record_step", goal="call the vet", idempotency_key="vet-1", **scope)
    assert (await call(c, "record_step", goal="call the vet", idempotency_key="vet-1",
                       **scope))["step"] == step["step"]
    nxt = await call(c, "record_step", goal="buy food", **scope)
    assert nxt["step"] == step["step"] + 1  # the replay began no step
    # a refused write leaves its key usable
    await refused(c, "forget", key="nocolon", idempotency_key="bad-1", **scope)
    assert not (await call(c, "forget", key="user:nothing", idempotency_key="bad-1", **scope))["replayed"]
    return first


async def resources_are_a_seam(c: Client) -> None:
    """No knowledge files yet (issue 12): the server lists no resources, and says so cleanly."""
    assert (await c.list_resources()).resources == []
