"""Long-term knowledge: L0–L3 files per scope in git, patch-only, axioms enforced in code.

Seeds 003 (GenericAgent L0–L3 and its axioms) and 002 (nanobot SOUL/USER/MEMORY, GitStore,
``.dream_cursor``). See :class:`KnowledgeBase` and :mod:`mindpalace.knowledge.layout`.
"""

from mindpalace.knowledge.axioms import (
    L1_LIMITS,
    NO_EXECUTION_NO_MEMORY,
    NO_SILENT_DELETION,
    NO_VOLATILE_STATE,
    SourceVerifier,
    volatile_spans,
)
from mindpalace.knowledge.base import HAND_EDIT_AUTHOR, HandEdit, KnowledgeBase, SyncReport
from mindpalace.knowledge.gitstore import Commit
from mindpalace.knowledge.index import KIND as KNOWLEDGE_KIND
from mindpalace.knowledge.layout import (
    CURSOR_FILE,
    INJECTED_FILES,
    L0,
    L1,
    L2,
    MEMORY,
    SOUL,
    USER,
    KnowledgeScope,
    Layer,
)
from mindpalace.knowledge.patches import Patch
from mindpalace.knowledge.view import SessionKnowledge

__all__ = [
    "CURSOR_FILE",
    "HAND_EDIT_AUTHOR",
    "INJECTED_FILES",
    "KNOWLEDGE_KIND",
    "L0",
    "L1",
    "L1_LIMITS",
    "L2",
    "MEMORY",
    "NO_EXECUTION_NO_MEMORY",
    "NO_SILENT_DELETION",
    "NO_VOLATILE_STATE",
    "SOUL",
    "USER",
    "Commit",
    "HandEdit",
    "KnowledgeBase",
    "KnowledgeScope",
    "Layer",
    "Patch",
    "SessionKnowledge",
    "SourceVerifier",
    "SyncReport",
    "volatile_spans",
]
