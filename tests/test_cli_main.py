"""The console-script entry point: exit codes and messages, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENTRY = [sys.executable, "-c", "from mindpalace.cli import main; main()"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=120)


def test_usage_error_exits_2_without_traceback() -> None:
    out = run("status", "--bogus")
    assert out.returncode == 2
    assert "No such option" in out.stderr and "Traceback" not in out.stderr


def test_library_error_exits_1_with_its_message(tmp_path: Path) -> None:
    out = run("status", str(tmp_path / "nowhere"))
    assert out.returncode == 1
    assert "is not a mindpalace workspace" in out.stderr and "Traceback" not in out.stderr


def test_python_dash_m_mindpalace_is_the_cli() -> None:
    # new-user finding: `python -m mindpalace` did not exist, only `python -m mindpalace.cli`
    done = subprocess.run([sys.executable, "-m", "mindpalace", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Usage" in done.stdout and "recall" in done.stdout, done.stderr
