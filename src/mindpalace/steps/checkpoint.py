"""Seed 003 (GenericAgent): the working checkpoint and the per-reply ``<summary>`` line.

* The working checkpoint (``key_info``, ``related_sop``) is the agent's sticky note, kept in the
  tier state (:class:`~mindpalace.steps.tiers.Checkpoint`) and injected on every turn.
* Every assistant reply carries a one-line ``<summary>…</summary>`` (last result, new info,
  this turn's intent); the line is appended to the session's summary history (the event stream
  ``step_summaries``) and the last ``steps.summary_lines_injected`` (40) lines are injected.
  When the tag is missing, a fallback line is built from the tool name and compacted arguments.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from mindpalace.steps.tiers import Checkpoint, one_line

SUMMARY_STREAM: Final = "step_summaries"
_SUMMARY_TAG = re.compile(r"<summary>(.*?)</summary>", re.DOTALL | re.IGNORECASE)


def compact_args(arguments: Any, max_chars: int) -> str:
    """Tool arguments as compact one-line JSON (no spaces), cut to `max_chars` with "…"."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser: shown as text
            return one_line(arguments, max_chars)
    text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return one_line(text, max_chars)


def extract_summary(
    content: Any, tool_calls: list[dict[str, Any]] | None = None, *, args_max_chars: int = 120
) -> str:
    """The ``<summary>`` one-liner of an assistant reply, or the fallback line.

    Args:
        content: the reply text (a string, a list of text parts, or None).
        tool_calls: the reply's OpenAI-format tool calls, used for the fallback.
        args_max_chars: cap on the compacted arguments of the fallback (characters).

    Returns:
        The tag's text on one line; else ``called tool <name>, args: <json>`` per call (joined
        with ``; ``); else the reply's first line (cut to 200 characters); else ``(no reply)``.
    """
    text = _text(content)
    m = _SUMMARY_TAG.search(text)
    if m and m.group(1).strip():
        return one_line(m.group(1), 300)
    calls = [c for c in tool_calls or [] if isinstance(c, dict)]
    if calls:
        parts = []
        for call in calls:
            fn = call.get("function") or {}
            args = compact_args(fn.get("arguments", ""), args_max_chars)
            parts.append(f"called tool {fn.get('name', '?')}, args: {args}")
        return "; ".join(parts)
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    return one_line(first, 200) if first else "(no reply)"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def render_checkpoint(checkpoint: Checkpoint) -> str | None:
    """The checkpoint block (None when empty), e.g.::

        Working checkpoint (key facts to keep across turns):
        <key_info>booking ABC123 must keep seat 12A</key_info>
        <related_sop>rebooking_sop</related_sop>
    """
    if checkpoint.empty:
        return None
    lines = ["Working checkpoint (key facts to keep across turns):"]
    if checkpoint.key_info:
        lines.append(f"<key_info>{checkpoint.key_info}</key_info>")
    if checkpoint.related_sop:
        lines.append(f"<related_sop>{checkpoint.related_sop}</related_sop>")
    return "\n".join(lines)


def render_summary_lines(lines: list[str]) -> str | None:
    """The ``<history>`` block of the last summary lines (None when there are none)."""
    if not lines:
        return None
    body = "\n".join(f"[Agent] {ln}" for ln in lines)
    return f"History (one line per earlier reply, oldest first):\n<history>\n{body}\n</history>"
