"""Idempotency keys for the MCP write tools, kept in the task ledger (seed 004, I8).

None of the popular memory MCP servers has one; an agent retrying a timed-out ``remember``
would store the fact twice. Here a write with an ``idempotency_key`` is one keyed call of the
tenant's ledger task (:data:`LEDGER_SESSION` / :data:`LEDGER_TASK`, a session with no user and
no agent in the caller's tenant): the ledger row is ``started`` before the write and
``completed`` with the tool's JSON result after it, in the store — so a repeated key returns
the first result and writes nothing, across server restarts, and keys of one tenant never
meet another's (the ledger is scoped like everything else, I10).

A write that refused its input (a ValidationError, NotFoundError or ConstraintError is raised
before anything is stored) is recorded ``failed``: the key may be used again. A write that
died mid-way leaves the row ``started`` (outcome unknown) and the key is refused until the row
is settled (``mindpalace task resolve``) — never run twice blindly. A key used again with other
arguments, or by another tool, is refused (the Stripe rule): it names a different call.

A key is one ledger row whatever the tool (:data:`LEDGER_TOOL`, the tool's name and arguments
as the row's arguments), so two tools racing one key meet on that row: the ledger lets one
start it, and the other is told the call is in flight or was made by the other tool. Rows of
earlier versions were keyed ``<tool>:<key>``; they are still honoured (replayed or refused).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from mindpalace.errors import (
    ConstraintError,
    EffectNotApplied,
    NotFoundError,
    ValidationError,
)
from mindpalace.memory import Session
from mindpalace.tasks.ledger import canonical_json

__all__ = ["LEDGER_SESSION", "LEDGER_TASK", "LEDGER_TOOL", "run_once"]

LEDGER_SESSION: Final = "mcp-idempotency"
LEDGER_TASK: Final = "mcp-writes"
LEDGER_TOOL: Final = "mcp"  # every keyed write's ledger row is "mcp:<key>", whatever the tool
_REFUSALS = (ValidationError, NotFoundError, ConstraintError)  # raised before anything is stored


def run_once(
    ledger: Session, tool: str, args: dict[str, Any], key: str, write: Callable[[], dict[str, Any]],
    *, write_tools: Iterable[str] = (),
) -> tuple[dict[str, Any], bool]:
    """Run `write` once per (tenant, `key`); returns (its JSON result, replayed).

    Runs in a worker thread (sync store calls). `args` are the tool's arguments without the
    key (compared on a repeat); `ledger` is the tenant's :data:`LEDGER_SESSION` session;
    `write_tools` names the write tools whose rows of earlier versions (``<tool>:<key>``) still
    hold their keys.

    Raises:
        ValidationError: the key was first used with other arguments or by another tool
            (a key names one call), or is not storable text.
        OutcomeUnknownError: an earlier call with this key started and never finished.
        ToolCallInFlightError: a call with this key (of any tool) is running now.
        whatever `write` raises (a refusal leaves the key usable again).
    """
    legacy = _legacy_holder(ledger, tool, key, write_tools)
    call = (ledger.tasks(LEDGER_TASK).tool_call(tool, args, key=key) if legacy == tool
            else ledger.tasks(LEDGER_TASK).tool_call(LEDGER_TOOL, {"tool": tool, "args": args}, key=key))
    with call:
        if call.done:
            _same_call(key, call.entry.args if call.entry is not None else {}, call.args)
            return call.result, True

        ran: list[bool] = []

        def attempt(**_: Any) -> dict[str, Any]:
            ran.append(True)
            try:
                return write()
            except _REFUSALS as exc:  # nothing was stored: the key stays usable
                raise EffectNotApplied(str(exc)) from exc

        try:
            result = call.run(attempt)
        except EffectNotApplied as exc:
            raise (exc.__cause__ or exc) from None
        if not ran:  # another request completed this key between our look and our start
            _same_call(key, call.entry.args if call.entry is not None else {}, call.args)
        if not isinstance(result, dict):
            raise ValidationError(f"idempotency_key {key!r}: the recorded result is not an object")
        return result, not ran


def _same_call(key: str, first: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse a repeat of `key` that is not the first call: another tool, other arguments."""
    if set(first) == set(now) == {"tool", "args"} and first["tool"] != now["tool"]:
        raise _other_tool(key, str(first["tool"]))
    # compared as canonical JSON text, not with ==: in Python true == 1 == 1.0, so another
    # value of another JSON type would have been answered as a replay of the first
    if canonical_json(first) != canonical_json(now):
        raise ValidationError(
            f"idempotency_key {key!r} was first used with other arguments: a key names one "
            "call; use a new key for a different write")


def _other_tool(key: str, tool: str) -> ValidationError:
    return ValidationError(
        f"idempotency_key {key!r} was first used by the tool {tool!r}: a key names one "
        "call; use a new key for a different write")


def _legacy_holder(ledger: Session, tool: str, key: str, write_tools: Iterable[str]) -> str | None:
    """The tool whose row of an earlier version (``<tool>:<key>``) holds `key`: `tool` itself
    (that row answers the call), None (no such row: the call uses ``mcp:<key>``); another
    tool's row refuses the call. A refused call (``failed``) holds nothing."""
    entries = ledger.tasks.ledger
    for other in write_tools:
        held = entries.get(LEDGER_TASK, f"{other}:{key}")
        if held is None or held.status == "failed":
            continue
        if other != tool:
            raise _other_tool(key, other)
        return tool
    return None
