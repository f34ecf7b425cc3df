"""`mindpalace demo -w DIR --resume` continues a run killed from outside (kill -9 at a wall-clock
time, not an instrumented point) to the final state of an uninterrupted run (issue 11)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mindpalace.demo import fresh_config, resume_config, run_demo

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")

CLI = [sys.executable, "-m", "mindpalace.cli"]


def demo(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([*CLI, "demo", "--no-baseline", "--json", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_a_run_killed_from_outside_resumes_to_the_uninterrupted_final_state(tmp_path: Path) -> None:
    clean = run_demo(fresh_config(tmp_path / "clean", steps=120, seed=5, budget_tokens=2000))
    ws = tmp_path / "ws"
    proc = demo("-w", str(ws), "--steps", "120", "--seed", "5")
    acks = ws / "demo" / "demo-s5-r1-acks.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill it mid-run: after 30 acknowledged steps
        if acks.exists() and acks.read_text().count("\n") >= 30:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    resumed = demo("-w", str(ws), "--resume", "--steps", "999", "--seed", "1")  # its own parameters win
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    data = json.loads(out)
    report = data["reports"][0]
    assert data["session"] == "demo-s5-r1"
    assert report["fingerprint"] == clean.fingerprint
    assert (report["steps"], report["duplicates"], report["acked_events_lost"]) == (120, 0, 0)


def test_resume_picks_the_newest_run_and_none_without_one(tmp_path: Path) -> None:
    assert resume_config(tmp_path) is None
    first = fresh_config(tmp_path, steps=120, seed=3, budget_tokens=1500)
    os.utime(first.config_path, (1, 1))
    second = fresh_config(tmp_path, steps=130, seed=4, budget_tokens=1800)
    assert resume_config(tmp_path) == second
    second.config_path.write_text("{damaged")
    assert resume_config(tmp_path) == first
    for hostile in ("[" * 100_000, '{"session": "demo-s4-r1", "steps": 1e999, "seed": 4, "budget_tokens": 1}'):
        second.config_path.write_text(hostile)  # nested past the parser; a step count of inf
        assert resume_config(tmp_path) == first


def test_resume_needs_a_workspace() -> None:
    result = subprocess.run([*CLI, "demo", "--resume"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "--resume needs the --workspace" in result.stderr
