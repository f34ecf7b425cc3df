"""A real OpenAI-compatible HTTP server on loopback serving canned chat completions, for tests.

Tests of anything that talks to an LLM over HTTP use this instead of a mock object: the real
`openai` SDK and `OpenAIProvider` run end to end, so timeouts, status codes and malformed
bodies behave as they would against vLLM or Ollama.

    >>> with serve_stub() as stub:                       # doctest: +SKIP
    ...     stub.script(chat("Hello!"), api_error(500))
    ...     settings = LLMSettings(provider="openai", base_url=stub.url)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLL_INTERVAL_SECONDS = 0.01  # shutdown() waits up to one poll interval


@dataclass
class Reply:
    """One canned HTTP response; `stall_seconds` delays it (ended early when the server stops)."""

    status: int = 200
    body: Any = None
    content_type: str = "application/json"
    stall_seconds: float = 0.0


def tool_call(name: str, arguments: Any = None, *, id: str = "call_1") -> dict[str, Any]:
    """One OpenAI ``tool_calls`` item; `arguments` is sent as given when a string (so a test
    can send malformed JSON), else as its JSON text (None → ``{}``)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": id, "type": "function", "function": {"name": name, "arguments": args}}


def chat(
    content: str | None = "Hello!",
    finish_reason: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: tuple[int, int] | None = (11, 3),
    model: str = "stub-model-2024",
) -> Reply:
    """A chat.completion reply; `usage` = (prompt_tokens, completion_tokens) or None to omit.

    With `tool_calls` (see :func:`tool_call`) the assistant message calls tools and the
    finish_reason defaults to ``"tool_calls"``; otherwise it defaults to ``"stop"``.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = finish_reason or ("tool_calls" if tool_calls else "stop")
    body: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return Reply(body=body)


def api_error(status: int, message: str = "boom") -> Reply:
    """An OpenAI-style JSON error body with `status`."""
    return Reply(status=status, body={"error": {"message": message, "type": "server_error"}})


def html_page(status: int, title: str) -> Reply:
    """An HTML error page, as a reverse proxy in front of a model server sends it."""
    page = f"<html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>"
    return Reply(status=status, content_type="text/html", body=page)


@dataclass
class StubServer:
    """Replies follow the script; the last one repeats. `requests` records every request."""

    url: str = ""
    replies: list[Reply] = field(default_factory=lambda: [chat()])
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *replies: Reply) -> None:
        with self.lock:
            self.replies = list(replies)

    def _next_reply(self, request: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(request)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def _handler(stub: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw.decode("utf-8", "replace")
            reply = stub._next_reply(
                {"path": self.path, "json": payload, "auth": self.headers.get("authorization")}
            )
            if reply.stall_seconds:
                stub.release.wait(reply.stall_seconds)  # set on shutdown: no thread outlives it
            body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            data = body.encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                pass

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve_stub() -> Iterator[StubServer]:
    """Start a `StubServer` on 127.0.0.1 (a free port); stop it on exit. ``stub.url`` ends in /v1."""
    stub = StubServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    httpd.daemon_threads = True
    stub.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, args=(POLL_INTERVAL_SECONDS,), daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()
