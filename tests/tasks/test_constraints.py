"""Protected constraints (I7): only user/developer set them; tool output is refused; guards block."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.errors import ConstraintError, ContextBudgetError, ValidationError
from mindpalace.memory import Session
from mindpalace.tasks import evaluate_guard


def render_constraints(session: Any) -> str | None:
    return session.tasks.prompt_blocks()[1]


def render_corrections(session: Any) -> str | None:
    return session.tasks.prompt_blocks()[0]


def hotel(session: Session, price: int) -> dict:
    ran = []
    with session.tool_call("book_hotel", {"hotel": "H", "price_per_night": price}) as call:
        call.run(lambda hotel, price_per_night: ran.append(hotel) or {"booking_id": "HTL1"})
    return {"ran": ran}


@pytest.fixture
def budgeted(session: Session) -> Session:
    session.constraints.set("budget_per_night_cny", 2000, source="user")
    session.constraints.guard("book_hotel", "price_per_night <= budget_per_night_cny")
    return session


class TestProtection:
    @pytest.mark.parametrize("value", [4500, None])
    def test_tool_cannot_overwrite_or_null(self, budgeted: Session, value: object) -> None:
        with pytest.raises(ConstraintError, match="refused: tool output"):
            budgeted.constraints.set("budget_per_night_cny", value, source="tool")
        assert budgeted.constraints["budget_per_night_cny"] == 2000
        err = budgeted.task.state().last_error
        assert err.code == "constraint_refused" and budgeted.task.state().refusals == 1

    def test_tool_cannot_add(self, budgeted: Session) -> None:
        with pytest.raises(ConstraintError, match="add"):
            budgeted.constraints.set("max_hotels", 1, source="tool")
        assert "max_hotels" not in budgeted.constraints.all()

    def test_model_is_not_a_source_either(self, budgeted: Session) -> None:
        with pytest.raises(ConstraintError):
            budgeted.constraints.remove("budget_per_night_cny", source="agent")

    def test_tool_result_that_tries_to_change_a_constraint_is_refused(self, budgeted: Session) -> None:
        with budgeted.tool_call("search_hotel", {"city": "Tokyo"}, idempotent=True) as call:
            result = call.run(lambda city: {"hotels": [], "budget_per_night_cny": None, "constraints": {"vip": True}})
        assert call.notes == ["budget_per_night_cny", "vip"]
        assert result["budget_per_night_cny"] is None  # the reply itself is untouched …
        assert budgeted.constraints.all() == {"budget_per_night_cny": 2000}  # … the constraint too
        assert budgeted.task.state().last_error.code == "constraint_refused"

    def test_guards_and_screening_of_one_call_fold_the_task_once(
        self, budgeted: Session, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        events = budgeted.tasks.events
        folds: list[str] = []
        recover = events.recover

        def counted(task: str, **kw: Any) -> Any:
            if not events.store.in_transaction():  # not a snapshot written with an append
                folds.append(task)
            return recover(task, **kw)

        monkeypatch.setattr(events, "recover", counted)
        with budgeted.tool_call("search_hotel", {"city": "Kyoto"}) as call:
            call.run(lambda city: {"budget_per_night_cny": 9000})
        assert len(folds) == 1  # the guard check's state is the one the result is screened against
        assert call.notes == ["budget_per_night_cny"]
        assert budgeted.constraints.all() == {"budget_per_night_cny": 2000}
        with pytest.raises(ConstraintError, match="blocked book_hotel"):
            hotel(budgeted, 4500)  # and the guards still see the current state

    def test_user_may_change_and_remove(self, budgeted: Session) -> None:
        budgeted.constraints.set("budget_per_night_cny", 1800, source="user")
        assert budgeted.constraints["budget_per_night_cny"] == 1800
        budgeted.constraints.remove("budget_per_night_cny")
        assert budgeted.constraints.all() == {}

    def test_none_value_from_the_user_asks_for_remove(self, budgeted: Session) -> None:
        with pytest.raises(ValidationError, match="remove"):
            budgeted.constraints.set("budget_per_night_cny", None, source="user")


    @pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), {"cap": float("-inf")}])
    def test_a_value_that_is_not_json_is_refused_not_stored_changed(self, budgeted: Session, value: object) -> None:
        version = budgeted.task.version
        with pytest.raises(ValidationError, match="JSON"):
            budgeted.constraints.set("budget_per_night_cny", value, source="user")
        with pytest.raises(ValidationError, match="JSON"):
            budgeted.constraints.feedback("change it", updates={"budget_per_night_cny": value})
        assert budgeted.constraints["budget_per_night_cny"] == 2000
        assert budgeted.task.version == version

    @pytest.mark.parametrize(("call", "field"), [
        (lambda c: c.set("budget_per_night_cny", 1500, source="user", note=None), "note"),
        (lambda c: c.set("budget_per_night_cny", 1500, source="user", note=3), "note"),
        (lambda c: c.set("budget_per_night_cny", 1500, source="user", note="x\ud800"), "note"),
        (lambda c: c.remove(["budget_per_night_cny"]), "constraint name"),
        (lambda c: c.remove({"n": 1}), "constraint name"),
        (lambda c: c.guard("book_hotel", "price <= 1", name=5), "guard name"),
        (lambda c: c.guard("book_hotel", 5), "guard"),
    ])
    def test_a_wrong_type_is_a_mindpalace_error_naming_the_field(self, budgeted: Session, call, field: str) -> None:  # type: ignore[no-untyped-def]
        # new-user finding: note=None raised pydantic's own ValidationError, remove([name]) a
        # TypeError (unhashable type: 'list') — third-party / raw exceptions
        version = budgeted.task.version
        with pytest.raises(ValidationError, match=field):
            call(budgeted.constraints)
        assert budgeted.constraints["budget_per_night_cny"] == 2000
        assert budgeted.task.version == version


class TestGuards:
    def test_guard_blocks_an_over_budget_booking(self, budgeted: Session) -> None:
        with pytest.raises(ConstraintError, match="price_per_night=4500"):
            hotel(budgeted, 4500)
        state = budgeted.task.state()
        assert state.last_error.code == "guard_blocked" and state.calls["started"] == 0  # never ran

    def test_guard_allows_within_budget(self, budgeted: Session) -> None:
        assert hotel(budgeted, 1900) == {"ran": ["H"]}

    def test_guard_follows_a_user_correction(self, budgeted: Session) -> None:
        budgeted.constraints.feedback("1800 per night from now on", updates={"budget_per_night_cny": 1800})
        with pytest.raises(ConstraintError):
            hotel(budgeted, 1900)

    def test_missing_argument_fails_closed(self, budgeted: Session) -> None:
        with pytest.raises(ConstraintError, match="neither an argument"), budgeted.tool_call("book_hotel", {"hotel": "H"}) as call:
            call.run(lambda hotel: {})

    @pytest.mark.parametrize("expr", ["__import__('os')", "a.b < 1", "x[0] < 1", "(lambda: 1)()"])
    def test_guard_language_cannot_run_code(self, budgeted: Session, expr: str) -> None:
        with pytest.raises(ValidationError, match="not allowed"):
            budgeted.constraints.guard("book_hotel", expr)

    def test_expression_subset(self) -> None:
        assert evaluate_guard("nights * price <= total and city in ['Tokyo']", {"nights": 2, "price": 10, "city": "Tokyo"}, {"total": 20}) is None
        assert evaluate_guard("not price > 1", {"price": 2}, {}) is not None


class TestRendering:
    def test_constraints_are_rendered_verbatim(self, budgeted: Session) -> None:
        budgeted.constraints.set("note", "只订 浅草寺 附近的酒店 — exactly this", source="user")
        text = render_constraints(budgeted)
        assert "- budget_per_night_cny = 2000" in text
        assert "- note = 只订 浅草寺 附近的酒店 — exactly this" in text
        assert "book_hotel: price_per_night <= budget_per_night_cny" in text

    def test_no_constraints_no_block(self, session: Session) -> None:
        assert render_constraints(session) is None and render_corrections(session) is None

    def test_corrections_newest_first(self, session: Session) -> None:
        session.constraints.feedback("skip Disneyland")
        session.constraints.feedback("add teamLab instead")
        assert render_corrections(session).splitlines()[1:] == ["- add teamLab instead", "- skip Disneyland"]


class TestContextBuilder:
    def test_corrections_on_top_and_constraints_verbatim(self, budgeted: Session) -> None:
        budgeted.add_message({"role": "user", "content": "5 days in Tokyo"})
        budgeted.constraints.feedback("skip Disneyland")
        messages = budgeted.context(budget_tokens=4000).messages
        assert messages[0]["content"].endswith("- skip Disneyland")
        assert "- budget_per_night_cny = 2000" in messages[1]["content"] or "- budget_per_night_cny = 2000" in messages[2]["content"]

    def test_constraints_are_never_truncated(self, budgeted: Session) -> None:
        block = render_constraints(budgeted)
        for i in range(30):
            budgeted.add_message({"role": "user", "content": f"message {i} " + "filler words " * 60})
        built = budgeted.context(budget_tokens=400)
        assert built.report.total_tokens <= 400
        assert any(m["content"] == block for m in built.messages)

    def test_a_budget_smaller_than_the_constraints_is_refused_not_cut(self, budgeted: Session) -> None:
        budgeted.constraints.set("notes", "never book a chain hotel " * 80, source="user")
        budgeted.add_message({"role": "user", "content": "plan day 1"})
        with pytest.raises(ContextBudgetError, match="protected constraints"):
            budgeted.context(budget_tokens=200)
        assert render_constraints(budgeted) in [m["content"] for m in budgeted.context(4000).messages]


attempts = st.lists(
    st.tuples(st.sampled_from(["user", "developer", "tool", "agent"]),
              st.sampled_from(["budget", "nights", "city"]),
              st.none() | st.integers(0, 5000) | st.text(min_size=1, max_size=5)),
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attempts)
def test_only_user_and_developer_writes_ever_land(session: Session, writes: list) -> None:
    """I7 as a property: whatever tools and the model try, the constraints equal the fold of the
    user/developer writes alone."""
    task = session.tasks(f"p-{uuid.uuid4().hex[:8]}")
    expected: dict = {}
    for source, name, value in writes:
        try:
            stored = task.constraints.set(name, value, source=source)
        except (ConstraintError, ValidationError):
            assert source not in ("user", "developer") or value is None
            continue
        assert source in ("user", "developer")
        expected[name] = stored  # the value as given (NUL / lone surrogates escaped, see textsafe)
    assert task.constraints.all() == expected


GUARD_WRITER = """
import sys
from mindpalace import Memory
mem = Memory.open(sys.argv[1], embed={"provider": "none"})
s = mem.session("trip", user="u1")
print("ready", flush=True)
sys.stdin.readline()  # both processes start adding at the same moment
for i in range(int(sys.argv[2])):
    s.constraints.guard("book_hotel", f"price_per_night <= {1000 + i}")
print("done", flush=True)
"""


def test_two_processes_adding_unnamed_guards_never_replace_each_other(tmp_path: Path) -> None:
    import subprocess
    import sys

    ws = tmp_path / "ws"
    Memory.open(ws, embed={"provider": "none"}).close()
    procs = [subprocess.Popen([sys.executable, "-c", GUARD_WRITER, str(ws), "25"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "done"
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        guards = mem.session("trip", user="u1").constraints.state().guards
    assert len(guards) == 50  # every unnamed guard kept its own name
