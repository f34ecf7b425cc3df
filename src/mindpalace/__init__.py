"""mindpalace — a memory engine for long-horizon LLM agents.

Start with :class:`Memory` (one workspace) and :meth:`Memory.session` (one agent conversation);
every component below is reachable from a session and usable on its own.

Names are loaded on first use (PEP 562), so ``import mindpalace`` costs next to nothing and a
CLI call or a hook that shells out pays only for what it touches.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mindpalace.agent import Agent, AgentTurn, Tool, tool
    from mindpalace.aio import AsyncMemory, AsyncSession
    from mindpalace.archive import ArchiveOutcome, SessionArchive
    from mindpalace.context import BuiltContext, ContextBuilder, ContextReport
    from mindpalace.errors import (
        AuthError,
        AxiomViolation,
        CircuitOpenError,
        ConcurrencyError,
        ConfigError,
        ConstraintError,
        ContextBudgetError,
        DatabaseCorruptError,
        DimensionMismatchError,
        DiskFullError,
        EffectNotApplied,
        InvalidNameError,
        InvalidTextError,
        KnowledgeError,
        MindPalaceError,
        NotFoundError,
        OutcomeUnknownError,
        PermissionDeniedError,
        ProviderError,
        ProviderResponseError,
        ProviderTimeoutError,
        ReadOnlyWorkspaceError,
        RemoteError,
        SchemaVersionError,
        StoreBusyError,
        StoreError,
        TokenBudgetExceededError,
        ToolCallInFlightError,
        ValidationError,
        WorkspaceError,
    )
    from mindpalace.facts import Fact, FactMemory, RecallHit, Remembered
    from mindpalace.history import HistoryLog
    from mindpalace.knowledge import KnowledgeBase, KnowledgeScope, Patch
    from mindpalace.knowledge.dream import Dream, DreamReport
    from mindpalace.lineage import Lineage, LineageEvent
    from mindpalace.memory import Memory, Session
    from mindpalace.metrics import MemoryMetrics
    from mindpalace.providers.embed import Embedder
    from mindpalace.providers.llm import LLMProvider
    from mindpalace.scope import ANY, Scope
    from mindpalace.session import MessageLog
    from mindpalace.session.autocompact import AutoCompact
    from mindpalace.session.consolidator import Consolidator
    from mindpalace.settings import Settings, load_settings
    from mindpalace.steps import StepMemory
    from mindpalace.summary import Summarizer
    from mindpalace.tasks import EventRegistry, Task, Tasks
    from mindpalace.workspace import Workspace

__version__ = "0.1.0"

_ERRORS = (
    "AuthError", "CircuitOpenError", "ConcurrencyError", "ConfigError", "ConstraintError", "ContextBudgetError",
    "DatabaseCorruptError", "DimensionMismatchError", "DiskFullError", "EffectNotApplied",
    "InvalidNameError", "InvalidTextError", "MindPalaceError", "NotFoundError",
    "OutcomeUnknownError", "PermissionDeniedError", "ProviderError", "ProviderResponseError", "ProviderTimeoutError",
    "ReadOnlyWorkspaceError", "RemoteError", "SchemaVersionError", "StoreBusyError", "StoreError",
    "AxiomViolation", "CircuitOpenError", "ConcurrencyError", "ConfigError", "ConstraintError", "ContextBudgetError",
    "InvalidNameError", "InvalidTextError", "KnowledgeError", "MindPalaceError", "NotFoundError",
    "OutcomeUnknownError", "ProviderError", "ProviderResponseError", "ProviderTimeoutError",
    "ReadOnlyWorkspaceError", "SchemaVersionError", "StoreBusyError", "StoreError",
    "AuthError", "AxiomViolation", "CircuitOpenError", "ConcurrencyError", "ConfigError",
    "ConstraintError", "ContextBudgetError", "DatabaseCorruptError", "DimensionMismatchError",
    "DiskFullError", "EffectNotApplied", "InvalidNameError", "InvalidTextError", "KnowledgeError",
    "MindPalaceError", "NotFoundError", "OutcomeUnknownError", "PermissionDeniedError",
    "ProviderError", "ProviderResponseError", "ProviderTimeoutError", "ReadOnlyWorkspaceError",
    "RemoteError", "SchemaVersionError", "StoreBusyError", "StoreError",
    "TokenBudgetExceededError", "ToolCallInFlightError", "ValidationError", "WorkspaceError",
)
_LOCATIONS: dict[str, str] = {
    **dict.fromkeys(_ERRORS, "mindpalace.errors"),
    **dict.fromkeys(("Agent", "AgentTurn", "Tool", "tool"), "mindpalace.agent"),
    **dict.fromkeys(("AsyncMemory", "AsyncSession"), "mindpalace.aio"),
    **dict.fromkeys(("BuiltContext", "ContextBuilder", "ContextReport"), "mindpalace.context"),
    **dict.fromkeys(("Fact", "FactMemory", "RecallHit", "Remembered"), "mindpalace.facts"),
    **dict.fromkeys(("Memory", "Session"), "mindpalace.memory"),
    **dict.fromkeys(("ANY", "Scope"), "mindpalace.scope"),
    **dict.fromkeys(("Settings", "load_settings"), "mindpalace.settings"),
    **dict.fromkeys(("EventRegistry", "Task", "Tasks"), "mindpalace.tasks"),
    **dict.fromkeys(("ArchiveOutcome", "SessionArchive"), "mindpalace.archive"),
    **dict.fromkeys(("Dream", "DreamReport"), "mindpalace.knowledge.dream"),
    **dict.fromkeys(("Lineage", "LineageEvent"), "mindpalace.lineage"),
    "MemoryMetrics": "mindpalace.metrics",
    "AutoCompact": "mindpalace.session.autocompact",
    "Consolidator": "mindpalace.session.consolidator",
    "Embedder": "mindpalace.providers.embed",
    "HistoryLog": "mindpalace.history",
    **dict.fromkeys(("KnowledgeBase", "KnowledgeScope", "Patch"), "mindpalace.knowledge"),
    "LLMProvider": "mindpalace.providers.llm",
    "MessageLog": "mindpalace.session",
    "StepMemory": "mindpalace.steps",
    "Summarizer": "mindpalace.summary",
    "Workspace": "mindpalace.workspace",
}

__all__ = [
    "ANY",
    "Agent",
    "AgentTurn",
    "ArchiveOutcome",
    "AsyncMemory",
    "AsyncSession",
    "AuthError",
    "AutoCompact",
    "AxiomViolation",
    "BuiltContext",
    "CircuitOpenError",
    "ConcurrencyError",
    "ConfigError",
    "Consolidator",
    "ConstraintError",
    "ContextBudgetError",
    "ContextBuilder",
    "ContextReport",
    "DatabaseCorruptError",
    "DimensionMismatchError",
    "DiskFullError",
    "Dream",
    "DreamReport",
    "EffectNotApplied",
    "Embedder",
    "EventRegistry",
    "Fact",
    "FactMemory",
    "HistoryLog",
    "InvalidNameError",
    "InvalidTextError",
    "KnowledgeBase",
    "KnowledgeError",
    "KnowledgeScope",
    "LLMProvider",
    "Lineage",
    "LineageEvent",
    "Memory",
    "MemoryMetrics",
    "MessageLog",
    "MindPalaceError",
    "NotFoundError",
    "OutcomeUnknownError",
    "Patch",
    "PermissionDeniedError",
    "ProviderError",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "ReadOnlyWorkspaceError",
    "RecallHit",
    "Remembered",
    "RemoteError",
    "SchemaVersionError",
    "Scope",
    "Session",
    "SessionArchive",
    "Settings",
    "StepMemory",
    "StoreBusyError",
    "StoreError",
    "Summarizer",
    "Task",
    "Tasks",
    "TokenBudgetExceededError",
    "Tool",
    "ToolCallInFlightError",
    "ValidationError",
    "Workspace",
    "WorkspaceError",
    "__version__",
    "load_settings",
    "tool",
]


def __getattr__(name: str) -> Any:
    """Import the module that holds `name` on first access (PEP 562)."""
    location = _LOCATIONS.get(name)
    if location is None:
        raise AttributeError(f"module 'mindpalace' has no attribute {name!r}")
    return getattr(import_module(location), name)


def __dir__() -> list[str]:
    """The public names (``__all__``) and the module's own dunders."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
