"""CLI: `mindpalace llm check` against the offline provider and a real local HTTP server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app
from mindpalace.errors import ProviderResponseError
from mindpalace.testing.openai_stub import StubServer, chat, html_page, serve_stub


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "hashing")
    ws = tmp_path / "ws"
    Memory.open(ws).close()
    return ws


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubServer]:
    with serve_stub() as server:
        monkeypatch.setenv("MINDPALACE_LLM__PROVIDER", "openai")
        monkeypatch.setenv("MINDPALACE_LLM__BASE_URL", server.url)
        monkeypatch.setenv("MINDPALACE_LLM__MODEL", "stub-model")
        monkeypatch.setenv("MINDPALACE_LLM__MAX_RETRIES", "0")
        yield server


class TestLlmCheck:
    def test_offline_default_reports_the_extractive_provider(self, workspace: Path) -> None:
        result = CliRunner().invoke(app, ["llm", "check", str(workspace), "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert (data["provider"], data["model"], data["finish_reason"]) == ("extractive", "extractive", "stop")
        assert data["reply"] == "Reply with the single word: ok"
        assert data["total_tokens"] == data["prompt_tokens"] + data["completion_tokens"] > 0

    def test_openai_endpoint_reports_model_usage_and_latency(self, workspace: Path, stub: StubServer) -> None:
        stub.script(chat("ok", usage=(12, 1)))
        result = CliRunner().invoke(app, ["llm", "check", str(workspace), "--json", "--max-tokens", "5"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert data["provider"] == "openai" and data["endpoint"] == stub.url
        assert (data["model"], data["reply"], data["total_tokens"]) == ("stub-model-2024", "ok", 13)
        assert data["latency_ms"] >= 0
        [req] = stub.requests
        assert req["json"]["model"] == "stub-model" and req["json"]["max_tokens"] == 5

    def test_table_output_names_provider_and_model(self, workspace: Path, stub: StubServer) -> None:
        stub.script(chat("ok"))
        result = CliRunner().invoke(app, ["llm", "check", str(workspace)])
        assert result.exit_code == 0, result.output
        assert "openai" in result.stdout and "stub-model-2024" in result.stdout

    def test_a_failing_endpoint_exits_non_zero_with_the_classified_error(
        self, workspace: Path, stub: StubServer
    ) -> None:
        stub.script(html_page(502, "502 Bad Gateway"))
        result = CliRunner().invoke(app, ["llm", "check", str(workspace)])
        assert result.exit_code != 0
        assert isinstance(result.exception, ProviderResponseError)
        assert "HTML error page (502 Bad Gateway)" in str(result.exception)
