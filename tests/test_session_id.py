"""A session id names a session: the empty id is the user-level scope (where user facts live),
not a session, so the facades refuse it instead of writing a conversation there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mindpalace import Memory, ValidationError
from mindpalace.aio import AsyncMemory


@pytest.mark.parametrize("session_id", ["", "   "])
def test_an_empty_session_id_is_refused(tmp_path: Path, session_id: str) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
        with pytest.raises(ValidationError, match="session id"):
            mem.session(session_id, user="u")
        assert mem.session("s1", user="u").id == "s1"  # any other text is a session

        async def main() -> None:
            amem = AsyncMemory(mem)
            with pytest.raises(ValidationError, match="session id"):
                amem.session(session_id, user="u")

        asyncio.run(main())
