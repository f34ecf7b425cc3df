"""Metrics: a per-Memory Prometheus registry, served at /metrics in the text format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from mindpalace import Memory
from mindpalace.auth import ApiKeys
from mindpalace.errors import ConstraintError, OutcomeUnknownError
from mindpalace.rest import create_app


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, parsed by the Prometheus text parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def mem(tmp_path: Path):
    with Memory.open(tmp_path / "ws", embed={"provider": "none"}) as m:
        yield m


def test_metrics_route_parses_and_counts_what_the_tenant_did(mem: Memory) -> None:
    api = ApiKeys(mem.store)
    acme, globex = api.create("acme")[1], api.create("globex")[1]
    app = create_app(mem)
    with TestClient(app, headers={"Authorization": f"Bearer {acme}"}) as c:
        base, q = "/v1/sessions/m1", {"params": {"user": "u1"}}
        assert c.post(f"{base}/messages", json={"message": {"role": "user", "content": "Tokyo hotels in May"}}, **q).status_code == 201
        for _ in range(3):
            assert c.post(f"{base}/recall", json={"query": "Tokyo"}, **q).status_code == 200
        assert c.post(f"{base}/turn", json={"budget_tokens": 2_000}, **q).status_code == 200
        reply = c.get("/metrics")
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
        text = reply.text
        other = TestClient(app, headers={"Authorization": f"Bearer {globex}"}).get("/metrics").text
        assert TestClient(app).get("/metrics").status_code == 401  # protected like the data routes
    assert value(text, "mindpalace_recall_seconds_count") == 3
    assert value(text, "mindpalace_prompt_tokens_count") == 1
    assert 0 < value(text, "mindpalace_prompt_tokens_sum") <= 2_000
    assert value(text, "mindpalace_prompt_budget_ratio_bucket", le="1.0") == 1
    assert value(text, "mindpalace_dream_token_budget_tokens") == mem.settings.knowledge.dream_token_budget
    assert value(text, "mindpalace_consolidation_summary_cap_tokens") == mem.settings.session.summary_max_tokens
    # globex's scrape has none of acme's observations (per-tenant registries, I10)
    assert value(other, "mindpalace_recall_seconds_count") == 0
    assert value(other, "mindpalace_prompt_tokens_count") == 0


def test_two_handles_never_share_a_series(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "a", embed={"provider": "none"}) as a, \
            Memory.open(tmp_path / "b", embed={"provider": "none"}) as b:
        a.session("s", user="u").recall("anything")
        assert a.metrics.summary()["recalls"] == 1
        assert b.metrics.summary()["recalls"] == 0
        assert a.for_tenant("other").metrics.summary()["recalls"] == 0


def test_consolidation_compactions_and_gate_rejections_are_counted(mem: Memory) -> None:
    s = mem.session("long", user="u")
    for i in range(40):
        s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                       "content": f"message {i} about the trip to Kyoto and the temples " * 8})
    built = s.prepare(1_200)
    result = built.report.consolidation
    assert result is not None and result.entries > 0
    summary = mem.metrics.summary()
    assert summary["compactions"] == 1 and summary["prompts"] == 1
    assert summary["summary_gate_rejections"] == result.raw_fallbacks
    assert summary["consolidation_tokens"] == result.summary_tokens_spent
    assert summary["prompt_budget_ratio_mean"] <= 1.0


def test_ledger_replays_unknown_outcomes_and_constraint_refusals(mem: Memory) -> None:
    s = mem.session("tools", user="u")
    with s.tool_call("lookup", {"id": 1}) as call:
        call.run(lambda id: {"found": id})
    with s.tool_call("lookup", {"id": 1}) as call:  # completed before: answered from the ledger
        assert call.done and call.run(lambda id: {"found": "again"}) == {"found": 1}

    def crash(**_: Any) -> None:
        raise RuntimeError("connection reset after sending")

    with pytest.raises(RuntimeError), s.tool_call("pay", {"amount": 5}) as call:
        call.run(crash)  # outcome unknown: recorded
    with pytest.raises(OutcomeUnknownError), s.tool_call("pay", {"amount": 5}) as call:
        call.run(crash)  # refused: the earlier outcome is unknown
    s.constraints.set("budget", 100, source="user")
    s.constraints.guard("book", "price <= budget")
    with pytest.raises(ConstraintError), s.tool_call("book", {"price": 500}) as call:
        call.run(lambda price: "booked")
    text = mem.metrics.exposition().decode()
    assert value(text, "mindpalace_ledger_replays_total") == 1
    assert value(text, "mindpalace_ledger_unknown_outcomes_total") == 2
    assert value(text, "mindpalace_constraint_refusals_total") == 1
