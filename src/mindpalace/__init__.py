"""mindpalace — a memory engine for long-horizon LLM agents."""

from mindpalace.errors import (
    ConcurrencyError,
    ConfigError,
    ConstraintError,
    MindPalaceError,
    NotFoundError,
    OutcomeUnknownError,
    SchemaVersionError,
    ValidationError,
)
from mindpalace.memory import Memory, Session
from mindpalace.scope import ANY, Scope
from mindpalace.settings import Settings, load_settings
from mindpalace.workspace import Workspace

__version__ = "0.1.0"

__all__ = [
    "ANY",
    "ConcurrencyError",
    "ConfigError",
    "ConstraintError",
    "Memory",
    "MindPalaceError",
    "NotFoundError",
    "OutcomeUnknownError",
    "SchemaVersionError",
    "Scope",
    "Session",
    "Settings",
    "ValidationError",
    "Workspace",
    "__version__",
    "load_settings",
]
