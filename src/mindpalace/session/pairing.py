"""Pairing validator (I1): no prompt holds a tool call without its result or a result without its call.

OpenAI chat format: an assistant message with ``tool_calls`` must be followed, before any other
non-tool message, by exactly one ``tool`` message per call id (parallel batches in any order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UNKNOWN_OUTCOME = (
    "[not executed / outcome unknown: no result was recorded for this tool call "
    "(the process may have stopped mid-call); check before repeating it]"
)


@dataclass
class PairingReport:
    """What :func:`repair_pairing` changed. Empty lists mean the prompt was already valid."""

    closed_calls: list[str] = field(default_factory=list)  # dangling call ids given a result
    dropped_results: list[str] = field(default_factory=list)  # orphan / duplicate result ids

    @property
    def ok(self) -> bool:
        return not (self.closed_calls or self.dropped_results)


def call_ids(message: dict[str, Any]) -> list[str]:
    """Tool-call ids of an assistant message (empty for any other message)."""
    if message.get("role") != "assistant":
        return []
    return [str(c.get("id", "")) for c in message.get("tool_calls") or [] if isinstance(c, dict)]


def check_pairing(messages: list[dict[str, Any]]) -> list[str]:
    """Human-readable pairing violations of `messages` ([] when valid)."""
    _, report = repair_pairing(messages)
    return [f"tool call {i} has no result" for i in report.closed_calls] + [
        f"tool result {i} has no matching call" for i in report.dropped_results
    ]


def repair_pairing(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], PairingReport]:
    """Return a valid copy of `messages` and what was repaired.

    A dangling call (no result, e.g. the process died mid-call) is closed with an explicit
    :data:`UNKNOWN_OUTCOME` result and flagged, never silently dropped; a result whose call is
    not in the batch right before it (or a second result for one id) is dropped and flagged.
    The input list and its dicts are not mutated.
    """
    out: list[dict[str, Any]] = []
    report = PairingReport()
    open_ids: list[str] = []  # calls of the current batch still waiting for a result
    batch_ids: set[str] = set()

    def close_batch() -> None:
        for cid in open_ids:
            out.append({"role": "tool", "tool_call_id": cid, "content": UNKNOWN_OUTCOME})
            report.closed_calls.append(cid)
        open_ids.clear()
        batch_ids.clear()

    for msg in messages:
        if msg.get("role") == "tool":
            cid = str(msg.get("tool_call_id", ""))
            if cid in open_ids:
                open_ids.remove(cid)
                out.append(msg)
            else:
                report.dropped_results.append(cid)
            continue
        close_batch()
        out.append(msg)
        ids = call_ids(msg)
        open_ids.extend(ids)
        batch_ids.update(ids)
    close_batch()
    return out, report


def tool_groups(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Split `messages` into atomic groups [start, end): an assistant message with tool calls
    together with the tool results after it forms one group; every other message is its own.

    A cut between two groups never separates a call from its results (the safe boundaries
    of seed 002's consolidator)."""
    groups: list[tuple[int, int]] = []
    i, n = 0, len(messages)
    while i < n:
        j = i + 1
        if call_ids(messages[i]):
            while j < n and messages[j].get("role") == "tool":
                j += 1
        groups.append((i, j))
        i = j
    return groups
