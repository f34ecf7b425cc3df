"""History component: history.jsonl, the archive session consolidation writes (seed 002)."""

from mindpalace.history.log import HistoryEntry, HistoryLog, cap_text

__all__ = ["HistoryEntry", "HistoryLog", "cap_text"]
