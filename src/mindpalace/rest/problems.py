"""Errors as RFC 9457 problem details (``application/problem+json``), one status per error kind.

Every reply that is not a success is a problem object naming what was wrong::

    {"type": "urn:mindpalace:error:NotFoundError", "title": "Not Found", "status": 404,
     "detail": "unknown record 'step_9' in scope acme/u1/planner/trip-42",
     "instance": "/v1/sessions/trip-42/records/step_9", "error": "NotFoundError"}

``error`` names the class of the :class:`~mindpalace.errors.MindPalaceError` tree, so the
Python client raises the same exception a local call would. Request validation adds
``errors``: one ``{"pointer", "detail"}`` per bad field (JSON Pointers into the request).
An unexpected exception becomes a 500 problem without a traceback (it is logged).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from mindpalace import errors as e

MEDIA_TYPE: Final = "application/problem+json"
TYPE_PREFIX: Final = "urn:mindpalace:error:"

log = logging.getLogger("mindpalace.rest")

# Most specific first: the first class the error is an instance of decides the status.
STATUS_OF: Final[tuple[tuple[type[e.MindPalaceError], int], ...]] = (
    (e.PermissionDeniedError, 403),
    (e.AuthError, 401),
    (e.NotFoundError, 404),
    (e.ContextBudgetError, 422),
    (e.ValidationError, 422),
    (e.ConcurrencyError, 409),
    (e.StoreBusyError, 503),  # SessionBusyError too: a turn lease or lock is held; retry later
    (e.ReadOnlyWorkspaceError, 503),
    (e.DiskFullError, 507),
    (e.ConstraintError, 409),  # a protected constraint refused the change
    (e.OutcomeUnknownError, 409),
    (e.ToolCallInFlightError, 409),  # the same keyed call runs now: ask again after it
    (e.ProviderTimeoutError, 504),
    (e.CircuitOpenError, 503),
    (e.TokenBudgetExceededError, 503),
    (e.ProviderError, 502),
    (e.StoreError, 500),
    (e.MindPalaceError, 500),
)
RETRY_AFTER_SECONDS: Final = 1  # StoreBusyError / CircuitOpenError: a short, bounded wait


class Problem(BaseModel):
    """An RFC 9457 problem object (``application/problem+json``), as every error reply is."""

    type: str
    title: str
    status: int
    detail: str
    instance: str
    error: str | None = None


def _documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    schema = {"schema": {"$ref": "#/components/schemas/Problem"}}
    return {status: {"description": HTTPStatus(status).phrase, "model": Problem,
                     "content": {MEDIA_TYPE: schema}} for status in statuses}


RESPONSES: Final = _documented(401, 403, 404, 409, 413, 422, 503)
"""The error replies every /v1 route may give, for the OpenAPI schema."""


class BadBody(HTTPException):
    """A request body refused before validation: not JSON, NaN/Infinity, a lone surrogate,
    nested too deep. `pointer` is the JSON Pointer of the offending value ('' = the body)."""

    def __init__(self, problem: str, pointer: str = "") -> None:
        super().__init__(422, problem)
        self.pointer = pointer


def status_of(exc: e.MindPalaceError) -> int:
    return next(status for cls, status in STATUS_OF if isinstance(exc, cls))


def problem(status: int, detail: str, request: Request, *, error: str | None = None,
            headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """One problem+json response (RFC 9457): type, title, status, detail, instance, extras."""
    body: dict[str, Any] = {
        "type": f"{TYPE_PREFIX}{error}" if error else "about:blank",
        "title": HTTPStatus(status).phrase, "status": status, "detail": detail,
        "instance": request.url.path,
    }
    if error:
        body["error"] = error
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _pointer(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("body", "message", "role")`` → ``/body/message/role`` (RFC 6901 escaping)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in loc)


async def _mindpalace_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, e.MindPalaceError)
    status = status_of(exc)
    if status >= 500:
        log.warning("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="mindpalace"'
    if status == 503:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    extra: dict[str, Any] = {}
    if isinstance(exc, e.NotFoundError):
        extra = {"kind": exc.kind, "name": str(exc.name)}
    return problem(status, str(exc), request, error=type(exc).__name__, headers=headers, **extra)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    found = [{"pointer": _pointer(err.get("loc", ())), "detail": str(err.get("msg", ""))}
             for err in exc.errors()]
    detail = "; ".join(f"{f['pointer'] or '/'}: {f['detail']}" for f in found[:5])
    return problem(422, f"invalid request: {detail}", request, error="ValidationError",
                   errors=found)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if isinstance(exc, BadBody):
        return problem(422, f"invalid request body: {exc.detail}", request,
                       error="ValidationError",
                       errors=[{"pointer": "/body" + exc.pointer, "detail": exc.detail}])
    detail = str(exc.detail) if exc.detail else HTTPStatus(exc.status_code).phrase
    if exc.status_code == 413:
        limit = request.app.state.max_body_bytes
        detail = f"request body over the limit of {limit} bytes (server.max_body_bytes)"
    return problem(exc.status_code, detail, request, headers=dict(exc.headers or {}))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # Logged with its traceback here; the caller gets a problem without one.
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem(500, f"internal error ({type(exc).__name__}); see the server log", request)


def install(app: FastAPI) -> None:
    """Register the handlers: the MindPalaceError tree, request validation, HTTP errors
    (404 route, 405, 413, bad bodies) and anything unexpected."""
    app.add_exception_handler(e.MindPalaceError, _mindpalace_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)

