"""mindpalace — a memory engine for long-horizon LLM agents.

Start with :class:`Memory` (one workspace) and :meth:`Memory.session` (one agent conversation);
every component below is reachable from a session and usable on its own.
"""

from mindpalace.context import BuiltContext, ContextBuilder, ContextReport
from mindpalace.errors import (
    CircuitOpenError,
    ConcurrencyError,
    ConfigError,
    ConstraintError,
    ContextBudgetError,
    DimensionMismatchError,
    InvalidNameError,
    InvalidTextError,
    MindPalaceError,
    NotFoundError,
    OutcomeUnknownError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    SchemaVersionError,
    StoreBusyError,
    StoreError,
    TokenBudgetExceededError,
    ValidationError,
    WorkspaceError,
)
from mindpalace.facts import Fact, FactMemory
from mindpalace.history import HistoryLog
from mindpalace.memory import Memory, Session
from mindpalace.retrieval.recall import RecallHit
from mindpalace.scope import ANY, Scope
from mindpalace.session import MessageLog
from mindpalace.session.autocompact import AutoCompact
from mindpalace.session.consolidator import Consolidator
from mindpalace.settings import Settings, load_settings
from mindpalace.steps import StepMemory
from mindpalace.tasks import Task, Tasks
from mindpalace.workspace import Workspace

__version__ = "0.1.0"

__all__ = [
    "ANY",
    "AutoCompact",
    "BuiltContext",
    "CircuitOpenError",
    "ConcurrencyError",
    "ConfigError",
    "Consolidator",
    "ConstraintError",
    "ContextBudgetError",
    "ContextBuilder",
    "ContextReport",
    "DimensionMismatchError",
    "Fact",
    "FactMemory",
    "HistoryLog",
    "InvalidNameError",
    "InvalidTextError",
    "Memory",
    "MessageLog",
    "MindPalaceError",
    "NotFoundError",
    "OutcomeUnknownError",
    "ProviderError",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "RecallHit",
    "SchemaVersionError",
    "Scope",
    "Session",
    "Settings",
    "StepMemory",
    "StoreBusyError",
    "StoreError",
    "Task",
    "Tasks",
    "TokenBudgetExceededError",
    "ValidationError",
    "Workspace",
    "WorkspaceError",
    "__version__",
    "load_settings",
]
