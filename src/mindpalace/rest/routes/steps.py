"""Step memory (begin, evaluate, tiers) and records (list, read by name, read_records)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from mindpalace.errors import NotFoundError
from mindpalace.memory import Session
from mindpalace.rest import views
from mindpalace.rest.body import StrictRoute
from mindpalace.rest.deps import ReadSession, WriteSession
from mindpalace.rest.models import (
    Cursor,
    EvaluationIn,
    Limit,
    ReadRecordsIn,
    StepIn,
    page_limit,
    paginate,
)

router = APIRouter(prefix="/v1/sessions/{session_id}", route_class=StrictRoute, tags=["steps"])

StepId = Annotated[int, Path(ge=1, description="The id `begin` returned.")]
RecordName = Annotated[str, Path(min_length=1, max_length=300)]


@router.post("/steps", status_code=201)
async def begin_step(s: WriteSession, body: StepIn) -> dict[str, int]:
    """Start a step (a pending line); returns its id (seed 000)."""
    return {"step": await s.steps.begin(body.goal, action=body.action)}


@router.post("/steps/{step}/evaluate")
async def evaluate_step(s: WriteSession, step: StepId, body: EvaluationIn) -> dict[str, Any]:
    """Evaluate a pending step: its line moves to recent, the record step_N is saved."""
    saved = await s.steps.evaluate(step, body.evaluation, analysis=body.analysis,
                                   tool_outputs=body.tool_outputs)
    return views.record(saved)


def _tiers(sync: Session) -> dict[str, Any]:
    data = sync.steps.state.to_json()
    data["summary_lines"] = sync.steps.summary_lines
    return data


@router.get("/steps")
async def list_steps(s: ReadSession) -> dict[str, Any]:
    """The tiers (pending, recent, summary), counters, checkpoint and last <summary> lines."""
    return await s.run(_tiers)


@router.get("/records")
async def list_records(request: Request, s: ReadSession,
                       type: Annotated[str | None, Query(max_length=50)] = None,
                       limit: Limit = None, cursor: Cursor = None) -> dict[str, Any]:
    """Records newest first, without bodies (read one by name for its body)."""
    page = paginate(await s.steps.records(type=type), page_limit(request, limit), cursor)
    page["items"] = [views.record_summary(r) for r in page["items"]]
    return page


@router.get("/records/{name:path}")  # :path — a reference may hold "/" (knowledge:user/USER.md)
async def read_record(s: ReadSession, name: RecordName) -> dict[str, Any]:
    """One record by name (step_12) or reference (message:17, history:3, fact:user:city,
    knowledge:user/USER.md, its "/" sent as is or as %2F); unknown → 404 naming it."""
    found = (await s.read_records([name])).found.get(name)
    if found is None:
        raise NotFoundError("record", name, s.scope)
    return views.record(found)


@router.post("/records/read")
async def read_records(s: ReadSession, body: ReadRecordsIn) -> dict[str, Any]:
    """The read_files protocol: the records found (request order) and the names missing."""
    return views.read_result(await s.read_records(body.names))
