"""Recall and facts (remember, get, forget, list) — seed 001 dual memory, seed 004 search."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from mindpalace.errors import NotFoundError
from mindpalace.rest import views
from mindpalace.rest.body import StrictRoute
from mindpalace.rest.deps import ReadSession, WriteSession
from mindpalace.rest.models import Cursor, FactIn, Limit, RecallIn, page_limit, paginate

router = APIRouter(prefix="/v1/sessions/{session_id}", route_class=StrictRoute, tags=["facts"])

FactKey = Annotated[str, Path(min_length=1, max_length=300, description="entity:attribute.")]


@router.post("/recall")
async def recall(s: ReadSession, body: RecallIn) -> dict[str, Any]:
    """Working memory first, then hybrid keyword + vector search, scoped to the caller's
    tenant and this user. Counts hits (working-memory bookkeeping) and records a ``recalled``
    lineage event; stores no memory."""
    return {"hits": [views.hit(h) for h in await s.recall(body.query, body.k)]}


@router.post("/facts", status_code=201)
async def remember(s: WriteSession, body: FactIn) -> dict[str, Any]:
    """Remember key = content: what was kept, archived long-term and evicted."""
    return views.remembered(await s.remember(body.key, body.content, importance=body.importance,
                                             source=body.source))


@router.get("/facts")
async def list_facts(request: Request, s: ReadSession, limit: Limit = None,
                     cursor: Cursor = None) -> dict[str, Any]:
    """Current facts by key: long-term ones and working-memory-only items."""
    page = paginate(await s.facts.list(), page_limit(request, limit), cursor)
    page["items"] = [views.fact(f) for f in page["items"]]
    return page


@router.get("/facts/{key:path}")  # :path — a key may hold "/" (doc:a/b)
async def get_fact(s: ReadSession, key: FactKey) -> dict[str, Any]:
    """The current value of a key (read-only: nothing promoted); unknown → 404."""
    found = await s.facts.peek(key)
    if found is None:
        raise NotFoundError("fact", key, s.scope)
    return views.fact(found)


@router.delete("/facts/{key:path}")
async def forget(s: WriteSession, key: FactKey) -> dict[str, bool]:
    """Forget a fact for good (tombstone); unknown → 404."""
    if not await s.forget(key):
        raise NotFoundError("fact", key, s.scope)
    return {"forgotten": True}
