"""REST fixtures: a workspace, API keys of two tenants, the app, and a real uvicorn server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mindpalace import Memory
from mindpalace.auth import ApiKeys
from mindpalace.rest import create_app
from mindpalace.settings import ServerSettings

SESSION, USER, AGENT = "trip-42", "u1", "planner"
SCOPE = {"user": USER, "agent": AGENT}
BASE = f"/v1/sessions/{SESSION}"
LIMIT_BYTES = 4_096  # a small body limit so 413 needs no megabytes


@dataclass(frozen=True)
class Keys:
    acme: str
    globex: str
    acme_read_only: str
    revoked: str


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def keys(memory: Memory) -> Keys:
    api = ApiKeys(memory.store)
    revoked, revoked_secret = api.create("acme", name="old")
    api.revoke(revoked.id)
    return Keys(api.create("acme")[1], api.create("globex")[1],
                api.create("acme", scopes=["read"])[1], revoked_secret)


@pytest.fixture
def app(memory: Memory) -> FastAPI:
    return create_app(memory, ServerSettings(max_body_bytes=LIMIT_BYTES, page_max_items=50))


@pytest.fixture
def client(app: FastAPI, keys: Keys) -> Iterator[TestClient]:
    """Tenant acme's client (read + write key)."""
    with TestClient(app, headers=auth(keys.acme), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def open_client(memory: Memory) -> Iterator[TestClient]:
    """A client of an app with auth off (tenant 'default')."""
    app = create_app(memory, ServerSettings(max_body_bytes=LIMIT_BYTES), auth=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def seed(c: TestClient, marker: str) -> None:
    """Fill every resource of the session with text carrying `marker`."""
    q = {"params": SCOPE}
    assert c.post(f"{BASE}/messages", json={"message": {"role": "user", "content": f"{marker} trip to Tokyo"}}, **q).status_code == 201
    step = c.post(f"{BASE}/steps", json={"goal": f"{marker} search hotels"}, **q).json()["step"]
    assert c.post(f"{BASE}/steps/{step}/evaluate", json={"evaluation": "success", "analysis": f"{marker} found"}, **q).status_code == 200
    assert c.post(f"{BASE}/facts", json={"key": "user:city", "content": f"{marker} Tokyo", "importance": 0.9}, **q).status_code == 201
    assert c.put(f"{BASE}/constraints/budget", json={"value": f"{marker} 2000"}, **q).status_code == 200
    assert c.post(f"{BASE}/checkpoint", json={"step": 1, "artifacts": {"note": marker}}, **q).status_code == 200


class LiveServer:
    """uvicorn serving `app` on a loopback socket bound before the server starts (no waiting:
    connections queue in the listen backlog until uvicorn accepts them)."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture
def live(app: FastAPI) -> Iterator[LiveServer]:
    with LiveServer(app) as server:
        yield server
