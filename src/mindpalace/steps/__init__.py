"""Step memory (seeds 000 TuriX and 003 GenericAgent): tiers, records, index, recall, checkpoint."""

from mindpalace.steps.checkpoint import extract_summary
from mindpalace.steps.compaction import CompactionResult, Compactor
from mindpalace.steps.index import render_index
from mindpalace.steps.memory import StepMemory
from mindpalace.steps.readfiles import RecallOutcome, parse_read_files, run_with_recall
from mindpalace.steps.records import ReadResult, RecordBook, render_record
from mindpalace.steps.tiers import Checkpoint, TierState

__all__ = [
    "Checkpoint",
    "CompactionResult",
    "Compactor",
    "ReadResult",
    "RecallOutcome",
    "RecordBook",
    "StepMemory",
    "TierState",
    "extract_summary",
    "parse_read_files",
    "render_index",
    "render_record",
    "run_with_recall",
]
