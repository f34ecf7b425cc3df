"""Scope: concrete writes, widened reads, validation."""

from __future__ import annotations

import pytest

from mindpalace import ANY, Scope, ValidationError


class TestScope:
    def test_default_scope_is_concrete(self) -> None:
        assert Scope().concrete

    def test_any_field_makes_scope_unwritable(self) -> None:
        with pytest.raises(ValidationError, match="concrete scope"):
            Scope("t", ANY).require_concrete()

    def test_tenant_can_never_be_any(self) -> None:
        with pytest.raises(ValidationError, match="tenant"):
            Scope(ANY)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", ["a\x00b", "x" * 201, 7, "s\udcff"])
    def test_bad_field_values_are_refused(self, bad: object) -> None:
        with pytest.raises(ValidationError):
            Scope("t", bad)  # type: ignore[arg-type]

    def test_with_replaces_fields(self) -> None:
        s = Scope("t", "u", "a", "s").with_(session=ANY)
        assert s.values() == ("t", "u", "a", ANY)
        assert str(s) == "t/u/a/ANY"
