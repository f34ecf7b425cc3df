"""Tools from plain callables: the JSON schema from type hints, argument validation."""

from __future__ import annotations

import json
from datetime import date
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from mindpalace.agent import Tool, as_tool, render_result, tool
from mindpalace.errors import ValidationError


class Seat(BaseModel):
    row: int
    letter: Literal["A", "B", "C"]


def reserve(flight: str, when: date, seat: Seat | None = None,
            bags: Annotated[int, Field(ge=0, le=3, description="checked bags")] = 0) -> dict[str, Any]:
    """Reserve a seat on a flight.

    Longer notes stay out of the description's first paragraph? No: everything before the
    first section is the description.

    Args:
        flight: the flight number, e.g. UA100.
        when: the departure date.
    """
    return {"flight": flight, "when": when.isoformat(), "seat": seat.model_dump() if seat else None,
            "bags": bags}


class TestSchema:
    def test_the_schema_comes_from_the_type_hints_and_the_docstring(self):
        fn = Tool.from_function(reserve).schema["function"]
        assert fn["name"] == "reserve"
        assert fn["description"].startswith("Reserve a seat on a flight.")
        assert "Args:" not in fn["description"]
        params = fn["parameters"]
        assert params["required"] == ["flight", "when"] and params["additionalProperties"] is False
        props = params["properties"]
        assert props["flight"]["description"] == "the flight number, e.g. UA100."
        assert props["when"]["format"] == "date"
        assert props["bags"]["maximum"] == 3 and props["bags"]["description"] == "checked bags"
        assert "Seat" in params["$defs"]

    def test_the_decorator_keeps_the_function_callable_and_marks_side_effects(self):
        @tool(side_effect=True, idempotent=True, name="send-mail")
        def send(to: str) -> str:
            return f"sent to {to}"

        assert isinstance(send, Tool) and send.side_effect and send.idempotent
        assert send("a@b.c") == "sent to a@b.c" and send.name == "send-mail"
        assert as_tool(send) is send
        plain = as_tool(reserve)
        assert plain.name == "reserve" and not plain.side_effect

    @pytest.mark.parametrize(("fn", "problem"), [
        (lambda *names: None, "passable by keyword"),
        (lambda **kw: None, "passable by keyword"),
        (lambda x: None, "no type annotation"),
    ])
    def test_functions_that_cannot_be_tools_are_refused(self, fn, problem):
        with pytest.raises(ValidationError, match=problem):
            Tool.from_function(fn, name="f")

    @pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dots.are.not.allowed", "<lambda>"])
    def test_names_the_model_api_refuses_are_refused(self, name):
        def f(x: int) -> int:
            return x
        with pytest.raises(ValidationError, match="tool name"):
            Tool.from_function(f, name=name)

    def test_a_parameter_shadowing_the_model_base_is_refused(self):
        def f(schema: str) -> str:
            return schema
        with pytest.raises(ValidationError, match="reserved"):
            Tool.from_function(f)


class TestParse:
    t = Tool.from_function(reserve)

    def test_valid_arguments_give_python_values_and_their_json(self):
        kwargs, args = self.t.parse('{"flight": "UA100", "when": "2025-05-20", "seat": {"row": 12, "letter": "A"}}')
        assert kwargs["when"] == date(2025, 5, 20) and kwargs["seat"] == Seat(row=12, letter="A")
        assert args == {"flight": "UA100", "when": "2025-05-20", "seat": {"row": 12, "letter": "A"}, "bags": 0}
        assert reserve(**kwargs)["seat"] == {"row": 12, "letter": "A"}

    def test_no_arguments_is_an_empty_object(self):
        def ping() -> str:
            return "pong"
        assert Tool.from_function(ping).parse("") == ({}, {})

    @pytest.mark.parametrize(("raw", "problem"), [
        ('{"flight": "UA100"', "Invalid JSON"),
        ("[1, 2]", "Input should be an object"),
        ('{"flight": "UA100", "when": "someday"}', "when: Input should be a valid date"),
        ('{"flight": "UA100", "when": "2025-05-20", "bags": 7}', "bags: Input should be less than or equal to 3"),
        ('{"flight": "UA100", "when": "2025-05-20", "seat": {"row": 1, "letter": "Z"}}', "seat.letter"),
        ('{"flight": "UA100", "when": "2025-05-20", "bags": NaN}', "bags"),
        ('{"flight": "\\ud800", "when": "2025-05-20"}', "Invalid JSON"),
        ('{"flight": "UA100", "when": "2025-05-20", "meal": "veg"}', "meal: Extra inputs are not permitted"),
        ("[" * 10_000, "Invalid JSON"),
        # new-user findings: true booked one bag, "2" two, and a repeated key took its last value
        ('{"flight": "UA100", "when": "2025-05-20", "bags": true}', "bags: Input should be a valid integer"),
        ('{"flight": "UA100", "when": "2025-05-20", "bags": "2"}', "bags: Input should be a valid integer"),
        ('{"flight": "UA100", "when": "2025-05-20", "bags": 1.0}', "bags: Input should be a valid integer"),
        ('{"flight": "UA100", "flight": "UA200", "when": "2025-05-20"}', "duplicate key 'flight'"),
        ('{"flight": "UA100", "when": "2025-05-20", "seat": {"row": 1, "row": 2, "letter": "A"}}', "duplicate key 'row'"),
    ])
    def test_bad_arguments_are_refused_naming_what_was_wrong(self, raw, problem):
        with pytest.raises(ValidationError, match="invalid arguments for reserve") as err:
            self.t.parse(raw)
        assert problem in str(err.value)

    def test_oversized_arguments_are_refused_before_parsing(self):
        with pytest.raises(ValidationError, match="over the limit of 10"):
            self.t.parse('{"flight": "UA100000000"}', max_chars=10)

    def test_arguments_must_be_text(self):
        with pytest.raises(ValidationError, match="JSON text"):
            self.t.parse({"flight": "UA100"})  # type: ignore[arg-type]


def test_results_are_rendered_as_text_or_json():
    assert render_result("plain") == "plain"
    assert render_result({"b": 1, "a": date(2025, 5, 20)}) == '{"a": "2025-05-20", "b": 1}'


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=200), JSON.map(json.dumps)))
def test_any_text_from_the_model_is_either_valid_arguments_or_a_validation_error(raw: str) -> None:
    t = Tool.from_function(reserve)
    try:
        kwargs, args = t.parse(raw)
    except ValidationError as exc:
        assert str(exc).startswith("invalid arguments for reserve")
    else:
        assert set(kwargs) == set(args) == {"flight", "when", "seat", "bags"}
        json.dumps(args, allow_nan=False)  # what the ledger keeps is JSON
