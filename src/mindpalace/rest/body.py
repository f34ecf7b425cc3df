"""Request bodies: a size limit (413) and strict JSON — what ``json.loads`` lets through but
storage must not see.

:class:`BodyLimit` refuses a body over ``server.max_body_bytes`` before it is parsed: at once
when Content-Length says so, else as the chunks arrive (chunked transfer encoding), with a 413
problem. (Starlette's own limiter answers a declared-too-large body with text/plain, which
would break the one-error-format rule.)

Python's decoder accepts ``NaN`` / ``Infinity`` and ``"\\ud800"`` (a lone surrogate UTF-8 cannot
encode) and recurses until a RecursionError on hostile nesting. :class:`StrictRoute` parses
every JSON body with :func:`parse_json`, which refuses all three — and invalid UTF-8, and a
key repeated in one object — with a 422 problem naming the JSON Pointer of the bad value, before any model or facade sees it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindpalace.rest.problems import BadBody, problem
from mindpalace.textsafe import MAX_JSON_DEPTH, RepeatedKeyError, unique_keys


def _refuse_constant(name: str) -> Any:
    raise BadBody(f"{name} is not a JSON number (NaN and Infinity are refused)")


def parse_json(body: bytes) -> Any:
    """Decode a request body strictly.

    Raises:
        BadBody: not UTF-8, not JSON, NaN / Infinity, a key repeated in one object, a lone
            surrogate or NUL in any string (keys included), or nesting deeper than ``textsafe.MAX_JSON_DEPTH`` (64) levels.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadBody(f"not UTF-8: invalid byte at offset {exc.start}") from exc
    _check_depth(text)
    try:
        value = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise BadBody(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except RepeatedKeyError as exc:
        raise BadBody(str(exc)) from None
    _check_strings(value, "")
    return value


def _check_depth(text: str) -> None:
    """Refuse deep nesting before decoding (the decoder would recurse first): brackets outside
    strings are counted in one pass."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise BadBody(f"nested deeper than {MAX_JSON_DEPTH} levels")
        elif ch in "]}":
            depth -= 1


def _check_strings(value: Any, pointer: str) -> None:
    if isinstance(value, str):
        _check_text(value, pointer)
    elif isinstance(value, dict):
        for key, item in value.items():
            child = pointer + "/" + key.replace("~", "~0").replace("/", "~1")
            _check_text(key, child)
            _check_strings(item, child)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_strings(item, f"{pointer}/{i}")


_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


def _check_text(text: str, pointer: str) -> None:
    m = _UNSTORABLE.search(text)
    if m is None:
        return
    what = "NUL character" if m.group() == "\x00" else f"lone surrogate {m.group()!a}"
    raise BadBody(f"{what} at offset {m.start()} of {pointer or 'the body'}", pointer)


class StrictRequest(Request):
    """A request whose ``json()`` is :func:`parse_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class StrictRoute(APIRoute):
    """Every route of the API: its handler sees a :class:`StrictRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictRequest(request.scope, request.receive))

        return strict


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when the chunks read so far pass the limit (rendered as 413)."""

    def __init__(self) -> None:
        super().__init__(413, "request body over the limit")


class BodyLimit:
    """ASGI middleware: at most `max_body_bytes` of request body, else a 413 problem.

    Args:
        app: the wrapped application.
        max_body_bytes: the limit (bytes), ``server.max_body_bytes``.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            response = problem(413, f"request body of {declared} bytes is over the limit of "
                               f"{self.max_body_bytes} bytes (server.max_body_bytes)",
                               Request(scope))
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise BodyTooLarge
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class StrictUrl:
    """ASGI middleware: a percent-encoded path or query that is not UTF-8 (``%FF``, ``%ED%A0%80``
    — an encoded surrogate) is a 422 problem naming it (``/path``, ``/query/<name>``).

    ASGI servers and Starlette decode such escapes with replacement characters, so a session
    id or ``?user=`` would silently become ``"\ufffd\ufffd"`` — another scope than the caller
    named, where the write would land.

    Args:
        app: the wrapped application.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (bad := _bad_url(scope)) is not None:
            pointer, offset = bad
            detail = f"invalid request: {pointer}: not UTF-8 once percent-decoded (invalid byte at offset {offset})"
            response = problem(422, detail, Request(scope), error="ValidationError",
                               errors=[{"pointer": pointer, "detail": "not UTF-8 once percent-decoded"}])
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _bad_url(scope: Scope) -> tuple[str, int] | None:
    """(JSON Pointer, byte offset) of the first part of the URL that is not UTF-8, or None."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes):
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            return "/path", exc.start
    query = scope.get("query_string", b"")
    for pair in query.split(b"&") if isinstance(query, bytes) else ():
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            try:
                unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError as exc:
                shown = unquote_to_bytes(name).decode("utf-8", "replace")
                return f"/query/{shown}", exc.start
    return None
