"""I10 over HTTP: a key reaches its own tenant only — on every route, whatever the ids in the
request — and every /v1 route refuses a missing or revoked key (401) and a write with a
read-only key (403)."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from .conftest import SCOPE, Keys, auth, seed
from .table import CALLS, PUBLIC, Call

MARKER = "ZEBRA7"


def send(c: TestClient, call: Call, headers: dict[str, str] | None = None):
    return c.request(call.method, call.path, params={**SCOPE, **call.params},
                     content=None if call.body is None else json.dumps(call.body),
                     headers={"content-type": "application/json", **(headers or {})})


def test_the_table_covers_every_route(app: FastAPI) -> None:
    served = {(method.upper(), path) for path, ops in app.openapi()["paths"].items()
              for method in ops}
    listed = {(c.method, c.template) for c in CALLS} | PUBLIC
    assert served == listed


def snapshot(c: TestClient) -> str:
    """Everything tenant acme stores for the session, as one text (the GET routes: recall is
    left out, it counts hits on what it finds)."""
    views = [send(c, call).text for call in CALLS if call.method == "GET"]
    return "\n".join(views)


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.id)
def test_another_tenant_never_reaches_the_data(
    client: TestClient, app: FastAPI, keys: Keys, call: Call
) -> None:
    seed(client, MARKER)
    before = snapshot(client)
    assert MARKER in before
    other = TestClient(app, headers=auth(keys.globex), raise_server_exceptions=False)
    reply = send(other, call)
    assert reply.status_code < 500, reply.text
    assert MARKER not in reply.text  # the same session, user and agent ids, another tenant
    assert snapshot(client) == before  # nothing of acme's changed


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.id)
@pytest.mark.parametrize("who", ["none", "revoked", "malformed"])
def test_every_route_needs_a_live_key(app: FastAPI, keys: Keys, call: Call, who: str) -> None:
    headers = {"none": {}, "revoked": auth(keys.revoked), "malformed": auth("not-a-key")}[who]
    reply = send(TestClient(app, raise_server_exceptions=False), call, headers)
    assert reply.status_code == 401, reply.text
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.json()["error"] == "AuthError"
    assert reply.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("call", [c for c in CALLS if c.writes], ids=lambda c: c.id)
def test_a_read_only_key_cannot_write(client: TestClient, app: FastAPI, keys: Keys, call: Call) -> None:
    seed(client, MARKER)
    before = snapshot(client)
    reader = TestClient(app, headers=auth(keys.acme_read_only), raise_server_exceptions=False)
    reply = send(reader, call)
    assert reply.status_code == 403 and reply.json()["error"] == "PermissionDeniedError"
    assert snapshot(client) == before


@pytest.mark.parametrize("call", [c for c in CALLS if not c.writes], ids=lambda c: c.id)
def test_a_read_only_key_reads(client: TestClient, app: FastAPI, keys: Keys, call: Call) -> None:
    seed(client, MARKER)
    reader = TestClient(app, headers=auth(keys.acme_read_only), raise_server_exceptions=False)
    assert send(reader, call).status_code == 200


def test_public_routes_need_no_key(app: FastAPI) -> None:
    c = TestClient(app)
    assert c.get("/health").json() == {"status": "ok"}
    assert c.get("/version").json()["api"] == "v1"
    assert c.get("/openapi.json").json()["info"]["title"] == "mindpalace"
