"""Who is looking: the same API keys and tenant resolution as ``/v1`` (:mod:`mindpalace.rest.deps`),
read from the ``Authorization`` header or the inspector's cookie."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import RedirectResponse, Response

from mindpalace.auth import SCOPES
from mindpalace.errors import AuthError
from mindpalace.memory import Memory
from mindpalace.rest.deps import Caller, TenantPool

COOKIE = "mindpalace_key"


class LoginRequired(Exception):
    """No key, or a refused one: the browser is sent to ``/ui/login``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def login_required_handler(request: Request, exc: LoginRequired) -> Response:
    return RedirectResponse(f"/ui/login?reason={exc.reason}", status_code=303)


def ui_caller(request: Request) -> Caller:
    """The caller of a page: auth off → the server's tenant; else the key from the
    ``Authorization: Bearer`` header or the cookie. Raises LoginRequired (→ /ui/login)."""
    state = request.app.state
    if not state.auth:
        return Caller(state.tenant, None)
    header = request.headers.get("authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else request.cookies.get(COOKIE)
    if not token:
        raise LoginRequired("no key")
    try:
        key = state.pool.keys.verify(token)
    except AuthError as exc:
        raise LoginRequired("refused") from exc
    return Caller(key.tenant, key)


UiCaller = Annotated[Caller, Depends(ui_caller)]


def ui_reader(request: Request, who: UiCaller) -> Memory:
    """The tenant handle of a page (key scope ``read``): the sync facade under the API's async
    handle — pages are plain ``def`` routes, which FastAPI already runs in worker threads."""
    who.require(SCOPES[0])
    pool: TenantPool = request.app.state.pool
    return pool.get(who.tenant).memory


UiMemory = Annotated[Memory, Depends(ui_reader)]


def can_write(who: Caller) -> bool:
    """True when the caller may edit knowledge files (a ``write`` key, or auth off)."""
    return who.key is None or SCOPES[1] in who.key.scopes
