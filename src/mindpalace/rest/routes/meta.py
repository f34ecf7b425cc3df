"""Health and version: unauthenticated, no workspace data."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from mindpalace.rest.body import StrictRoute

router = APIRouter(route_class=StrictRoute, tags=["meta"])


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the server answers."""
    return {"status": "ok"}


@router.get("/version")
async def version() -> dict[str, Any]:
    """The mindpalace version and the API version prefix."""
    from mindpalace import __version__

    return {"version": __version__, "api": "v1"}
