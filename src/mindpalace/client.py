"""A Python client for the REST server: the facade's calls, over HTTP (httpx).

A remote agent uses the same calls as an in-process one::

    mem = RemoteMemory("http://127.0.0.1:8765", api_key="mp_…")
    s = mem.session("trip-42", user="u1", agent="planner")
    s.add_message({"role": "user", "content": "5 days in Tokyo"})
    s.constraints.set("budget_per_night_cny", 2000, source="user")
    step = s.steps.begin(goal="search Senso-ji opening hours")
    s.steps.evaluate(step, "success", analysis="free entry, 6:00-17:00")
    built = s.prepare(budget_tokens=32_000)       # built.messages → the model
    hits = s.recall("hotel budget", k=5)

Results are the server's JSON: dicts, or small frozen dataclasses (:class:`RemoteBuilt`,
:class:`RemoteHit`) where an agent reads attributes (``built.messages``, ``hit.text``).
Errors are the library's own: a problem+json reply raises the
:class:`~mindpalace.errors.MindPalaceError` subclass it names (NotFoundError, ValidationError,
AuthError …) with the server's message; a transport failure raises
:class:`~mindpalace.errors.RemoteError`. Needs httpx (the ``server`` extra).
"""

from __future__ import annotations

import builtins
import json as jsonlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from mindpalace import errors
from mindpalace.errors import MindPalaceError, NotFoundError, RemoteError, ValidationError

DEFAULT_TIMEOUT_SECONDS = 30.0  # a turn may consolidate with an LLM summary first


@dataclass(frozen=True)
class RemoteHit:
    """One recall hit (see :class:`mindpalace.facts.RecallHit`); `fact` is the fact's JSON."""

    tier: str
    ref: str
    text: str
    score: float
    session: str
    why: str
    meta: dict[str, Any]
    fact: dict[str, Any] | None = None


@dataclass(frozen=True)
class RemoteBuilt:
    """A built prompt (see :class:`mindpalace.context.BuiltContext`): `messages` to send, the
    `tools` counted with them, and the report (blocks, total_tokens, budget_tokens,
    degradations, recalled, consolidation)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    report: dict[str, Any]


def error_from(response: httpx.Response) -> MindPalaceError:
    """The exception a problem+json reply names (its ``error`` member), with its ``detail``;
    RemoteError when the reply is not a problem."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "detail" not in body:
        return RemoteError(f"{response.request.method} {response.request.url}: HTTP "
                           f"{response.status_code} without a problem body", status_code=response.status_code)
    name = body.get("error")
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, MindPalaceError)):
        return RemoteError(f"HTTP {response.status_code}: {body['detail']}",
                           status_code=response.status_code)
    # The server already built the message; skip the class's structured constructor.
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(body["detail"]))
    exc.problem = body  # type: ignore[attr-defined]
    return exc


class RemoteMemory:
    """The REST server of one workspace, as the caller's tenant (the API key decides it).

    Args:
        base_url: e.g. ``http://127.0.0.1:8765``.
        api_key: a secret from ``mindpalace keys create``; None for a ``--no-auth`` server.
        timeout_seconds: per request (seconds).
        transport: an httpx transport (tests, proxies).

    Raises (every call): the MindPalaceError the server names; RemoteError when the server
    cannot be reached or answers something that is not a problem.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_seconds,
                                 transport=transport)

    def request(self, method: str, path: str, *, json: Any = None,
                params: dict[str, Any] | None = None) -> Any:
        """One call: the decoded JSON reply, or the error it names.

        Raises:
            ValidationError: a body or query the request cannot carry (NaN / ±Infinity, a lone
                surrogate, a value that is not JSON) — refused here, before anything is sent.
            RemoteError: the server cannot be reached. MindPalaceError: the problem it names.
        """
        headers = None
        content = None
        try:  # encoded here, as the server's strict parser reads it (no NaN, UTF-8 only)
            for name, value in (params or {}).items():
                if isinstance(value, str):
                    try:
                        value.encode()
                    except UnicodeEncodeError as exc:
                        raise ValueError(f"query parameter {name!r}: {exc}") from exc
            if json is not None:
                content = jsonlib.dumps(json, allow_nan=False, ensure_ascii=False).encode()
                headers = {"Content-Type": "application/json"}
            request = self.http.build_request(method, path, content=content, params=params,
                                              headers=headers)
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise ValidationError(f"{method} {path}: the request cannot be sent: {exc}") from exc
        try:
            response = self.http.send(request)
        except httpx.HTTPError as exc:
            raise RemoteError(f"{method} {path}: {type(exc).__name__}: {exc}; is `mindpalace "
                              "serve` running at that address?") from exc
        if response.is_success:
            return response.json()
        raise error_from(response)

    def pages(self, path: str, params: dict[str, Any] | None = None) -> Iterator[Any]:
        """Every item of a paginated list route, following ``next_cursor``."""
        query = dict(params or {})
        while True:
            page = self.request("GET", path, params=query)
            yield from page["items"]
            if page["next_cursor"] is None:
                return
            query["cursor"] = page["next_cursor"]

    def health(self) -> dict[str, Any]:
        return dict(self.request("GET", "/health"))

    def version(self) -> str:
        return str(self.request("GET", "/version")["version"])

    def sessions(self) -> builtins.list[dict[str, Any]]:
        """The tenant's sessions with messages: user, agent, session, messages."""
        return list(self.pages("/v1/sessions"))

    def session(self, session_id: str, *, user: str = "", agent: str = "") -> RemoteSession:
        """The session `session_id` of (`user`, `agent`) in the key's tenant."""
        return RemoteSession(self, session_id, user=user, agent=agent)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RemoteMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteSession:
    """One session over HTTP: the :class:`mindpalace.memory.Session` calls the API covers."""

    def __init__(self, memory: RemoteMemory, session_id: str, *, user: str = "", agent: str = "") -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValidationError("session id must be a non-empty string")
        self.memory = memory
        self.id = session_id
        self.scope_params = {"user": user, "agent": agent}
        self.base = f"/v1/sessions/{quote(session_id, safe='')}"
        self.steps = RemoteSteps(self)
        self.constraints = RemoteConstraints(self)
        self.facts = RemoteFacts(self)

    def call(self, method: str, path: str = "", *, json: Any = None,
             params: dict[str, Any] | None = None) -> Any:
        return self.memory.request(method, self.base + path, json=json,
                                   params={**self.scope_params, **(params or {})})

    def items(self, path: str, params: dict[str, Any] | None = None) -> builtins.list[Any]:
        return list(self.memory.pages(self.base + path, {**self.scope_params, **(params or {})}))

    # -- messages, status -------------------------------------------------------------------
    def add_message(self, message: dict[str, Any], *, timestamp: datetime | None = None) -> int:
        """Append one OpenAI-format message; returns its 1-based index. A naive `timestamp`
        is refused (ValidationError) as the facade refuses it."""
        if timestamp is not None and timestamp.tzinfo is None:
            raise ValidationError(f"timestamp: naive datetime {timestamp.isoformat()} — pass a "
                                  "timezone-aware one")
        body: dict[str, Any] = {"message": message}
        if timestamp is not None:
            body["timestamp"] = timestamp.isoformat()
        return int(self.call("POST", "/messages", json=body)["index"])

    def list_messages(self) -> builtins.list[dict[str, Any]]:
        """Every stored message oldest first: index, message, timestamp (ISO 8601)."""
        return self.items("/messages")

    def status(self, *, live_messages: int = 10) -> dict[str, Any]:
        """:meth:`Session.status` as JSON; NotFoundError when nothing is stored in the session's
        scope (an unknown session id, user or agent)."""
        return dict(self.call("GET", params={"live_messages": live_messages}))

    # -- facts and recall -------------------------------------------------------------------
    def remember(self, key: str, content: str, *, importance: float = 0.5, source: str = "") -> dict[str, Any]:
        """Remember key = content: ``{"fact", "archived", "evicted"}``."""
        return dict(self.call("POST", "/facts", json={"key": key, "content": content,
                                                      "importance": importance, "source": source}))

    def forget(self, key: str) -> bool:
        """Forget a fact for good; False when there was nothing to forget."""
        try:
            self.call("DELETE", f"/facts/{quote(key, safe='')}")
        except NotFoundError:
            return False
        return True

    def recall(self, query: str, k: int | None = None) -> builtins.list[RemoteHit]:
        """Working memory first, then hybrid search over every tier of this user (scoped)."""
        hits = self.call("POST", "/recall", json={"query": query, "k": k})["hits"]
        return [RemoteHit(**h) for h in hits]

    # -- records ----------------------------------------------------------------------------
    def read_records(self, names: Iterable[str]) -> dict[str, Any]:
        """The read_files protocol: ``{"found": {name: record}, "missing": [names], "problems": {name: why}}``."""
        return dict(self.call("POST", "/records/read", json={"names": list(names)}))

    def record(self, name: str) -> dict[str, Any]:
        """One record by name or reference; NotFoundError naming it when unknown."""
        return dict(self.call("GET", f"/records/{quote(name, safe='')}"))

    # -- the prompt -------------------------------------------------------------------------
    def context(
        self, budget_tokens: int | None = None, *, system_prompt: str | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        messages: Sequence[dict[str, Any]] | None = None,
        query: str | Sequence[str] | None = None,
    ) -> RemoteBuilt:
        """The prompt as the stored state gives it now — read-only (``Session.context``)."""
        body = {"budget_tokens": budget_tokens, "system_prompt": system_prompt,
                "tools": None if tools is None else list(tools),
                "messages": None if messages is None else list(messages),
                "query": query if query is None or isinstance(query, str) else list(query)}
        return _built(self.call("POST", "/context", json=body))

    def prepare(
        self, budget_tokens: int | None = None, *, system_prompt: str | None = None,
        tools: Sequence[dict[str, Any]] | None = None, query: str | Sequence[str] | None = None,
    ) -> RemoteBuilt:
        """The agent path before a model call: consolidate if over budget, then build."""
        body = {"budget_tokens": budget_tokens, "system_prompt": system_prompt,
                "tools": None if tools is None else list(tools),
                "query": query if query is None or isinstance(query, str) else list(query)}
        return _built(self.call("POST", "/turn", json=body))

    # -- durable task state -----------------------------------------------------------------
    def checkpoint(self, *, step: int | None = None, artifacts: dict[str, Any] | None = None,
                   pending: builtins.list[str] | None = None, snapshot: bool = False) -> int:
        """Atomic checkpoint of the default task; returns its version."""
        return int(self.call("POST", "/checkpoint", json={
            "step": step, "artifacts": artifacts, "pending": pending, "snapshot": snapshot})["version"])

    def tasks(self) -> builtins.list[dict[str, Any]]:
        """The session's tasks: ``{"task", "version"}``."""
        return self.items("/tasks")

    def task_state(self, task_id: str | None = None) -> dict[str, Any]:
        """A task's recovered state (default: the session's own task)."""
        return dict(self.call("GET", f"/tasks/{quote(task_id or self._task_id(), safe='')}"))

    def task_events(self, task_id: str | None = None) -> builtins.list[dict[str, Any]]:
        return self.items(f"/tasks/{quote(task_id or self._task_id(), safe='')}/events")

    def ledger(self, task_id: str | None = None) -> builtins.list[dict[str, Any]]:
        return self.items(f"/tasks/{quote(task_id or self._task_id(), safe='')}/ledger")

    def _task_id(self) -> str:
        return str(self.call("GET", "/constraints")["task"])


class RemoteSteps:
    """``s.steps`` over HTTP: begin, evaluate, state (seed 000 step tiers)."""

    def __init__(self, session: RemoteSession) -> None:
        self.session = session

    def begin(self, goal: str, *, action: str = "") -> int:
        return int(self.session.call("POST", "/steps", json={"goal": goal, "action": action})["step"])

    def evaluate(self, step: int, evaluation: str, *, analysis: str = "",
                 tool_outputs: Sequence[str] = ()) -> dict[str, Any]:
        """Returns the saved step record (name, type, step_id, description, body …)."""
        outputs = [tool_outputs] if isinstance(tool_outputs, str) else list(tool_outputs)
        return dict(self.session.call("POST", f"/steps/{int(step)}/evaluate", json={
            "evaluation": evaluation, "analysis": analysis, "tool_outputs": outputs}))

    @property
    def state(self) -> dict[str, Any]:
        """The tiers (pending, recent, summary), checkpoint and last <summary> lines."""
        return dict(self.session.call("GET", "/steps"))


class RemoteConstraints:
    """``s.constraints`` over HTTP: protected constraints of the default task (I7)."""

    def __init__(self, session: RemoteSession) -> None:
        self.session = session

    def set(self, name: str, value: Any, *, source: str = "user", note: str = "") -> Any:
        return self.session.call("PUT", f"/constraints/{quote(name, safe='')}",
                                 json={"value": value, "source": source, "note": note})["value"]

    def remove(self, name: str) -> None:
        self.session.call("DELETE", f"/constraints/{quote(name, safe='')}")

    def all(self) -> dict[str, Any]:
        found = self.session.call("GET", "/constraints")["constraints"]
        return {name: c["value"] for name, c in found.items()}


class RemoteFacts:
    """``s.facts`` over HTTP: read a key's current value, list current facts."""

    def __init__(self, session: RemoteSession) -> None:
        self.session = session

    def get(self, key: str) -> dict[str, Any] | None:
        """The current value of `key` (read-only), or None."""
        try:
            return dict(self.session.call("GET", f"/facts/{quote(key, safe='')}"))
        except NotFoundError:
            return None

    def list(self) -> builtins.list[dict[str, Any]]:
        return self.session.items("/facts")


def _built(data: dict[str, Any]) -> RemoteBuilt:
    report = {k: v for k, v in data.items() if k not in ("messages", "tools")}
    return RemoteBuilt(data["messages"], data["tools"], report)
