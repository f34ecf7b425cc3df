"""The memory index (seed 000 ``_format_memory_index``): the records a model may load by name.

Rendered before every model call, newest first, at most ``steps.index_max_entries`` (50) lines::

    - step_12 (step, step 12): Step 12 (success): click Next
    - user_profile (info, step 3): user prefers window seats
    - memory_snapshot_recent_step_8 (snapshot, step 8): Pre-summarization snapshot of recent memory at step 8
"""

from __future__ import annotations

from collections.abc import Iterable

from mindpalace.store import Record

INDEX_HEADER = (
    "Memory index (newest first). To read a record in full, reply with "
    '{"read_files": {"files": ["<name>", ...]}} instead of acting.'
)


def index_line(record: Record) -> str:
    """``- name (type, step N): description`` (``(type)`` when the record has no step)."""
    where = f"{record.type}, step {record.step_id}" if record.step_id is not None else record.type
    description = " ".join(record.description.split())
    return f"- {record.name} ({where}): {description}"


def render_index(records: Iterable[Record], max_entries: int) -> list[str]:
    """Index lines for the first `max_entries` of `records` (which must be newest first)."""
    lines: list[str] = []
    for record in records:
        if len(lines) >= max_entries:
            break
        lines.append(index_line(record))
    return lines
