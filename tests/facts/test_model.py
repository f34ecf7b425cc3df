"""Fact model: key normalization, validation, JSON round trip, decay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mindpalace.errors import ValidationError
from mindpalace.facts.model import Fact, normalize_content, normalize_key

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class TestNormalizeKey:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("user:uid", "user:uid"),
            (" User : Home City ", "user:home_city"),
            ("ＵＳＥＲ:uid", "user:uid"),  # NFKC folds full-width letters
            ("用户:预算", "用户:预算"),
            ("trip:budget:per_night", "trip:budget:per_night"),
        ],
    )
    def test_normalizes_to_entity_attribute(self, raw: str, expected: str) -> None:
        assert normalize_key(raw) == expected

    @pytest.mark.parametrize("bad", ["uid", ":uid", "user:", "  :  ", "user:a#1", "", "x" * 300 + ":y"])
    def test_refuses_malformed_keys(self, bad: str) -> None:
        with pytest.raises(ValidationError):
            normalize_key(bad)


class TestFact:
    def test_round_trips_through_json(self) -> None:
        fact = Fact("user:uid", "u_10086", importance=0.9, source="call_7", created_at=T0)
        assert Fact.from_json(fact.to_json()) == fact

    def test_refuses_naive_datetimes(self) -> None:
        with pytest.raises(ValidationError, match="naive"):
            Fact("user:uid", "x", created_at=datetime(2026, 1, 1))

    @pytest.mark.parametrize("importance", [-0.1, 1.5, float("nan"), True, "high"])
    def test_refuses_importance_outside_unit_interval(self, importance: object) -> None:
        with pytest.raises(ValidationError, match="importance"):
            Fact("user:uid", "x", importance=importance)  # type: ignore[arg-type]

    def test_refuses_empty_content(self) -> None:
        with pytest.raises(ValidationError):
            Fact("user:uid", "")

    def test_same_value_ignores_whitespace_and_key_spelling(self) -> None:
        fact = Fact("user:city", "New  York")
        assert fact.same_value(" User : City ", "New York ")
        assert not fact.same_value("user:city", "Boston")
        assert normalize_content(" a \n b ") == "a b"

    def test_importance_halves_every_half_life(self) -> None:
        fact = Fact("user:uid", "x", importance=0.8, created_at=T0)
        assert fact.effective_importance(T0 + timedelta(days=10), 10) == pytest.approx(0.4)
        assert fact.effective_importance(T0 + timedelta(days=10), 0) == 0.8  # 0 = no decay


def test_an_overlong_key_error_quotes_a_bounded_prefix() -> None:
    import pytest

    from mindpalace.errors import ValidationError
    from mindpalace.facts.model import normalize_key

    with pytest.raises(ValidationError, match="over 200 characters") as info:
        normalize_key("user:" + "x" * 10_000)
    assert len(str(info.value)) < 200
