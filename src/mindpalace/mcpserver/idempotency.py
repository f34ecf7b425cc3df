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
arguments is refused (the Stripe rule): it names a different call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from mindpalace.errors import (
    ConstraintError,
    EffectNotApplied,
    NotFoundError,
    ValidationError,
)
from mindpalace.memory import Session
from mindpalace.tasks.ledger import canonical_json

__all__ = ["LEDGER_SESSION", "LEDGER_TASK", "run_once"]

LEDGER_SESSION: Final = "mcp-idempotency"
LEDGER_TASK: Final = "mcp-writes"
WRITE_TOOLS: Final = ("remember", "forget", "set_constraint", "record_step", "checkpoint")
_REFUSALS = (ValidationError, NotFoundError, ConstraintError)  # raised before anything is stored


def run_once(
    ledger: Session, tool: str, args: dict[str, Any], key: str, write: Callable[[], dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """Run `write` once per (tenant, `key`); returns (its JSON result, replayed).

    Runs in a worker thread (sync store calls). `args` are the tool's arguments without the
    key (compared on a repeat); `ledger` is the tenant's :data:`LEDGER_SESSION` session.

    Raises:
        ValidationError: the key was first used with other arguments or by another tool
            (a key names one call), or is not storable text.
        OutcomeUnknownError: an earlier call with this key started and never finished.
        whatever `write` raises (a refusal leaves the key usable again).
    """
    _unused_by_other_tools(ledger, tool, key)
    call = ledger.tasks(LEDGER_TASK).tool_call(tool, args, key=key)
    with call:
        if call.done:
            _same_call(key, call.entry.args if call.entry is not None else {}, args)
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
            _same_call(key, call.entry.args if call.entry is not None else {}, args)
        if not isinstance(result, dict):
            raise ValidationError(f"idempotency_key {key!r}: the recorded result is not an object")
        return result, not ran


def _same_call(key: str, first: dict[str, Any], now: dict[str, Any]) -> None:
    # compared as canonical JSON text, not with ==: in Python true == 1 == 1.0, so another
    # value of another JSON type would have been answered as a replay of the first
    if canonical_json(first) != canonical_json(now):
        raise ValidationError(
            f"idempotency_key {key!r} was first used with other arguments: a key names one "
            "call; use a new key for a different write")


def _unused_by_other_tools(ledger: Session, tool: str, key: str) -> None:
    """Refuse `key` when another write tool's call holds it (the ledger keys a call by tool and
    key; a key names one call whatever the tool). A refused call (``failed``) holds nothing."""
    entries = ledger.tasks.ledger
    for other in WRITE_TOOLS:
        held = None if other == tool else entries.get(LEDGER_TASK, f"{other}:{key}")
        if held is not None and held.status != "failed":
            raise ValidationError(
                f"idempotency_key {key!r} was first used by the tool {other!r}: a key names one "
                "call; use a new key for a different write")
