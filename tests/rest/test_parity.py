"""The client speaks the facade's language: same method names, same parameters (STYLE.md §5,
checked with inspect.signature like graphiti's core-parity test)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mindpalace.client import RemoteConstraints, RemoteMemory, RemoteSession, RemoteSteps
from mindpalace.memory import Memory, Session
from mindpalace.steps import StepMemory
from mindpalace.tasks import Constraints

from .conftest import BASE, SCOPE

PAIRS: list[tuple[Callable[..., Any], Callable[..., Any]]] = [
    (RemoteMemory.session, Memory.session),
    (RemoteSession.add_message, Session.add_message),
    (RemoteSession.remember, Session.remember),
    (RemoteSession.forget, Session.forget),
    (RemoteSession.recall, Session.recall),
    (RemoteSession.read_records, Session.read_records),
    (RemoteSession.context, Session.context),
    (RemoteSession.prepare, Session.prepare),
    (RemoteSession.checkpoint, Session.checkpoint),
    (RemoteSession.status, Session.status),
    (RemoteSteps.begin, StepMemory.begin),
    (RemoteSteps.evaluate, StepMemory.evaluate),
    (RemoteConstraints.set, Constraints.set),
]


def params(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name != "self"]


@pytest.mark.parametrize(("remote", "local"), PAIRS, ids=lambda f: f.__qualname__)
def test_same_name_and_parameters(remote: Callable[..., Any], local: Callable[..., Any]) -> None:
    assert remote.__name__ == local.__name__
    assert params(remote) == params(local)


def test_an_unexpected_failure_is_a_500_problem_without_a_traceback(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(self: Session, query: str, k: int | None = None) -> list[Any]:
        raise RuntimeError("secret internals at /srv/app.py line 12")

    monkeypatch.setattr(Session, "recall", boom)
    r = client.post(f"{BASE}/recall", params=SCOPE, json={"query": "x"})
    assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["detail"] == "internal error (RuntimeError); see the server log"
    assert "Traceback" not in r.text and "secret" not in r.text
