"""Two processes write one workspace at once: nothing lost, versions contiguous, no lock errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mindpalace.scope import Scope
from mindpalace.store import SQLiteStore
from mindpalace.store.sqlite import SCHEMA_VERSION

EVENTS_PER_WORKER = 150

# Waits for "go" so both workers open (and migrate) a fresh database at the same moment, then
# appends to its own stream and to a shared stream with optimistic retries.
WORKER = r"""
import json, sys
from pathlib import Path
from mindpalace.errors import ConcurrencyError
from mindpalace.scope import Scope
from mindpalace.store import NewEvent, SQLiteStore

db, wid, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
st = SQLiteStore(db)
scope = Scope("t", "u", "a", "s")
conflicts = 0
for i in range(n):
    st.append_events(scope, f"own-{wid}", [NewEvent("e", {"w": wid, "i": i})])
    st.append_events(scope, "shared-free", [NewEvent("e", {"w": wid, "i": i})])
    while True:
        seen = st.stream_version(scope, "shared-checked")
        try:
            st.append_events(scope, "shared-checked", [NewEvent("e", {"w": wid, "i": i})],
                             expected_version=seen)
            break
        except ConcurrencyError:
            conflicts += 1
    st.kv_put(scope, "progress", wid, i + 1)
st.close()
print(json.dumps({"conflicts": conflicts}), flush=True)
"""


class TestTwoWriters:
    def test_concurrent_appends_are_all_kept_with_contiguous_versions(self, tmp_path: Path) -> None:
        db = tmp_path / "ws" / "memory.db"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(db), wid, str(EVENTS_PER_WORKER)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for wid in ("A", "B")
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:  # release both together
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert "locked" not in err and "busy" not in err.lower(), err
            assert "conflicts" in json.loads(out.strip().splitlines()[-1])

        st = SQLiteStore(db)
        try:
            scope = Scope("t", "u", "a", "s")
            expected = {(w, i) for w in "AB" for i in range(EVENTS_PER_WORKER)}
            for wid in "AB":
                own = st.read_events(scope, f"own-{wid}")
                assert [e.version for e in own] == list(range(1, EVENTS_PER_WORKER + 1))
                assert [e.data["i"] for e in own] == list(range(EVENTS_PER_WORKER))
                assert st.kv_get(scope, "progress", wid) == EVENTS_PER_WORKER
            for stream in ("shared-free", "shared-checked"):
                events = st.read_events(scope, stream)
                assert [e.version for e in events] == list(range(1, 2 * EVENTS_PER_WORKER + 1))
                assert {(e.data["w"], e.data["i"]) for e in events} == expected
                for wid in "AB":  # each writer's own order is preserved inside the shared stream
                    mine = [e.data["i"] for e in events if e.data["w"] == wid]
                    assert mine == list(range(EVENTS_PER_WORKER))
            positions = [e.position for e in st.read_events(scope, "shared-checked")]
            assert positions == sorted(positions)
            assert st.stats().schema_version == SCHEMA_VERSION  # migrated once, not twice
        finally:
            st.close()
