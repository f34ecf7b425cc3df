"""The MCP server over stdio: ``python -m mindpalace.cli mcp`` spawned by the SDK's own
stdio client."""

from __future__ import annotations

from pathlib import Path

import anyio

from mindpalace import Memory

from .helpers import call, stdio_client
from .scenarios import (
    bad_input_is_a_tool_error,
    every_tool_works,
    idempotency_key_replays,
    resources_are_a_seam,
)


def test_every_tool_bad_input_and_replay_across_a_restart(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    Memory.open(ws).close()

    async def main() -> None:
        async with stdio_client(ws, "--user", "u1", "--agent", "planner") as c:
            await every_tool_works(c)
            await resources_are_a_seam(c)
            await bad_input_is_a_tool_error(c, session_id="bad")
            first = await idempotency_key_replays(c, session_id="idem")
        async with stdio_client(ws, "--user", "u1", "--agent", "planner") as c:  # a new process
            again = await call(c, "remember", key="user:pet", content="a cat named Miso",
                               importance=0.9, idempotency_key="pet-1", session_id="idem")
            assert again["replayed"] and again["fact"] == first["fact"]

    anyio.run(main)
    with Memory.open(ws, create=False) as mem:  # what the servers stored, read in-process
        s = mem.session("mcp", user="u1", agent="planner")
        assert s.read_records(["step_1"]).found["step_1"].description.startswith("Step 1 (success)")
        pets = mem.session("idem", user="u1", agent="planner").facts.history("user:pet")
        assert len(pets) == 1  # three calls with one key (one after a restart): one write
