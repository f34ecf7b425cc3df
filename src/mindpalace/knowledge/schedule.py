"""The dream schedule: run a job every ``dream_interval_hours`` or on a cron string, in the
foreground until SIGTERM / SIGINT (seed 002: Dream is a periodic cron job; APScheduler 3.x).

Runs never overlap (``max_instances=1``), missed runs collapse into one (``coalesce``), and a
signal lets a run in progress finish before the process exits — each run is one atomic commit
anyway, so even a kill leaves the knowledge files consistent.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import FrameType

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


def run_schedule(
    job: Callable[[], None],
    trigger: BaseTrigger,
    *,
    run_now: bool = True,
    signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
    on_start: Callable[[BlockingScheduler], None] | None = None,
) -> None:
    """Run `job` on `trigger` in the foreground until one of `signals` arrives.

    Args:
        job: one dream pass (its exceptions are logged by APScheduler and the schedule goes on).
        trigger: from :func:`dream_trigger`.
        run_now: also run once at start (then on the trigger).
        signals: the signals that stop the schedule (a run in progress finishes first).
        on_start: called with the scheduler before it blocks (tests, status lines).
    """
    scheduler = BlockingScheduler(timezone=UTC, job_defaults={"coalesce": True, "max_instances": 1})
    scheduler.add_job(job, trigger, id="dream", name="dream",
                      next_run_time=datetime.now(UTC) if run_now else None)
    if not run_now:  # add_job with next_run_time=None would pause it: let the trigger decide
        scheduler.get_job("dream").modify(next_run_time=trigger.get_next_fire_time(None, datetime.now(UTC)))

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
