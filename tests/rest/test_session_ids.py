"""Bad input over REST that the Python API refuses too: a session id that is not one printable
path segment, a query list over the cap — a 422 naming it, before any write or search."""

from __future__ import annotations

from urllib.parse import quote

from fastapi.testclient import TestClient

from .conftest import BASE, SCOPE


def test_a_control_character_in_the_session_id_is_a_422_naming_it(client: TestClient) -> None:
    path = "/v1/sessions/" + quote("trip\n42", safe="") + "/messages"
    r = client.post(path, params=SCOPE, json={"message": {"role": "user", "content": "hi"}})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "ValidationError"
    assert "session id" in r.json()["detail"] and "'trip\\n42'" in r.json()["detail"]
    assert client.get("/v1/sessions", params=SCOPE).json()["items"] == []  # nothing was stored


def test_a_query_list_over_the_cap_is_a_422_before_any_search(client: TestClient) -> None:
    from mindpalace.context import MAX_QUERIES
    r = client.post(f"{BASE}/context", params=SCOPE, json={"budget_tokens": 500, "query": ["a"] * (MAX_QUERIES + 1)})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["pointer"].startswith("/body/query")
