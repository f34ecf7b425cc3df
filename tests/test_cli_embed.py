"""CLI: `mindpalace embed sync`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.cli import app


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "hashing")
    ws = tmp_path / "ws"
    with Memory.open(ws) as mem:
        for i in range(5):
            mem.store.index_document(mem.scope(user="u"), "note", f"n{i}", f"note {i}")
    return ws


class TestEmbedSync:
    def test_sync_embeds_missing_documents_and_reports_json(self, workspace: Path) -> None:
        result = CliRunner().invoke(app, ["embed", "sync", str(workspace), "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert {k: data[k] for k in ("model", "dim", "embedded", "retired_models")} == {
            "model": "hashing-256", "dim": 256, "embedded": 5, "retired_models": []}

    def test_embedder_change_is_reported_as_retired_model(
        self, workspace: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        CliRunner().invoke(app, ["embed", "sync", str(workspace)])
        monkeypatch.setenv("MINDPALACE_EMBED__DIMENSIONS", "32")
        result = CliRunner().invoke(app, ["embed", "sync", str(workspace)])
        assert result.exit_code == 0, result.output
        assert "retired models: hashing-256 (5 vectors dropped)" in " ".join(result.stdout.split())
