"""The web inspector at ``/ui``: server-rendered pages (Jinja2, autoescaped) over the caller's
tenant — sessions, step tiers, records, prompts, recall, tasks, knowledge — with htmx (served
from the package, no CDN) for the recall search, and charts drawn as inline SVG on the server.

Thin over the facade like the JSON routes: each page makes read-only facade calls on the
caller's tenant handle (same keys, scopes and tenant rules as ``/v1``; :mod:`.auth`). A
browser sends its key once through ``/ui/login`` and then as an HttpOnly, SameSite=Strict
cookie; with ``--no-auth`` on loopback no key is asked. The one write is a knowledge-file edit,
which needs a key with ``write`` scope and goes through ``KnowledgeBase.apply`` (a patch, one
commit authored by the key's name).
"""

from __future__ import annotations

from fastapi import FastAPI

from mindpalace.rest.inspector.auth import LoginRequired, login_required_handler
from mindpalace.rest.inspector.pages import router


def install(app: FastAPI) -> None:
    """Mount the inspector's pages and static files on `app` (the REST app)."""
    app.include_router(router)
    app.add_exception_handler(LoginRequired, login_required_handler)  # type: ignore[arg-type]


__all__ = ["install", "router"]
