"""The background worker: idle compaction, the dream, L4 archiving and task snapshots, each on
its interval, in one process (``mindpalace worker``; seed 002: AutoCompact and Dream are
periodic jobs; seed 003: L4 archiving; seed 004: snapshots bound recovery time).

Safe to run one per machine against the same workspace:

* **Due times are shared.** A job's due time is the last fire time of its trigger, and interval
  triggers are aligned to the epoch, so every worker computes the same due time.
* **A job never runs twice at once, nor twice per due time.** A run takes the job's file lock
  (``worker/<job>.lock``, non-blocking: a worker that finds it taken skips the run) and, under
  it, compares the due time with ``worker/<job>.json``; the due time is recorded only after the
  run finished, so a failed or abandoned run is retried at the next firing.
* **Each job is capped and guarded.** Compaction stops before the next session once
  ``worker.compact_token_budget`` summary tokens are spent; the dream is capped by
  ``knowledge.dream_token_budget`` (the dream enforces it); a pybreaker circuit breaker per job
  skips a job after ``worker.breaker_fail_max`` failed runs in a row.
* **SIGTERM stops cleanly.** The current unit of work (one session's compaction, one scope's
  dream commit, one session's archive, one task's snapshot — each atomic on its own) finishes,
  the rest of the run is abandoned (its due time is not recorded) and the process exits 0.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pybreaker
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from filelock import FileLock, Timeout

from mindpalace.errors import MindPalaceError, ValidationError
from mindpalace.knowledge.schedule import dream_trigger
from mindpalace.scope import ANY, Scope
from mindpalace.tasks.eventstore import STREAM_PREFIX
from mindpalace.timeutil import utcnow

if TYPE_CHECKING:
    from mindpalace.memory import Memory

log = logging.getLogger("mindpalace.worker")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PAUSE_ENV = "MINDPALACE_WORKER_PAUSE_DIR"
"""Test hook: a folder with FIFOs ``out`` and ``in``; before each unit of work the worker writes
``"<job> <unit>\\n"`` to ``out`` and waits for a line on ``in`` (orders a test without sleeps)."""


class Stopped(Exception):
    """Raised between units of work when a stop was requested; the run is abandoned."""


@dataclass
class RunReport:
    """One run of one job: ``status`` is ``done``, ``skipped`` (reason in `detail`),
    ``abandoned`` (stopped between units) or ``failed``; `units` done; `tokens` spent."""

    job: str
    due: str
    status: str
    units: int = 0
    tokens: int = 0
    detail: str = ""
    pid: int = field(default_factory=os.getpid)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Unit:
    """What a job calls before each unit of work: raises :class:`Stopped` once a stop was
    requested, and honours the test hook (:data:`PAUSE_ENV`)."""

    def __init__(self, job: str, stop: threading.Event) -> None:
        self.job = job
        self.stop = stop
        self.done = 0
        self.tokens = 0

    def __call__(self, name: str) -> None:
        pause = os.environ.get(PAUSE_ENV)
        if pause:
            with open(Path(pause) / "out", "w", encoding="utf-8") as out:
                out.write(f"{self.job} {name}\n")
            with open(Path(pause) / "in", encoding="utf-8") as inp:
                inp.readline()
        if self.stop.is_set():
            raise Stopped(name)


JobRun = Callable[[Unit], None]


@dataclass(frozen=True)
class Job:
    """A named job: one run (`run`, calling its :class:`Unit` before each unit of work) on a
    trigger (APScheduler 3.x)."""

    name: str
    trigger: BaseTrigger
    run: JobRun


def interval_trigger(seconds: float) -> IntervalTrigger:
    """Every `seconds`, aligned to the epoch so every process agrees on the due times."""
    return IntervalTrigger(seconds=seconds, start_date=EPOCH, timezone=UTC)


def due_time(trigger: BaseTrigger, now: datetime) -> datetime:
    """The last fire time of `trigger` at or before `now` (the due time of a run at `now`)."""
    if isinstance(trigger, IntervalTrigger):
        step = trigger.interval.total_seconds()
        start = trigger.start_date
        n = int((now - start).total_seconds() // step)
        return start + timedelta(seconds=n * step)
    if isinstance(trigger, CronTrigger):
        fire = trigger.get_next_fire_time(None, now - timedelta(days=8))
        last = fire
        while fire is not None and fire <= now:
            last = fire
            fire = trigger.get_next_fire_time(fire, fire + timedelta(seconds=1))
        return last or now
    return now


class Worker:
    """Runs `jobs` with file locks and due-time bookkeeping under `state_dir`.

    Args:
        jobs: the jobs (see :func:`maintenance_jobs`).
        state_dir: ``<workspace>/worker``: one ``.lock`` and one ``.json`` per job, and
            ``runs.jsonl`` (one line per run that did work or failed).
        breaker_fail_max / breaker_reset_seconds: each job's circuit breaker.
        clock: the current time (UTC, aware).
    """

    def __init__(
        self, jobs: Sequence[Job], state_dir: Path, *, breaker_fail_max: int = 3,
        breaker_reset_seconds: float = 1800.0, clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.jobs = list(jobs)
        self.state_dir = state_dir
        self.clock = clock
        self.stop = threading.Event()
        self.breakers = {j.name: pybreaker.CircuitBreaker(
            fail_max=breaker_fail_max, reset_timeout=breaker_reset_seconds,
            exclude=[Stopped], name=j.name) for j in self.jobs}

    # -- one run ---------------------------------------------------------------------------
    def run_job(self, job: Job) -> RunReport:
        """Run `job` for its current due time unless another process runs it now or already
        ran it for that due time. Never raises for a failed run (it is reported)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        due = due_time(job.trigger, self.clock()).isoformat()
        lock = FileLock(str(self.state_dir / f"{job.name}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return RunReport(job.name, due, "skipped", detail="running in another worker")
        try:
            if self._last_due(job.name) >= due:
                return RunReport(job.name, due, "skipped", detail="already ran for this due time")
            report = self._guarded(job, due)
            if report.status == "done":
                self._record_due(job.name, due)
            self._log(report)
            return report
        finally:
            lock.release()

    def _guarded(self, job: Job, due: str) -> RunReport:
        unit = Unit(job.name, self.stop)
        try:
            self.breakers[job.name].call(job.run, unit)
        except Stopped as exc:
            return RunReport(job.name, due, "abandoned", unit.done, unit.tokens, f"stopped before {exc}")
        except pybreaker.CircuitBreakerError as exc:
            return RunReport(job.name, due, "skipped", unit.done, unit.tokens, f"circuit open: {exc}")
        except MindPalaceError as exc:
            return RunReport(job.name, due, "failed", unit.done, unit.tokens, str(exc))
        except Exception as exc:  # a bug in one job must not stop the others; it is logged
            log.exception("job %s failed", job.name)
            return RunReport(job.name, due, "failed", unit.done, unit.tokens, f"{type(exc).__name__}: {exc}")
        return RunReport(job.name, due, "done", unit.done, unit.tokens)

    def _state_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.json"

    def _last_due(self, name: str) -> str:
        try:
            return str(json.loads(self._state_path(name).read_text("utf-8"))["last_due"])
        except (OSError, ValueError, KeyError, TypeError):
            return ""  # never ran (or an unreadable file: running again is the safe side)

    def _record_due(self, name: str, due: str) -> None:
        path = self._state_path(name)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"last_due": due, "pid": os.getpid()}), "utf-8")
        os.replace(tmp, path)  # atomic: a kill leaves the old or the new due time

    def _log(self, report: RunReport) -> None:
        with open(self.state_dir / "runs.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(report.to_json()) + "\n")
        log.info("%s %s: %s units, %s tokens %s", report.job, report.status, report.units,
                 report.tokens, report.detail)

    # -- the schedule ----------------------------------------------------------------------
    def run_once(self) -> list[RunReport]:
        """Run every job once for its current due time, in order (``--once``)."""
        reports = []
        for job in self.jobs:
            if self.stop.is_set():
                break
            reports.append(self.run_job(job))
        return reports

    def run_forever(
        self, *, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
        on_report: Callable[[RunReport], None] | None = None,
        on_stop: Callable[[int], None] | None = None,
    ) -> None:
        """Run every job now and then on its trigger until one of `signals` arrives (blocks;
        call from the main thread). One job runs at a time; on a signal the current unit of
        work finishes, the rest of the run is abandoned, and this returns.

        The signals are blocked in every thread and taken with ``sigwait`` by this one, so
        no handler runs in the middle of a job; `on_stop` is called with the signal before
        the scheduler is shut down.
        """
        scheduler = BackgroundScheduler(
            timezone=UTC, executors={"default": ThreadPoolExecutor(max_workers=1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        now = datetime.now(UTC)

        def runner(job: Job) -> Callable[[], None]:
            def run() -> None:
                if self.stop.is_set():
                    return
                report = self.run_job(job)
                if on_report is not None:
                    on_report(report)
            return run

        for i, job in enumerate(self.jobs):
            scheduler.add_job(runner(job), job.trigger, id=job.name, name=job.name,
                              next_run_time=now + timedelta(microseconds=i))
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # before any thread starts
        try:
            scheduler.start()
            signum = signal.sigwait(signals)
            self.stop.set()
            if on_stop is not None:
                on_stop(signum)
        finally:
            self.stop.set()
            scheduler.shutdown(wait=True)  # the running job stops at its next unit
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# -- the maintenance jobs ----------------------------------------------------------------------
def compact_job(memory: Memory, token_budget: int) -> JobRun:
    """Idle compaction of every session of the tenant, one session per unit, stopping before
    the next session once `token_budget` summary tokens (prompt + reply) are spent."""
    def run(unit: Unit) -> None:
        auto = memory.autocompact()
        if not auto.enabled:
            return
        for scope in auto.sessions(Scope(memory.tenant, ANY, ANY, ANY)):
            if unit.tokens >= token_budget:
                log.info("compact: token budget %s spent; the rest waits for the next run", token_budget)
                return
            unit(f"session:{scope.session}")
            out = auto.compact(scope)
            unit.done += 1
            unit.tokens += out.result.summary_tokens_spent if out.result else 0
    return run


def dream_job(memory: Memory) -> JobRun:
    """The dream over every knowledge scope with history: one unit per scope (one commit)."""
    def run(unit: Unit) -> None:
        dreamer = memory.dreamer
        for scope in dreamer.scopes(memory.tenant):
            unit(f"knowledge:{scope}")
            report = dreamer.run(scope, wait_seconds=0)
            unit.done += 1
            unit.tokens += report.tokens_spent
    return run


def archive_job(memory: Memory) -> JobRun:
    """L4 archiving of idle sessions: one unit per session (one file append + one transaction)."""
    def run(unit: Unit) -> None:
        archive = memory.archive
        for scope in archive.sessions(Scope(memory.tenant, ANY, ANY, ANY)):
            unit(f"session:{scope.session}")
            archive.archive_if_idle(scope)
            unit.done += 1
    return run


def snapshot_job(memory: Memory) -> JobRun:
    """A fresh snapshot of every task whose snapshot is behind its event log (one per unit);
    tasks are reached through the facade's sessions (the facade wires the event stores)."""
    from mindpalace.memory import Session  # the facade's module: imported when the job is made

    def run(unit: Unit) -> None:
        for scope, stream, version in memory.store.list_streams(
                Scope(memory.tenant, ANY, ANY, ANY), prefix=STREAM_PREFIX):
            # a stored scope, opened as stored: an id written before a facade rule refused it
            # ("trip/42") must not end the job for every session after it
            session = Session(memory, scope)
            task = session.tasks(stream[len(STREAM_PREFIX):])
            snap = task.events.latest_snapshot(task.id)
            if snap is not None and snap.version >= version:
                continue
            unit(f"task:{scope.session}/{task.id}")
            task.events.snapshot(task.id)
            unit.done += 1
    return run


def maintenance_jobs(memory: Memory, only: Iterable[str] | None = None) -> list[Job]:
    """The four jobs on their settings' intervals: ``compact`` (worker.compact_interval_minutes),
    ``dream`` (knowledge.dream_interval_hours or dream_cron), ``archive``
    (knowledge.archive_interval_hours), ``snapshot`` (worker.snapshot_interval_minutes).

    Raises:
        ConfigError: a bad dream_cron. ValidationError: an unknown job name in `only`.
    """
    s = memory.settings
    dream = dream_trigger(s.knowledge)
    if isinstance(dream, IntervalTrigger):
        dream = interval_trigger(dream.interval.total_seconds())
    jobs = [
        Job("compact", interval_trigger(s.worker.compact_interval_minutes * 60),
            compact_job(memory, s.worker.compact_token_budget)),
        Job("dream", dream, dream_job(memory)),
        Job("archive", interval_trigger(s.knowledge.archive_interval_hours * 3600), archive_job(memory)),
        Job("snapshot", interval_trigger(s.worker.snapshot_interval_minutes * 60), snapshot_job(memory)),
    ]
    if only is None:
        return jobs
    wanted = list(only)
    unknown = sorted(set(wanted) - {j.name for j in jobs})
    if unknown:
        raise ValidationError(f"unknown worker job(s) {unknown}; known: compact, dream, archive, snapshot")
    return [j for j in jobs if j.name in wanted]


def worker_for(memory: Memory, only: Iterable[str] | None = None) -> Worker:
    """The worker of `memory`'s workspace and tenant (state under ``<workspace>/worker``)."""
    s = memory.settings.worker
    return Worker(maintenance_jobs(memory, only), memory.workspace.root / "worker",
                  breaker_fail_max=s.breaker_fail_max, breaker_reset_seconds=s.breaker_reset_seconds)


def iter_runs(state_dir: Path) -> Iterator[dict[str, Any]]:
    """The lines of ``runs.jsonl`` (oldest first); none when the worker never ran."""
    try:
        text = (state_dir / "runs.jsonl").read_text("utf-8")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)
