"""The maintenance schedule: the dream every ``dream_interval_hours`` (or on a cron string) and
L4 archiving of idle sessions every ``archive_interval_hours``, in the foreground until SIGTERM
/ SIGINT (seed 002: Dream is a periodic cron job; seed 003: L4 archiving every 12 h;
APScheduler 3.x).

Jobs run one at a time (one worker thread), a job never overlaps itself (``max_instances=1``),
missed runs collapse into one (``coalesce``), and a signal lets a run in progress finish before
the process exits — each run is atomic anyway (one commit; one file rename and one store
transaction), so even a kill leaves files, cursors and git consistent.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from types import FrameType

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from mindpalace.errors import ConfigError
from mindpalace.settings import KnowledgeSettings


def dream_trigger(settings: KnowledgeSettings) -> BaseTrigger:
    """``dream_cron`` (five-field crontab, UTC) when set, else every ``dream_interval_hours``.

    Raises:
        ConfigError: the cron string is not a valid five-field crontab expression.
    """
    if settings.dream_cron:
        try:
            return CronTrigger.from_crontab(settings.dream_cron, timezone=UTC)
        except ValueError as exc:
            raise ConfigError("settings", "knowledge.dream_cron",
                              f"{settings.dream_cron!r} is not a crontab expression ({exc}); "
                              "e.g. '0 */2 * * *' = every two hours") from exc
    return IntervalTrigger(seconds=settings.dream_interval_hours * 3600, timezone=UTC)


def archive_trigger(settings: KnowledgeSettings) -> BaseTrigger:
    """Every ``archive_interval_hours`` (GenericAgent archives every 12 h)."""
    return IntervalTrigger(seconds=settings.archive_interval_hours * 3600, timezone=UTC)


Job = tuple[str, Callable[[], None], BaseTrigger]
"""(name, one run, its trigger)."""


def run_schedule(
    jobs: Sequence[Job],
    *,
    run_now: bool = True,
    signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
    on_start: Callable[[BlockingScheduler], None] | None = None,
) -> None:
    """Run each job on its trigger in the foreground until one of `signals` arrives.

    Args:
        jobs: (name, run, trigger); a run's exceptions are logged by APScheduler and the
            schedule goes on (the callers catch and report their own errors).
        run_now: also run every job once at start, in the given order (then on its trigger).
        signals: the signals that stop the schedule (a run in progress finishes first).
        on_start: called with the scheduler before it blocks (tests, status lines).
    """
    scheduler = BlockingScheduler(timezone=UTC, executors={"default": ThreadPoolExecutor(max_workers=1)},
                                  job_defaults={"coalesce": True, "max_instances": 1})
    now = datetime.now(UTC)
    for i, (name, job, trigger) in enumerate(jobs):
        first = now + timedelta(microseconds=i) if run_now else trigger.get_next_fire_time(None, now)
        scheduler.add_job(job, trigger, id=name, name=name, next_run_time=first)

    def stop(signum: int, frame: FrameType | None) -> None:
        scheduler.shutdown(wait=False)

    previous = {s: signal.signal(s, stop) for s in signals}
    try:
        if on_start is not None:
            on_start(scheduler)
        scheduler.start()  # blocks until stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
