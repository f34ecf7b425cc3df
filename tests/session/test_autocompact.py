"""AutoCompact: idle sessions archived to the recent window, leases respected, I5, and the
consolidator and idle compactor racing from two processes without losing or resurrecting messages."""

from __future__ import annotations

import multiprocessing
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.scope import ANY, Scope
from mindpalace.session.autocompact import recent_window_cut
from mindpalace.session.lease import LEASE_KEY, STATE_NAMESPACE, SessionBusyError, lease_active
from mindpalace.session.pairing import tool_groups
from mindpalace.timeutil import to_iso, utcnow

EVERYONE = Scope("default", ANY, ANY, ANY)
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=utcnow().tzinfo)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    m = Memory.open(tmp_path / "ws", embed={"provider": "none"})
    yield m
    m.close()


def chat(s: Any, n: int, at: datetime = T0) -> None:
    for i in range(n):
        s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                       "content": f"turn {i}: the user asked about flight UA{100 + i}"}, timestamp=at)


class TestIdle:
    def test_idle_session_is_compacted_to_the_recent_window(self, mem: Memory) -> None:
        s = mem.session("idle", user="u")
        chat(s, 20)
        clock = Clock(T0 + timedelta(minutes=16))
        out = mem.autocompact(clock=clock).compact(s.scope)
        assert out.status == "compacted" and out.archived_messages == 12
        assert s.consolidator.last_consolidated == 12
        assert [m.index for m in s.consolidator.live_messages()] == list(range(13, 21))
        entries = s.consolidator.history.read(session=s.scope)
        assert [e.messages for e in entries] == [(1, 12)]

    def test_a_naive_now_or_clock_is_refused_by_name(self, mem: Memory) -> None:
        s = mem.session("naive")
        chat(s, 4)
        with pytest.raises(ValidationError, match="now: naive"):
            mem.autocompact().is_idle(s.scope, now=datetime(2025, 1, 1))
        with pytest.raises(ValidationError, match="clock"):
            mem.autocompact(clock=lambda: datetime(2025, 1, 1)).compact(s.scope)
        assert s.consolidator.last_consolidated == 0

    def test_active_session_is_left_alone(self, mem: Memory) -> None:
        s = mem.session("busy-ish")
        chat(s, 20)
        out = mem.autocompact(clock=Clock(T0 + timedelta(minutes=14))).compact(s.scope)
        assert out.status == "active" and s.consolidator.last_consolidated == 0

    def test_zero_minutes_disables(self, tmp_path: Path) -> None:
        with Memory.open(tmp_path / "ws0", embed={"provider": "none"},
                         session={"idle_compact_after_minutes": 0}) as m:
            s = m.session("x")
            chat(s, 20)
            ac = m.autocompact(clock=Clock(T0 + timedelta(days=3)))
            assert ac.run_once(EVERYONE) == [] and ac.compact(s.scope).status == "disabled"

    def test_short_session_is_still_archived_for_the_dream_job(self, mem: Memory) -> None:
        s = mem.session("short")
        chat(s, 4)
        out = mem.autocompact(clock=Clock(T0 + timedelta(hours=1))).compact(s.scope)
        assert out.status == "compacted"
        assert s.consolidator.last_consolidated == 2  # all but the last turn
        assert s.consolidator.history.read(session=s.scope)[0].messages == (1, 2)

    def test_compacting_twice_changes_nothing(self, mem: Memory) -> None:
        s = mem.session("twice")
        chat(s, 20)
        ac = mem.autocompact(clock=Clock(T0 + timedelta(hours=1)))
        ac.compact(s.scope)
        state, cursor = s.consolidator.state(), s.consolidator.history.cursor()
        assert ac.compact(s.scope).status == "unchanged"
        assert (s.consolidator.state(), s.consolidator.history.cursor()) == (state, cursor)

    def test_run_once_visits_every_session_of_the_tenant(self, mem: Memory) -> None:
        for name in ("a", "b"):
            chat(mem.session(name, user=name), 12)
        outs = mem.autocompact(clock=Clock(T0 + timedelta(hours=1))).run_once(EVERYONE)
        assert sorted((o.session, o.status) for o in outs) == [("a", "compacted"), ("b", "compacted")]


class TestLease:
    def test_leased_session_is_never_touched_even_when_forced(self, mem: Memory) -> None:
        s = mem.session("leased")
        chat(s, 20)
        ac = mem.autocompact(clock=Clock(utcnow() + timedelta(minutes=1)))
        with s.lease(holder="agent-loop"):
            assert ac.compact(s.scope, force=True).status == "busy"
            assert s.consolidator.last_consolidated == 0
        assert ac.compact(s.scope, force=True).status == "compacted"

    def test_lease_is_visible_to_another_handle(self, mem: Memory) -> None:
        s = mem.session("shared")
        chat(s, 20)
        with Memory.open(mem.workspace.root) as other, s.lease(ttl_seconds=7200):
            out = other.autocompact(clock=Clock(utcnow() + timedelta(hours=1))).compact(
                other.session("shared").scope)
            assert out.status == "busy"

    def test_second_holder_is_refused(self, mem: Memory) -> None:
        s = mem.session("two")
        with s.lease(holder="a"), pytest.raises(SessionBusyError, match="turn in flight"), s.lease():
            pass
        with s.lease():  # released after the first block
            pass
        assert mem.store.kv_get(s.scope, STATE_NAMESPACE, LEASE_KEY) is None

    @pytest.mark.parametrize("ttl", [0, -1])
    def test_a_ttl_that_is_not_positive_is_refused(self, mem: Memory, ttl: float) -> None:
        s = mem.session("ttl")  # 0 used to fall back to the default silently; -1 was refused
        with pytest.raises(ValidationError, match="ttl_seconds"), s.lease(ttl_seconds=ttl):
            pass
        assert mem.store.kv_get(s.scope, STATE_NAMESPACE, LEASE_KEY) is None

    def test_expired_or_dead_holder_lease_does_not_count(self) -> None:
        now = utcnow()
        live = {"expires_at": to_iso(now + timedelta(minutes=5)), "pid": os.getpid(),
                "host": os.uname().nodename}
        import socket

        live["host"] = socket.gethostname()
        assert lease_active(live, now)
        assert not lease_active({**live, "expires_at": to_iso(now - timedelta(seconds=1))}, now)
        dead = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
        dead.start()
        dead.join()
        assert not lease_active({**live, "pid": dead.pid}, now)
        assert not lease_active("garbage", now)

    def test_renew_extends_the_expiry(self, mem: Memory) -> None:
        s = mem.session("renew")
        with s.lease(ttl_seconds=30) as lease:
            first = lease.expires_at
            lease.renew()
            assert lease.expires_at >= first


class TestRecentWindow:
    def roles(self, spec: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, r in enumerate(spec):
            if r == "u":
                out.append({"role": "user", "content": "x"})
            elif r == "a":
                out.append({"role": "assistant", "content": "x"})
            elif r == "c":
                out.append({"role": "assistant", "tool_calls": [
                    {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
            else:
                out.append({"role": "tool", "tool_call_id": f"c{i - 1}", "content": "r"})
        return out

    @pytest.mark.parametrize(
        ("spec", "keep", "cut"),
        [
            ("uauauaua", 4, 4),
            ("uctctcta", 3, 5),  # never between a call and its result
            ("ua", 8, 1),        # shorter than the window: all but the last group
            ("uaua", 8, 2),      # … or all but the last user turn
            ("ct", 8, None),     # one group: nothing can go
            ("uaua", 0, 4),      # keep nothing
        ],
    )
    def test_cut_positions(self, spec: str, keep: int, cut: int | None) -> None:
        msgs = self.roles(spec)
        got = recent_window_cut(msgs, keep)
        assert got == cut
        if got is not None and got < len(msgs):
            assert got in {a for a, _ in tool_groups(msgs)}


# -- two processes: the agent loop (consolidator) and the idle compactor -----------------------
# idle after 60 µs: the compactor finds the session idle whenever no turn lease is held
SMALL = {"context_window_tokens": 700, "max_completion_tokens": 100, "safety_buffer_tokens": 0,
         "idle_keep_recent_messages": 2, "idle_compact_after_minutes": 1e-6}


def _agent(ws: str, turns: int, out: Any, done: Any) -> None:
    with Memory.open(ws, embed={"provider": "none"}, session=SMALL) as m:
        s = m.session("race", user="u")
        seen = []
        for t in range(turns):
            with s.lease(holder="agent"):
                s.add_message({"role": "user", "content": f"turn {t}: book flight UA{t} " * 4})
                seen.append(s.consolidator.maybe_consolidate(system_tokens=50).last_consolidated)
                cid = f"call{t}"
                s.add_message({"role": "assistant", "content": None, "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "book", "arguments": "{}"}}]})
                s.add_message({"role": "tool", "tool_call_id": cid, "content": f"booked TK{t} " * 6})
                seen.append(s.consolidator.maybe_consolidate(system_tokens=50).last_consolidated)
                s.add_message({"role": "assistant", "content": f"done with turn {t}"})
            seen.append(s.consolidator.last_consolidated)
        done.set()
        out.put(("agent", seen))


def _compactor(ws: str, out: Any, done: Any) -> None:
    with Memory.open(ws, embed={"provider": "none"}, session=SMALL) as m:
        ac = m.autocompact()
        s = m.session("race", user="u")
        seen = []
        while True:
            finished = done.is_set()
            if s.messages.count():
                ac.compact(s.scope)
            seen.append(s.consolidator.last_consolidated)
            if finished:
                break
        out.put(("compactor", seen))


def test_consolidator_and_idle_compactor_race_from_two_processes(tmp_path: Path) -> None:
    ws = str(tmp_path / "ws")
    Memory.open(ws, embed={"provider": "none"}).close()
    ctx = multiprocessing.get_context("spawn")
    q, done = ctx.Queue(), ctx.Event()
    turns = 30
    procs = [ctx.Process(target=_agent, args=(ws, turns, q, done)),
             ctx.Process(target=_compactor, args=(ws, q, done))]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for seq in results.values():  # the cursor only moves forward, as each process saw it
        assert seq == sorted(seq)
    with Memory.open(ws, session=SMALL) as m:
        s = m.session("race", user="u")
        assert s.messages.count() == 4 * turns  # nothing lost from the log
        lc = s.consolidator.last_consolidated
        entries = s.consolidator.history.read(session=s.scope)
        covered = [i for e in entries for i in range(e.messages[0], e.messages[1] + 1)]
        assert covered == list(range(1, lc + 1))  # each archived once, in order: no resurrection
        full = [x.message for x in s.messages.list()]
        assert lc in {a for a, _ in tool_groups(full)} | {len(full)}
        assert lc > 0 and s.consolidator.state().entries == len(entries)


def test_compacting_a_session_with_no_messages_writes_nothing(mem: Memory) -> None:
    before = mem.store.stats()
    out = mem.session("ghost", user="u").compact()
    assert out.status == "unchanged" and out.result is None
    assert mem.store.stats() == before
    assert not (mem.workspace.root / ".locks").exists()
