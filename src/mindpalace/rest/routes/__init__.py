"""The API's routers, one module per resource; each route is parse → one facade call → view."""

from __future__ import annotations

from fastapi import APIRouter

from mindpalace.rest.routes import context, facts, meta, metrics, sessions, steps, tasks

ROUTERS: tuple[APIRouter, ...] = (
    meta.router, sessions.router, steps.router, facts.router, tasks.router, context.router,
    metrics.router,
)
