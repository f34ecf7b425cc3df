"""The prompt: a pure build (``Session.context``) and the agent's turn (``Session.prepare``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from mindpalace.rest import views
from mindpalace.rest.body import StrictRoute
from mindpalace.rest.deps import ReadSession, WriteSession
from mindpalace.rest.models import ContextIn, TurnIn

router = APIRouter(prefix="/v1/sessions/{session_id}", route_class=StrictRoute, tags=["context"])


@router.post("/context")
async def build_context(s: ReadSession, body: ContextIn) -> dict[str, Any]:
    """The prompt as the stored state gives it now — read-only, never over the budget."""
    built = await s.context(body.budget_tokens, system_prompt=body.system_prompt,
                            tools=body.tools, messages=body.messages, query=body.query)
    return views.built(built)


@router.post("/turn")
async def turn(s: WriteSession, body: TurnIn) -> dict[str, Any]:
    """The agent path before a model call: consolidate if over budget, then build (writes)."""
    built = await s.prepare(body.budget_tokens, system_prompt=body.system_prompt,
                            tools=body.tools, query=body.query)
    return views.built(built)
