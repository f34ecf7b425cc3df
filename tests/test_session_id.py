"""A session id names a session: the empty id is the user-level scope (where user facts live),
not a session, so the facades refuse it instead of writing a conversation there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mindpalace import Memory, ValidationError
from mindpalace.aio import AsyncMemory
from mindpalace.scope import ANY


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


# A session id is one path segment of the REST routes (/v1/sessions/{s}/…) and a line of the
# CLI's and inspector's output: "/" and the dot segments are unreachable over HTTP (a client
# normalises "." and ".." away, a server splits at "/"), and a control character breaks the line.
UNREACHABLE_IDS = ["trip/42", "/", ".", "..", "trip\n42", "trip\r", "\ttrip", "trip\x7f", "trip\x85",
                   "trip\u2028"]


@pytest.mark.parametrize("session_id", UNREACHABLE_IDS)
def test_a_session_id_that_is_not_one_printable_path_segment_is_refused_by_name(
    tmp_path: Path, session_id: str,
) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
        with pytest.raises(ValidationError, match="session id") as caught:
            mem.session(session_id, user="u")
        assert repr(session_id) in str(caught.value)  # names the id it refused

        async def main() -> None:
            with pytest.raises(ValidationError, match="session id"):
                AsyncMemory(mem).session(session_id, user="u")

        asyncio.run(main())


@pytest.mark.parametrize("session_id", ["trip 42", "trip-42.v2", "a?b#c%d", "é…", "..x", "a@b"])
def test_other_printable_ids_are_sessions(tmp_path: Path, session_id: str) -> None:
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
        assert mem.session(session_id, user="u").id == session_id


@pytest.mark.parametrize("field", ["user", "agent"])
@pytest.mark.parametrize("bad", ["a\nb", "a\tb", "a\x7f", "a\x85", "a\u2028b"])
def test_a_user_or_agent_id_with_a_control_character_is_refused_by_name(
    tmp_path: Path, field: str, bad: str,
) -> None:
    # breaker finding: user="a\nb" was stored, and the CLI's and inspector's one-line listings
    # of that user's sessions split in two
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as mem:
        with pytest.raises(ValidationError, match=f"{field} .* control character") as caught:
            mem.session("s1", **{field: bad})
        assert repr(bad) in str(caught.value)
        with pytest.raises(ValidationError, match=field):
            AsyncMemory(mem).session("s1", **{field: bad})
        with pytest.raises(ValidationError, match="tenant"):
            mem.for_tenant(f"t{bad}")
        assert mem.store.list_streams(mem.scope(user=ANY, agent=ANY, session=ANY)) == []  # nothing stored
        assert mem.session("s1", **{field: "Mia Wong-Li"}).id == "s1"
