"""The maintenance schedule's triggers: interval by default, a crontab string when set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from mindpalace.errors import ConfigError
from mindpalace.knowledge.schedule import archive_trigger, dream_trigger
from mindpalace.settings import KnowledgeSettings

NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_dream_runs_every_interval_by_default_and_on_the_cron_string_when_set() -> None:
    every = dream_trigger(KnowledgeSettings(dream_interval_hours=2))
    assert isinstance(every, IntervalTrigger) and every.interval == timedelta(hours=2)
    cron = dream_trigger(KnowledgeSettings(dream_cron="30 */6 * * *"))
    assert isinstance(cron, CronTrigger)
    assert cron.get_next_fire_time(None, NOON) == datetime(2026, 12, 1, 12, 30, tzinfo=UTC)


def test_archiving_runs_every_archive_interval() -> None:
    assert archive_trigger(KnowledgeSettings(archive_interval_hours=12)).interval == timedelta(hours=12)


@pytest.mark.parametrize("bad", ["every two hours", "61 * * * *", "* * *"])
def test_a_bad_cron_string_is_a_config_error_naming_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"knowledge\.dream_cron.*crontab"):
        dream_trigger(KnowledgeSettings(dream_cron=bad))
