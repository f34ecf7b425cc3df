"""Lazy start: `mindpalace --help` (of the app and of every command) loads typer, rich and the
CLI modules only — the library is imported by a command when it runs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_startup.py"
HEAVY = ("mindpalace.memory", "mindpalace.store", "numpy", "tiktoken", "openai")

# Every --help of the CLI in one fresh interpreter, then the modules it loaded.
PROBE = """
import json, sys
import typer
from mindpalace.cli import app, main

def paths(cmd, prefix):
    subs = getattr(cmd, "commands", None)
    if subs is None:
        return [prefix]
    return [prefix] + [p for name, sub in subs.items() for p in paths(sub, [*prefix, name])]

helped = []
for path in paths(typer.main.get_command(app), []):
    sys.argv = ["mindpalace", *path, "--help"]
    try:
        main()
    except SystemExit as exc:
        assert exc.code in (0, None), (path, exc.code)
    helped.append(" ".join(path))
sys.stderr.write(json.dumps({"helped": helped, "modules": sorted(sys.modules)}))
"""


def test_help_of_every_command_imports_no_library_module() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stderr)
    assert {"", "context", "prepare", "task show", "embed sync"} <= set(report["helped"])
    modules = set(report["modules"])
    loaded = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert loaded == []
    library = sorted(m for m in modules if m.startswith("mindpalace.")
                     and not m.startswith("mindpalace.cli") and m != "mindpalace.errors")
    assert library == []


def test_python_dash_m_runs_the_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "mindpalace.cli", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Usage" in proc.stdout and "prepare" in proc.stdout


def test_bench_startup_measures_every_case_against_the_bare_interpreter(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_startup", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "rows.json"
    bench.main(["--runs", "1", "--json", str(out)])
    rows = json.loads(out.read_text(encoding="utf-8"))
    assert [r["case"] for r in rows] == ["python -c pass", "import mindpalace",
                                         "from mindpalace import Memory", "mindpalace --help"]
    assert rows[0]["ratio"] == 1.0 and all(r["runs"] == 1 and r["median_ms"] > 0 for r in rows)
