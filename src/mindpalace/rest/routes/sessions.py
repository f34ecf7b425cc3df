"""Sessions (list, status) and their messages (add, list)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from mindpalace.errors import NotFoundError
from mindpalace.memory import Memory, Session, SessionStatus
from mindpalace.rest import views
from mindpalace.rest.body import StrictRoute
from mindpalace.rest.deps import ReadMemory, ReadSession, WriteSession
from mindpalace.rest.models import Cursor, Limit, MessageIn, page_limit, paginate
from mindpalace.scope import ANY, Scope
from mindpalace.session.messages import STREAM

router = APIRouter(prefix="/v1/sessions", route_class=StrictRoute, tags=["sessions"])


def _sessions(mem: Memory) -> list[dict[str, Any]]:
    streams = mem.store.list_streams(Scope(mem.tenant, ANY, ANY, ANY), prefix=STREAM)
    return sorted(({"user": s.user, "agent": s.agent, "session": s.session, "messages": version}
                   for s, name, version in streams if name == STREAM),
                  key=lambda r: (str(r["user"]), str(r["agent"]), str(r["session"])))


@router.get("")
async def list_sessions(request: Request, mem: ReadMemory, limit: Limit = None,
                        cursor: Cursor = None) -> dict[str, Any]:
    """The tenant's sessions that hold messages: user, agent, session id, message count."""
    size = page_limit(request, limit)
    return paginate(await mem.run(_sessions, mem.memory), size, cursor)


@router.get("/{session_id}")
async def session_status(s: ReadSession, live_messages: int = 10) -> dict[str, Any]:
    """Consolidation state, lease and the newest `live_messages` live messages (read-only);
    a session with nothing stored in its scope (a typo, another ?user=) → 404."""
    def known_status(sync: Session) -> SessionStatus:  # one worker call
        if not sync.exists():
            raise NotFoundError("session", sync.id, sync.scope)
        return sync.status(live_messages=max(0, min(live_messages, 100)))
    return views.status(await s.run(known_status))


@router.post("/{session_id}/messages", status_code=201)
async def add_message(s: WriteSession, body: MessageIn) -> dict[str, int]:
    """Append one OpenAI-format message; returns its 1-based index."""
    return {"index": await s.add_message(body.message, timestamp=body.timestamp)}


@router.get("/{session_id}/messages")
async def list_messages(request: Request, s: ReadSession, limit: Limit = None,
                        cursor: Cursor = None) -> dict[str, Any]:
    """Messages oldest first; the cursor is the next message index."""
    size = page_limit(request, limit)
    first = max(1, int(cursor or 1))

    def page(sync: Session) -> dict[str, Any]:  # one worker call: the page and the count agree
        found = sync.messages.list(from_index=first, to_index=first + size - 1)
        more = bool(found) and found[-1].index < sync.messages.count()
        return {"items": [views.message(m) for m in found],
                "next_cursor": str(found[-1].index + 1) if more else None}

    return await s.run(page)
