"""Durable task state (seed 004): event sourcing, the idempotency ledger, protected constraints.

* :mod:`~mindpalace.tasks.events` — typed task events and the registry of user-defined types;
* :mod:`~mindpalace.tasks.state` — ``TaskState`` and the pure ``apply``;
* :mod:`~mindpalace.tasks.eventstore` — append with optimistic concurrency, snapshots, recovery;
* :mod:`~mindpalace.tasks.ledger` — exactly-once side effects;
* :mod:`~mindpalace.tasks.constraints` — protected constraints, guards, user corrections;
* :mod:`~mindpalace.tasks.task` — the per-task handle (checkpoint / resume / tool_call).
"""

from mindpalace.tasks.constraints import Constraints, GuardViolation, evaluate_guard
from mindpalace.tasks.events import DEFAULT_REGISTRY, EventRegistry, TaskEvent, UnregisteredEvent
from mindpalace.tasks.eventstore import TaskEventRecord, TaskEventStore
from mindpalace.tasks.ledger import NOT_RUN, Ledger, LedgerEntry, ToolCall, ledger_key
from mindpalace.tasks.state import TaskState, apply, initial_state, replay
from mindpalace.tasks.task import NextStep, Resumption, Task, Tasks, default_task_id, find_task

__all__ = [
    "DEFAULT_REGISTRY",
    "NOT_RUN",
    "Constraints",
    "EventRegistry",
    "GuardViolation",
    "Ledger",
    "LedgerEntry",
    "NextStep",
    "Resumption",
    "Task",
    "TaskEvent",
    "TaskEventRecord",
    "TaskEventStore",
    "TaskState",
    "Tasks",
    "ToolCall",
    "UnregisteredEvent",
    "apply",
    "default_task_id",
    "evaluate_guard",
    "find_task",
    "initial_state",
    "ledger_key",
    "replay",
]
