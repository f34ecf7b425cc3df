"""Session ids over REST: one that the Python API refuses is a 422 naming it, before any write."""

from __future__ import annotations

from urllib.parse import quote

from fastapi.testclient import TestClient

from .conftest import SCOPE


def test_a_control_character_in_the_session_id_is_a_422_naming_it(client: TestClient) -> None:
    path = "/v1/sessions/" + quote("trip\n42", safe="") + "/messages"
    r = client.post(path, params=SCOPE, json={"message": {"role": "user", "content": "hi"}})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "ValidationError"
    assert "session id" in r.json()["detail"] and "'trip\\n42'" in r.json()["detail"]
    assert client.get("/v1/sessions", params=SCOPE).json()["items"] == []  # nothing was stored
