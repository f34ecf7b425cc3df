"""Typed task events: validation and the registry of user-defined types."""

from __future__ import annotations

from typing import Literal

import pytest

from mindpalace.errors import ValidationError
from mindpalace.tasks.events import EventRegistry, StepStarted, TaskEvent, payload_of


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
