"""The turn lease between processes: of two processes taking one session's lease at once,
exactly one holds it (read-check-write under the session's file lock, I6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mindpalace import Memory

# Takes the lease when told to, answers "held" or "busy", keeps it until told to stop.
TAKER = r"""
import sys
from mindpalace import Memory
from mindpalace.session.lease import SessionBusyError

mem = Memory.open(sys.argv[1], embed={"provider": "none"})
s = mem.session("shared", user="u")
print("ready", flush=True)
sys.stdin.readline()
try:
    with s.lease(holder=sys.argv[2]):
        print("held", flush=True)
        sys.stdin.readline()
except SessionBusyError:
    print("busy", flush=True)
    sys.stdin.readline()
mem.close()
"""


def test_two_processes_taking_one_lease_at_once_one_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "ws"
    Memory.open(path, embed={"provider": "none"}).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", TAKER, str(path), name], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("a", "b")
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:  # both try at once
            assert p.stdin is not None
            p.stdin.write("take\n")
            p.stdin.flush()
        answers = sorted(p.stdout.readline().strip() for p in procs if p.stdout is not None)
    finally:
        outs = [p.communicate("stop\n", timeout=60) for p in procs]
    assert answers == ["busy", "held"], [err[-2000:] for _, err in outs]
    assert all(p.returncode == 0 for p in procs)
    with Memory.open(path, embed={"provider": "none"}) as mem:  # released by its holder
        assert mem.session("shared", user="u").status().lease is None
