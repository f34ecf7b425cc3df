"""Durable task state (seed 004): constraints, tasks, events, ledger, checkpoints."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from mindpalace.aio import AsyncSession, AsyncTask
from mindpalace.errors import NotFoundError
from mindpalace.memory import Session
from mindpalace.rest import views
from mindpalace.rest.body import StrictRoute
from mindpalace.rest.deps import ReadSession, WriteSession
from mindpalace.rest.models import (
    CheckpointIn,
    ConstraintIn,
    Cursor,
    Limit,
    page_limit,
    paginate,
)

router = APIRouter(prefix="/v1/sessions/{session_id}", route_class=StrictRoute, tags=["tasks"])

Name = Annotated[str, Path(min_length=1, max_length=200)]


async def _task(s: AsyncSession, task_id: str) -> AsyncTask:
    """An existing task of the session; NotFoundError when it has no events."""
    task = s.tasks(task_id)
    if await task.version() == 0:
        raise NotFoundError("task", task_id, s.scope)
    return task


def _constraints(sync: Session) -> dict[str, Any]:
    state = sync.task.state()
    return {"task": sync.task.id,
            "constraints": {k: c.model_dump(mode="json") for k, c in state.constraints.items()}}


@router.get("/constraints")
async def list_constraints(s: ReadSession) -> dict[str, Any]:
    """Protected constraints of the session's default task: name → value, source, note."""
    return await s.run(_constraints)


@router.put("/constraints/{name}")
async def set_constraint(s: WriteSession, name: Name, body: ConstraintIn) -> dict[str, Any]:
    """Set a protected constraint (never compressed, I7); a source other than user or
    developer is refused (409) and the attempt recorded."""
    value = await s.constraints.set(name, body.value, source=body.source, note=body.note)
    return {"name": name, "value": value}


@router.delete("/constraints/{name}")
async def delete_constraint(s: WriteSession, name: Name) -> dict[str, bool]:
    """Drop a constraint; unknown → 404."""
    if name not in await s.constraints.all():
        raise NotFoundError("constraint", name, s.scope)
    await s.constraints.remove(name)
    return {"removed": True}


@router.post("/checkpoint")
async def checkpoint(s: WriteSession, body: CheckpointIn) -> dict[str, int]:
    """Atomic checkpoint of the default task (step, artifacts, pending); returns its version."""
    return {"version": await s.checkpoint(step=body.step, artifacts=body.artifacts,
                                          pending=body.pending, snapshot=body.snapshot)}


@router.get("/tasks")
async def list_tasks(request: Request, s: ReadSession, limit: Limit = None,
                     cursor: Cursor = None) -> dict[str, Any]:
    """The session's tasks: id and version (events so far)."""
    rows = [{"task": task, "version": version} for task, version in await s.tasks.list()]
    return paginate(rows, page_limit(request, limit), cursor)


@router.get("/tasks/{task_id}")
async def task_state(s: ReadSession, task_id: Name) -> dict[str, Any]:
    """A task's state recovered from its events (status, step, constraints, calls)."""
    return (await (await _task(s, task_id)).state()).to_json()


@router.get("/tasks/{task_id}/events")
async def task_events(request: Request, s: ReadSession, task_id: Name, limit: Limit = None,
                      cursor: Cursor = None) -> dict[str, Any]:
    """A task's events oldest first (the source of truth); the cursor is the next version."""
    size = page_limit(request, limit)
    task = await _task(s, task_id)
    first = max(1, int(cursor or 1))
    found = await task.read(first, first + size - 1)
    more = bool(found) and found[-1].version < await task.version()
    return {"items": [views.event(r) for r in found],
            "next_cursor": str(found[-1].version + 1) if more else None}


@router.get("/tasks/{task_id}/ledger")
async def task_ledger(request: Request, s: ReadSession, task_id: Name, limit: Limit = None,
                      cursor: Cursor = None) -> dict[str, Any]:
    """The task's side-effecting tool calls: key, tool, args, status, attempt, result."""
    size = page_limit(request, limit)
    entries = await (await _task(s, task_id)).ledger_entries()
    page = paginate(entries, size, cursor)
    page["items"] = [e.to_json() for e in page["items"]]
    return page
