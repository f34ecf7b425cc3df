"""Facts: working memory + long-term store, the dual memory of seed 001 (Recuris)."""

from mindpalace.facts.dual import FactMemory
from mindpalace.facts.longterm import LongTermStore
from mindpalace.facts.model import Fact, normalize_key
from mindpalace.facts.recall import Recall, RecallHit
from mindpalace.facts.working import Remembered, WorkingMemory

__all__ = [
    "Fact", "FactMemory", "LongTermStore", "Recall", "RecallHit", "Remembered", "WorkingMemory",
    "normalize_key",
]
