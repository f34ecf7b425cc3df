"""Typed task events: validation and the registry of user-defined types."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.tasks.events import (
    DEFAULT_REGISTRY,
    EventRegistry,
    StepStarted,
    TaskEvent,
    UnregisteredEvent,
    payload_of,
)


class HotelSelected(TaskEvent):
    type: Literal["hotel_selected"] = "hotel_selected"
    hotel_id: str


class TestValidation:
    def test_builtin_payload_is_validated(self) -> None:
        with pytest.raises(ValidationError, match=r"step_started.*index"):
            EventRegistry().parse("step_started", {"index": -1})

    def test_unknown_fields_are_refused(self) -> None:
        with pytest.raises(ValidationError, match="typo"):
            EventRegistry().parse("task_completed", {"typo": 1})

    def test_unknown_type_names_the_fix(self) -> None:
        with pytest.raises(ValidationError, match="register"):
            EventRegistry().parse("hotel_selected", {"hotel_id": "h1"})

    def test_payload_round_trips(self) -> None:
        event = StepStarted(index=3, name="book Senso-ji")
        assert EventRegistry().parse("step_started", payload_of(event)) == event


class TestRegistry:
    def test_registered_type_parses(self) -> None:
        reg = EventRegistry()
        reg.register(HotelSelected)
        assert reg.parse("hotel_selected", {"hotel_id": "h1"}) == HotelSelected(hotel_id="h1")

    def test_builtin_name_cannot_be_taken(self) -> None:
        class Fake(TaskEvent):
            type: Literal["plan_created"] = "plan_created"

        with pytest.raises(ValidationError, match="already registered"):
            EventRegistry().register(Fake)

    def test_model_without_type_default_is_refused(self) -> None:
        class NoType(TaskEvent):
            x: int = 0

        with pytest.raises(ValidationError, match="type"):
            EventRegistry().register(NoType)

    def test_the_default_registry_is_frozen_for_good(self) -> None:
        with pytest.raises(ValidationError, match="frozen"):
            DEFAULT_REGISTRY.register(HotelSelected)
        with pytest.raises(AttributeError):
            DEFAULT_REGISTRY.frozen = False  # type: ignore[misc]
        assert DEFAULT_REGISTRY.model_for("hotel_selected") is None


class TestReadingWithoutTheRegistry:
    def test_a_stored_event_of_an_unknown_type_is_read_back_raw(self, tmp_path: Path) -> None:
        reg = EventRegistry()
        reg.register(HotelSelected)
        with Memory.open(tmp_path / "ws", embed={"provider": "none"}, event_registry=reg) as m:
            s = m.session("trip", user="u")
            s.task.record(HotelSelected(hotel_id="h1"), ("step_started", {"index": 0, "name": "a"}))
        with Memory.open(tmp_path / "ws") as m:  # another process, the built-in registry only
            s = m.session("trip", user="u")
            first, _ = s.task.read()
            assert isinstance(first.event, UnregisteredEvent)
            assert (first.event.type, first.event.payload) == ("hotel_selected", {"hotel_id": "h1"})
            assert s.task.state().version == 2 and s.task.state().current is not None
            assert s.context(2_000).report.total_tokens <= 2_000
            with pytest.raises(ValidationError, match="register"):
                s.task.record(first.event)  # never appended by a process that cannot validate it
