"""The owner check of a ledger call: alive only while it provably runs (this process's registry,
another live process of this node), gone when provably not, unchecked on another node."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mindpalace.tasks.owner import CallOwner, claim, owner_liveness

linux = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")


def current() -> CallOwner:
    """An owner record naming this process (the claim is released: only its identity is used)."""
    with claim() as owner:
        return owner


def start_time(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat (read after the command name's last parenthesis)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


class TestThisProcess:
    def test_a_claimed_call_is_alive_until_the_claim_ends(self) -> None:
        with claim() as owner:
            assert owner.pid == os.getpid() and owner_liveness(owner) == "alive"
        assert owner_liveness(owner) == "gone"

    def test_each_claim_is_its_own_call(self) -> None:
        with claim() as first, claim() as second:
            assert first.call != second.call
        with claim() as third:
            assert owner_liveness(first) == "gone" and owner_liveness(third) == "alive"

    def test_no_owner_recorded_is_gone(self) -> None:
        assert owner_liveness(None) == "gone"

    def test_the_record_round_trips_and_a_broken_one_reads_as_none(self) -> None:
        owner = current()
        assert CallOwner.from_json(owner.to_json()) == owner
        assert CallOwner.from_json({"host": "h"}) is None and CallOwner.from_json("x") is None


@linux
class TestOtherProcesses:
    def test_a_live_process_of_this_node_is_alive(self) -> None:
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
        try:
            start = start_time(child.pid)
            owner = replace(current(), pid=child.pid, start=start)
            assert owner_liveness(owner) == "alive"
            assert owner_liveness(replace(owner, start=start + 1)) == "gone"  # a recycled pid
        finally:
            child.communicate(b"")
        assert owner_liveness(owner) == "gone"  # exited and reaped

    def test_an_exited_process_not_yet_reaped_is_gone(self) -> None:
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        try:
            start = start_time(child.pid)
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, still a zombie
            assert owner_liveness(replace(current(), pid=child.pid, start=start)) == "gone"
        finally:
            child.wait()

    def test_this_process_under_another_start_time_is_a_recycled_pid(self) -> None:
        owner = current()
        with claim() as live:
            assert owner_liveness(replace(live, start=(owner.start or 0) + 1)) == "gone"


class TestOtherNodes:
    @pytest.mark.parametrize("field", ["host", "node"])
    def test_an_owner_on_another_host_or_boot_cannot_be_checked(self, field: str) -> None:
        with claim() as owner:
            assert owner_liveness(replace(owner, **{field: "elsewhere"})) == "unchecked"

    @linux
    def test_an_owner_of_an_earlier_boot_of_this_machine_is_gone(self) -> None:
        # a power cut mid-call: after the reboot the call is unknown, not in flight forever
        with claim() as owner:
            machine, boot, pidns = owner.node.split("/")
            if not machine:
                pytest.skip("no machine id on this system")
            assert owner_liveness(replace(owner, node=f"{machine}/{boot}x/{pidns}")) == "gone"
            assert owner_liveness(replace(owner, node=f"other{machine}/{boot}x/{pidns}")) == "unchecked"
            assert owner_liveness(replace(owner, node=f"{machine}/{boot}/{pidns}1")) == "unchecked"
            assert owner_liveness(replace(owner, host="elsewhere", node=f"{machine}/{boot}x/{pidns}")) == "unchecked"
