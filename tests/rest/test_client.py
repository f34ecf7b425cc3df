"""The Python client against a real uvicorn server on loopback: the facade's calls over HTTP,
errors raised as the library's own exceptions."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from mindpalace import Memory
from mindpalace.client import RemoteMemory
from mindpalace.errors import (
    AuthError,
    ConstraintError,
    NotFoundError,
    PermissionDeniedError,
    RemoteError,
    ValidationError,
)

from .conftest import AGENT, LIMIT_BYTES, SESSION, USER, Keys, LiveServer


@pytest.fixture
def remote(live: LiveServer, keys: Keys):  # type: ignore[no-untyped-def]
    with RemoteMemory(live.url, keys.acme) as mem:
        yield mem


def test_the_design_example_over_http(remote: RemoteMemory, memory: Memory) -> None:
    s = remote.session(SESSION, user=USER, agent=AGENT)
    assert s.add_message({"role": "user", "content": "5 days in Tokyo, 8000 CNY per person"},
                         timestamp=datetime(2025, 5, 1, tzinfo=UTC)) == 1
    assert s.constraints.set("budget_per_night_cny", 2000, source="user") == 2000
    step = s.steps.begin(goal="search Senso-ji opening hours")
    record = s.steps.evaluate(step, "success", analysis="free entry, 6:00-17:00")
    assert record["name"] == f"step_{step}"
    built = s.prepare(budget_tokens=4_000)
    assert built.report["total_tokens"] <= 4_000 and built.messages
    pure = s.context(budget_tokens=4_000)
    assert pure.messages == built.messages and pure.report["consolidation"] is None
    s.remember("user:home_city", "Osaka", importance=0.9)
    hits = s.recall("Osaka", k=5)
    assert hits and "Osaka" in hits[0].text
    assert list(s.read_records([f"step_{step}"])["found"]) == [f"step_{step}"]
    assert s.checkpoint(step=1) > 0
    # the server wrote to tenant acme's memory, exactly as an in-process call would
    local = memory.for_tenant("acme").session(SESSION, user=USER, agent=AGENT)
    assert local.messages.count() == 1 and local.constraints.all() == {"budget_per_night_cny": 2000}
    assert local.facts.peek("user:home_city").content == "Osaka"  # type: ignore[union-attr]


def test_lists_follow_every_page(remote: RemoteMemory) -> None:
    s = remote.session(SESSION, user=USER, agent=AGENT)
    for i in range(120):  # over the default page of 50
        s.add_message({"role": "user", "content": f"m{i}"})
    assert [m["index"] for m in s.list_messages()] == list(range(1, 121))
    assert remote.sessions() == [{"user": USER, "agent": AGENT, "session": SESSION, "messages": 120}]


def test_task_views(remote: RemoteMemory) -> None:
    s = remote.session(SESSION, user=USER, agent=AGENT)
    s.checkpoint(step=1, artifacts={"hotel": "Ryokan"})
    assert s.tasks() == [{"task": SESSION, "version": 1}]
    assert s.task_state()["artifacts"] == {"hotel": "Ryokan"}
    assert [e["type"] for e in s.task_events()] == ["checkpoint"]
    assert s.ledger() == []


class TestErrorsMapBack:
    def test_not_found(self, remote: RemoteMemory) -> None:
        s = remote.session(SESSION)
        with pytest.raises(NotFoundError, match="step_99"):
            s.record("step_99")
        assert s.forget("user:nothing") is False
        assert s.facts.get("user:nothing") is None

    def test_validation(self, remote: RemoteMemory) -> None:
        s = remote.session(SESSION)
        with pytest.raises(ValidationError, match="role"):
            s.add_message({"role": "wizard", "content": "x"})
        with pytest.raises(ValidationError, match="naive"):
            s.add_message({"role": "user", "content": "x"}, timestamp=datetime(2025, 5, 1))

    def test_constraint(self, remote: RemoteMemory) -> None:
        s = remote.session(SESSION)
        s.constraints.set("budget", 2000)
        with pytest.raises(ConstraintError, match="tool"):
            s.constraints.set("budget", 1, source="tool")
        assert s.constraints.all() == {"budget": 2000}

    def test_auth(self, live: LiveServer, keys: Keys) -> None:
        with RemoteMemory(live.url, keys.revoked) as mem, pytest.raises(AuthError, match="revoked"):
            mem.sessions()
        with RemoteMemory(live.url, keys.acme_read_only) as mem:
            with pytest.raises(PermissionDeniedError, match="write"):
                mem.session(SESSION).add_message({"role": "user", "content": "x"})
            assert mem.sessions() == []

    def test_unreachable_server(self) -> None:
        with RemoteMemory("http://127.0.0.1:9", timeout_seconds=2) as mem, \
                pytest.raises(RemoteError, match="mindpalace serve"):
            mem.health()


def test_tenants_are_apart_over_http(live: LiveServer, keys: Keys) -> None:
    with RemoteMemory(live.url, keys.acme) as acme, RemoteMemory(live.url, keys.globex) as globex:
        acme.session(SESSION).remember("user:city", "Osaka", importance=0.9)
        assert globex.session(SESSION).facts.get("user:city") is None
        assert globex.session(SESSION).recall("Osaka") == []


def test_413_over_real_http_declared_and_chunked(live: LiveServer, keys: Keys) -> None:
    url = f"{live.url}/v1/sessions/{SESSION}/messages"
    headers = {"Authorization": f"Bearer {keys.acme}", "content-type": "application/json"}
    big = b'{"message": {"role": "user", "content": "' + b"y" * LIMIT_BYTES + b'"}}'

    def chunks():  # type: ignore[no-untyped-def]
        yield big[:100]
        yield big[100:]

    with httpx.Client() as http:
        declared = http.post(url, content=big, headers=headers)
        chunked = http.post(url, content=chunks(), headers=headers)
    for r in (declared, chunked):
        assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("message", [
    {"role": "user", "content": "x", "score": float("nan")},
    {"role": "user", "content": "bad \ud800 bytes"},
    {"role": "user", "content": "x", "meta": object()},
])
def test_a_body_the_client_cannot_encode_is_a_validation_error_not_a_raw_one(
    remote: RemoteMemory, memory: Memory, message: dict
) -> None:
    # new-user finding: NaN raised httpx's raw ValueError, a lone surrogate a raw
    # UnicodeEncodeError and an object a TypeError, before anything reached the server
    s = remote.session(SESSION, user=USER, agent=AGENT)
    with pytest.raises(ValidationError, match="/messages"):
        s.add_message(message)
    with pytest.raises(ValidationError, match="user"):
        remote.session(SESSION, user="u\udc80", agent=AGENT).status()
    assert memory.for_tenant("acme").session(SESSION, user=USER, agent=AGENT).messages.count() == 0
