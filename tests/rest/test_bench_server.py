"""bench_server stays runnable: a tiny run measures both modes with no errors."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_tiny_run_measures_both_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINDPALACE_SHARED_DATA", str(tmp_path / "none"))  # the synthetic chat
    spec = importlib.util.spec_from_file_location("bench_server", REPO / "benchmarks" / "bench_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_server"] = module
    spec.loader.exec_module(module)
    out = tmp_path / "rows.json"
    assert module.main(["--clients", "2", "--requests", "6", "--seconds", "60", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {(r["op"], r["mode"]) for r in rows} == {
        ("recall", "in-process"), ("recall", "REST"), ("context", "in-process"), ("context", "REST")}
    assert all(r["completed"] == 6 and r["errors"] == 0 and r["per_s"] > 0 for r in rows)
