"""Every route on the happy path, and bad input refused with a problem naming what was wrong
before anything is stored (malformed JSON, NaN, lone surrogates, deep nesting, a body over
the limit, naive datetimes, unknown names)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from mindpalace import Memory

from .conftest import BASE, LIMIT_BYTES, SCOPE, SESSION, seed
from .table import CALLS, Call

PROBLEM = "application/problem+json"


def post(c: TestClient, path: str, body: object, **kw: object):
    return c.post(BASE + path, json=body, params=SCOPE, **kw)


def get(c: TestClient, path: str = "", **params: object):
    return c.get(BASE + path, params={**SCOPE, **params})


class TestMessages:
    def test_add_and_list_in_order_with_timestamps(self, client: TestClient) -> None:
        r = post(client, "/messages", {"message": {"role": "user", "content": "5 days in Tokyo"},
                                       "timestamp": "2025-05-01T09:00:00+09:00"})
        assert r.status_code == 201 and r.json() == {"index": 1}
        post(client, "/messages", {"message": {"role": "assistant", "content": "ok"}})
        items = get(client, "/messages").json()["items"]
        assert [m["index"] for m in items] == [1, 2]
        assert items[0]["timestamp"] == "2025-05-01T00:00:00+00:00"
        assert items[0]["message"] == {"role": "user", "content": "5 days in Tokyo"}

    def test_pages_follow_the_cursor(self, client: TestClient) -> None:
        for i in range(5):
            post(client, "/messages", {"message": {"role": "user", "content": f"m{i}"}})
        first = get(client, "/messages", limit=2).json()
        assert [m["index"] for m in first["items"]] == [1, 2] and first["next_cursor"] == "3"
        rest = get(client, "/messages", limit=3, cursor=first["next_cursor"]).json()
        assert [m["index"] for m in rest["items"]] == [3, 4, 5] and rest["next_cursor"] is None

    def test_a_limit_over_the_maximum_is_refused(self, client: TestClient) -> None:
        r = get(client, "/messages", limit=51)
        assert r.status_code == 422 and "page_max_items" in r.json()["detail"]

    def test_a_naive_timestamp_is_refused_and_nothing_stored(self, client: TestClient) -> None:
        r = post(client, "/messages", {"message": {"role": "user", "content": "x"},
                                       "timestamp": "2025-05-01T09:00:00"})
        assert r.status_code == 422 and r.headers["content-type"] == PROBLEM
        assert r.json()["errors"][0]["pointer"] == "/body/timestamp"
        assert "timezone" in r.json()["detail"]
        assert get(client, "/messages").json()["items"] == []

    def test_a_timestamp_past_the_calendar_in_utc_is_a_422_not_a_500(self, client: TestClient) -> None:
        for stamp in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "9999-12-31T00:00:00Z"):
            r = post(client, "/messages", {"message": {"role": "user", "content": "x"}, "timestamp": stamp})
            assert r.status_code == 422 and "out of range" in r.json()["detail"], r.text
        assert get(client, "/messages").json()["items"] == []

    def test_invalid_utf8_in_the_url_is_a_422_not_a_scope_of_replacement_characters(
        self, client: TestClient
    ) -> None:
        # new-user finding: %ED%A0%80 (a UTF-8-encoded surrogate) or %FF in ?user= or in the
        # session id was decoded to U+FFFD and the message was written to user "\ufffd\ufffd\ufffd"
        body = {"message": {"role": "user", "content": "secret"}}
        for path, params, pointer in [
            (BASE + "/messages", "user=%ED%A0%80&agent=planner", "/query/user"),
            (BASE + "/messages", "user=u1&agent=%FF%FE", "/query/agent"),
            ("/v1/sessions/%FF%FE/messages", "user=u1", "/path"),
        ]:
            r = client.post(f"{path}?{params}", json=body)
            assert r.status_code == 422 and r.headers["content-type"] == PROBLEM, r.text
            assert r.json()["errors"][0]["pointer"] == pointer and "UTF-8" in r.json()["detail"]
        assert client.get("/v1/sessions").json()["items"] == []
        r = client.post(BASE + "/messages?user=%C3%A9l%C3%A8ve&agent=planner", json=body)  # valid UTF-8
        assert r.status_code == 201 and client.get("/v1/sessions").json()["items"][0]["user"] == "élève"

    def test_a_bad_role_is_refused_by_the_facade(self, client: TestClient) -> None:
        r = post(client, "/messages", {"message": {"role": "wizard", "content": "x"}})
        assert r.status_code == 422 and "role" in r.json()["detail"]

    def test_sessions_and_status(self, client: TestClient) -> None:
        post(client, "/messages", {"message": {"role": "user", "content": "hi"}})
        rows = client.get("/v1/sessions").json()["items"]
        assert rows == [{"user": "u1", "agent": "planner", "session": SESSION, "messages": 1}]
        status = get(client).json()
        assert status["messages"] == 1 and status["live"][0]["message"]["content"] == "hi"


    def test_the_status_of_an_unknown_session_is_a_404_naming_it(self, client: TestClient) -> None:
        # new-user finding: GET /v1/sessions/<typo> (or a forgotten ?user=) answered 200 with
        # 0 messages, while an unknown task, record or fact is a 404
        r = get(client)
        assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
        assert r.json()["kind"] == "session" and r.json()["name"] == SESSION
        assert SESSION in r.json()["detail"]
        post(client, "/messages", {"message": {"role": "user", "content": "hi"}})
        assert get(client).status_code == 200
        assert client.get(BASE, params={**SCOPE, "user": "u2"}).status_code == 404

    def test_a_session_holding_only_steps_or_a_checkpoint_is_known(self, client: TestClient) -> None:
        assert client.post("/v1/sessions/s-steps/steps", json={"goal": "g"}, params=SCOPE).status_code == 201
        assert client.post("/v1/sessions/s-task/checkpoint", json={"step": 1}, params=SCOPE).status_code == 200
        for sid in ("s-steps", "s-task"):
            r = client.get(f"/v1/sessions/{sid}", params=SCOPE)
            assert r.status_code == 200 and r.json()["messages"] == 0


class TestStepsAndRecords:
    def test_begin_evaluate_and_read_the_record(self, client: TestClient) -> None:
        step = post(client, "/steps", {"goal": "search Senso-ji hours"}).json()["step"]
        saved = post(client, f"/steps/{step}/evaluate",
                     {"evaluation": "success", "analysis": "free entry, 6:00-17:00",
                      "tool_outputs": ["<html>hours</html>"]}).json()
        assert saved["name"] == f"step_{step}" and "free entry" in saved["body"]
        tiers = get(client, "/steps").json()
        assert tiers["recent"] and tiers["pending"] == []
        assert get(client, f"/records/step_{step}").json()["body"] == saved["body"]
        listed = get(client, "/records").json()["items"]
        assert [r["name"] for r in listed] == [f"step_{step}"] and "body" not in listed[0]
        read = post(client, "/records/read", {"names": [f"step_{step}", "step_99"]}).json()
        assert list(read["found"]) == [f"step_{step}"] and read["missing"] == ["step_99"]

    def test_an_unknown_record_is_a_404_naming_it(self, client: TestClient) -> None:
        r = get(client, "/records/step_99")
        assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
        body = r.json()
        assert body["error"] == "NotFoundError" and body["name"] == "step_99"
        assert "step_99" in body["detail"]

    def test_evaluating_a_step_never_begun_is_a_404(self, client: TestClient) -> None:
        r = post(client, "/steps/7/evaluate", {"evaluation": "success"})
        assert r.status_code == 404 and "7" in r.json()["detail"]

    def test_a_reference_with_a_slash_is_read_by_its_url(self, memory: Memory, client: TestClient) -> None:
        # new-user finding: GET /records/{name} reads "one record or reference", but a knowledge
        # reference (knowledge:user/USER.md, knowledge:agent/L3/deploy.md) matched no route
        from mindpalace import Patch

        s = memory.for_tenant("acme").session(SESSION, user=SCOPE["user"], agent=SCOPE["agent"])
        s.knowledge.apply([Patch.insert("USER.md", "- likes tea")], message="a preference")
        r = get(client, "/records/knowledge:user%2FUSER.md")
        assert r.status_code == 200 and "likes tea" in r.json()["body"], r.text
        r = get(client, "/records/knowledge:user%2F..%2F..%2Fetc%2Fpasswd")
        assert r.status_code == 404 and r.json()["error"] == "NotFoundError"

    def test_a_path_trick_in_a_record_name_is_refused(self, client: TestClient) -> None:
        r = get(client, "/records/..%5C..%5Cetc")
        assert r.status_code == 404 and r.json()["error"] == "NotFoundError"


class TestFactsAndRecall:
    def test_remember_get_list_recall_forget(self, client: TestClient) -> None:
        r = post(client, "/facts", {"key": "user:home_city", "content": "Osaka", "importance": 0.9})
        assert r.status_code == 201 and r.json()["fact"]["id"]
        assert get(client, "/facts/user:home_city").json()["content"] == "Osaka"
        assert [f["key"] for f in get(client, "/facts").json()["items"]] == ["user:home_city"]
        hits = post(client, "/recall", {"query": "Osaka", "k": 3}).json()["hits"]
        assert hits and "Osaka" in hits[0]["text"]
        assert client.delete(f"{BASE}/facts/user:home_city", params=SCOPE).json() == {"forgotten": True}
        assert get(client, "/facts/user:home_city").status_code == 404
        assert client.delete(f"{BASE}/facts/user:home_city", params=SCOPE).status_code == 404

    def test_a_fact_key_with_a_slash_is_read_and_forgotten_by_its_url(self, client: TestClient) -> None:
        # new-user finding: "doc:a/b" or "user:/home/alice" is a valid key (stored by POST
        # /facts), but GET and DELETE /facts/doc:a%2Fb matched no route: a bare 404 "Not Found",
        # and RemoteMemory.forget answered False while the fact stayed
        for key in ("doc:a/b", "user:/home/alice/trips"):
            assert post(client, "/facts", {"key": key, "content": "kept", "importance": 0.9}).status_code == 201
            path = "/facts/" + key.replace("/", "%2F")
            r = get(client, path)
            assert r.status_code == 200 and r.json()["key"] == key
            assert client.delete(BASE + path, params=SCOPE).json() == {"forgotten": True}
            r = get(client, path)
            assert r.status_code == 404 and r.json()["error"] == "NotFoundError" and r.json()["name"] == key

    @pytest.mark.parametrize("importance", [1.5, -0.1, "high"])
    def test_importance_out_of_range_is_refused(self, client: TestClient, importance: object) -> None:
        r = post(client, "/facts", {"key": "user:x", "content": "y", "importance": importance})
        assert r.status_code == 422 and r.json()["errors"][0]["pointer"] == "/body/importance"

    @pytest.mark.parametrize(("path", "body", "field"), [
        ("/recall", {"query": "x", "k": "3"}, "k"),
        ("/recall", {"query": "x", "k": 3.0}, "k"),
        ("/facts", {"key": "user:x", "content": "y", "importance": "0.5"}, "importance"),
        ("/context", {"budget_tokens": "4000"}, "budget_tokens"),
        ("/turn", {"budget_tokens": True}, "budget_tokens"),
        ("/checkpoint", {"step": "2"}, "step"),
        ("/checkpoint", {"snapshot": "yes"}, "snapshot"),
        ("/checkpoint", {"snapshot": 1}, "snapshot"),
    ])
    def test_numbers_and_flags_are_never_coerced_from_other_json_types(
        self, client: TestClient, path: str, body: dict[str, object], field: str
    ) -> None:
        r = post(client, path, body)
        assert r.status_code == 422 and r.json()["errors"][0]["pointer"] == f"/body/{field}", r.text

    def test_json_numbers_of_the_right_kind_are_taken(self, client: TestClient) -> None:
        assert post(client, "/facts", {"key": "user:x", "content": "y", "importance": 1}).status_code == 201
        assert post(client, "/recall", {"query": "y", "k": 2}).status_code == 200

    def test_an_unknown_field_is_named(self, client: TestClient) -> None:
        r = post(client, "/recall", {"query": "x", "topk": 3})
        assert r.status_code == 422 and r.json()["errors"][0]["pointer"] == "/body/topk"


class TestTasks:
    def test_constraints_set_list_delete(self, client: TestClient) -> None:
        r = client.put(f"{BASE}/constraints/budget_per_night_cny", json={"value": 2000}, params=SCOPE)
        assert r.json() == {"name": "budget_per_night_cny", "value": 2000}
        listed = get(client, "/constraints").json()
        assert listed["constraints"]["budget_per_night_cny"]["value"] == 2000
        assert client.delete(f"{BASE}/constraints/budget_per_night_cny", params=SCOPE).status_code == 200
        assert client.delete(f"{BASE}/constraints/budget_per_night_cny", params=SCOPE).status_code == 404

    def test_a_tool_cannot_set_a_constraint(self, client: TestClient) -> None:
        client.put(f"{BASE}/constraints/budget", json={"value": 2000}, params=SCOPE)
        r = client.put(f"{BASE}/constraints/budget", json={"value": 9999, "source": "tool"}, params=SCOPE)
        assert r.status_code == 409 and r.json()["error"] == "ConstraintError"
        assert get(client, "/constraints").json()["constraints"]["budget"]["value"] == 2000

    def test_tasks_events_ledger_checkpoint(self, client: TestClient, memory: Memory) -> None:
        assert post(client, "/checkpoint", {"step": 1, "artifacts": {"hotel": "Ryokan"}}).json() == {"version": 1}
        s = memory.for_tenant("acme").session(SESSION, **SCOPE)
        s.tasks.ledger.start(s.task.id, "book_ticket", {"place": "Senso-ji"})
        assert get(client, "/tasks").json()["items"] == [{"task": SESSION, "version": 2}]
        state = get(client, f"/tasks/{SESSION}").json()
        assert state["artifacts"] == {"hotel": "Ryokan"}
        events = get(client, f"/tasks/{SESSION}/events", limit=1).json()
        assert events["items"][0]["type"] == "checkpoint" and events["next_cursor"] == "2"
        ledger = get(client, f"/tasks/{SESSION}/ledger").json()["items"]
        assert ledger[0]["tool"] == "book_ticket" and ledger[0]["status"] == "started"

    def test_an_unknown_task_is_a_404_and_a_bad_id_a_422(self, client: TestClient) -> None:
        assert get(client, "/tasks/nope").status_code == 404
        assert get(client, "/tasks/a b").status_code == 422


class TestPrompt:
    def test_context_is_a_pure_build(self, client: TestClient) -> None:
        seed(client, "M")
        before = get(client).json()
        built = post(client, "/context", {"budget_tokens": 3000, "query": "Tokyo"}).json()
        assert built["total_tokens"] <= 3000 and built["consolidation"] is None
        assert any("Tokyo" in str(m.get("content")) for m in built["messages"])
        assert get(client).json() == before

    def test_turn_consolidates_then_builds(self, memory: Memory, keys, app) -> None:  # type: ignore[no-untyped-def]
        from .conftest import auth

        c = TestClient(app, headers=auth(keys.acme))
        for i in range(30):
            post(c, "/messages", {"message": {"role": "user" if i % 2 == 0 else "assistant",
                                              "content": f"turn {i}: flight UA{100 + i} costs {i * 50} CNY " * 3}})
        built = post(c, "/turn", {"budget_tokens": 600}).json()
        assert built["total_tokens"] <= 600
        assert built["consolidation"]["archived_messages"] > 0
        assert get(c).json()["last_consolidated"] > 0
        # the archive is the tenant's own: another tenant's read of history:1 finds nothing
        other = TestClient(app, headers=auth(keys.globex))
        read = post(other, "/records/read", {"names": ["history:1"]}).json()
        assert read == {"found": {}, "missing": ["history:1"], "problems": {}}

    def test_a_budget_below_the_minimum_is_a_422(self, client: TestClient) -> None:
        tools = [{"type": "function", "function": {"name": f"t{i}", "description": "x" * 200,
                                                   "parameters": {"type": "object"}}} for i in range(10)]
        r = post(client, "/context", {"budget_tokens": 50, "tools": tools})
        assert r.status_code == 422 and r.json()["error"] == "ContextBudgetError"


BODY_CALLS = [c for c in CALLS if c.body is not None]


def raw(c: TestClient, call: Call, content: bytes | Iterator[bytes], **headers: str):
    return c.request(call.method, call.path, params=SCOPE, content=content,
                     headers={"content-type": "application/json", **headers})


@pytest.mark.parametrize("call", BODY_CALLS, ids=lambda c: c.id)
class TestBadBodies:
    def test_malformed_json(self, client: TestClient, call: Call) -> None:
        r = raw(client, call, b'{"message": ')
        assert r.status_code == 422 and r.headers["content-type"] == PROBLEM
        assert "malformed JSON" in r.json()["detail"]

    def test_nan_and_infinity(self, client: TestClient, call: Call) -> None:
        for constant in (b"NaN", b"Infinity", b"-Infinity"):
            r = raw(client, call, b'{"x": ' + constant + b"}")
            assert r.status_code == 422 and "NaN and Infinity" in r.json()["detail"]

    def test_a_lone_surrogate_is_named_by_pointer(self, client: TestClient, call: Call) -> None:
        r = raw(client, call, b'{"a": {"b/c": ["ok", "x\\udc00"]}}')
        assert r.status_code == 422
        assert r.json()["errors"][0]["pointer"] == "/body/a/b~1c/1"
        assert "lone surrogate" in r.json()["detail"]

    def test_a_duplicate_key_is_refused_naming_it(self, client: TestClient, call: Call) -> None:
        # new-user finding: {"message": A, "message": B} was taken as B (the last wins in
        # Python; a proxy or a log reading the first sees A): ambiguous, so refused
        r = raw(client, call, b'{"a": {"k": 1, "k": 2}}')
        assert r.status_code == 422 and "duplicate key 'k'" in r.json()["detail"]

    def test_invalid_utf8(self, client: TestClient, call: Call) -> None:
        r = raw(client, call, b'{"a": "\xff"}')
        assert r.status_code == 422 and "UTF-8" in r.json()["detail"]

    def test_deep_nesting(self, client: TestClient, call: Call) -> None:
        r = raw(client, call, b'{"a": ' + b"[" * 100 + b"]" * 100 + b"}")
        assert r.status_code == 422 and "nested deeper" in r.json()["detail"]

    def test_over_the_limit_is_413(self, client: TestClient, call: Call) -> None:
        big = json.dumps({"x": "y" * LIMIT_BYTES}).encode()
        r = raw(client, call, big)
        assert r.status_code == 413 and r.headers["content-type"] == PROBLEM
        assert str(LIMIT_BYTES) in r.json()["detail"]

    def test_chunked_over_the_limit_is_413(self, client: TestClient, call: Call) -> None:
        def chunks() -> Iterator[bytes]:
            yield b'{"x": "'
            for _ in range(LIMIT_BYTES // 512 + 2):
                yield b"y" * 512
            yield b'"}'

        r = raw(client, call, chunks())
        assert r.status_code == 413

    def test_not_json_content_type(self, client: TestClient, call: Call) -> None:
        r = raw(client, call, json.dumps(call.body).encode(), **{"content-type": "text/plain"})
        assert r.status_code == 422


def test_nothing_is_stored_by_refused_bodies(client: TestClient) -> None:
    for body in (b'{"message": {"role": "user", "content": NaN}}',
                 b'{"message": {"role": "user", "content": "\\ud800"}}',
                 b'{"message": {"role": "user", "content": "a"}, "message": {"role": "user", "content": "b"}}',
                 b'{"message": {"role": "user", "content": "x"}, "timestamp": "2025-01-01T00:00:00"}'):
        assert client.post(f"{BASE}/messages", params=SCOPE, content=body,
                           headers={"content-type": "application/json"}).status_code == 422
    assert get(client, "/messages").json()["items"] == []


def test_unknown_route_and_method_are_problems(client: TestClient) -> None:
    r = client.get("/v1/nope")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
    r = client.delete("/v1/sessions")
    assert r.status_code == 405 and r.headers["content-type"] == PROBLEM


def test_auth_off_serves_the_default_tenant(open_client: TestClient, memory: Memory) -> None:
    open_client.post(f"{BASE}/messages", params=SCOPE, json={"message": {"role": "user", "content": "hi"}})
    assert memory.session(SESSION, **SCOPE).messages.count() == 1
