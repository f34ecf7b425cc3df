"""Every route of the API with a valid request: the table the tenancy and auth tests walk.

``test_the_table_covers_every_route`` fails when a route is added without a row here, so no
route can skip the cross-tenant, 401 and 403 checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .conftest import SESSION


@dataclass(frozen=True)
class Call:
    method: str
    template: str
    path: str
    body: Any = None
    writes: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.method} {self.template}"


S = f"/v1/sessions/{SESSION}"
T = "/v1/sessions/{session_id}"

CALLS: tuple[Call, ...] = (
    Call("GET", "/v1/sessions", "/v1/sessions"),
    Call("GET", T, S),
    Call("POST", T + "/messages", S + "/messages", {"message": {"role": "user", "content": "hello"}}, True),
    Call("GET", T + "/messages", S + "/messages"),
    Call("POST", T + "/steps", S + "/steps", {"goal": "look around"}, True),
    Call("POST", T + "/steps/{step}/evaluate", S + "/steps/1/evaluate", {"evaluation": "success"}, True),
    Call("GET", T + "/steps", S + "/steps"),
    Call("GET", T + "/records", S + "/records"),
    Call("GET", T + "/records/{name}", S + "/records/step_1"),
    Call("POST", T + "/records/read", S + "/records/read", {"names": ["step_1", "message:1", "fact:user:city"]}),
    Call("POST", T + "/recall", S + "/recall", {"query": "Tokyo hotels"}),
    Call("POST", T + "/facts", S + "/facts", {"key": "user:city", "content": "Osaka", "importance": 0.9}, True),
    Call("GET", T + "/facts", S + "/facts"),
    Call("GET", T + "/facts/{key}", S + "/facts/user:city"),
    Call("DELETE", T + "/facts/{key}", S + "/facts/user:city", writes=True),
    Call("GET", T + "/constraints", S + "/constraints"),
    Call("PUT", T + "/constraints/{name}", S + "/constraints/budget", {"value": 1}, True),
    Call("DELETE", T + "/constraints/{name}", S + "/constraints/budget", writes=True),
    Call("POST", T + "/checkpoint", S + "/checkpoint", {"step": 2}, True),
    Call("GET", T + "/tasks", S + "/tasks"),
    Call("GET", T + "/tasks/{task_id}", S + f"/tasks/{SESSION}"),
    Call("GET", T + "/tasks/{task_id}/events", S + f"/tasks/{SESSION}/events"),
    Call("GET", T + "/tasks/{task_id}/ledger", S + f"/tasks/{SESSION}/ledger"),
    Call("POST", T + "/context", S + "/context", {"budget_tokens": 4000}),
    Call("POST", T + "/turn", S + "/turn", {}, True),
    Call("GET", "/metrics", "/metrics"),  # the caller's tenant's series only
)
PUBLIC = {("GET", "/health"), ("GET", "/version")}
"""Routes without auth and without workspace data."""
