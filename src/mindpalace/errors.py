"""The one exception tree of mindpalace: every error the library raises is a MindPalaceError.

    MindPalaceError
    ├── ConfigError (ValueError)            bad mindpalace.toml / environment value
    ├── WorkspaceError                      missing or unusable workspace folder
    │   └── SchemaVersionError              database newer than this code; nothing written
    ├── ValidationError (ValueError)        bad input: text, names, datetimes, dimensions
    │   ├── InvalidTextError                lone surrogates, NUL bytes, non-string text
    │   ├── InvalidNameError                record names with path tricks / too long
    │   ├── ContextBudgetError              prompt budget below the irreducible minimum
    │   ├── KnowledgeError                  bad knowledge patch, path, scope or revision
    │   │   └── AxiomViolation              a write breaks an L0–L3 axiom (seed 003)
    │   └── DimensionMismatchError          embedding of the wrong width for the index
    ├── NotFoundError (KeyError)            unknown record / session / task / fact key
    ├── StoreError                          persistence failure (sqlite3, psycopg …)
    │   ├── ConcurrencyError                optimistic append lost: expected version moved
    │   ├── StoreBusyError                  lock not acquired after bounded retries
    │   ├── DatabaseCorruptError            damaged, empty or truncated database file
    │   ├── ReadOnlyWorkspaceError          the database or its folder cannot be written
    │   └── DiskFullError                   no space left for the write
    ├── ProviderError                       LLM / embedding provider failure
    │   ├── ProviderTimeoutError
    │   ├── ProviderResponseError           HTML error page, empty / malformed reply
    │   ├── CircuitOpenError                breaker open: provider failing, not called
    │   └── TokenBudgetExceededError        the job's token budget is spent
    ├── AuthError                           unknown, revoked or malformed API key (HTTP 401)
    │   └── PermissionDeniedError           the key lacks the scope the call needs (HTTP 403)
    ├── RemoteError                         REST client: server unreachable or no problem reply
    ├── ConstraintError                     protected-constraint refusal or guard violation
    ├── OutcomeUnknownError                 a side effect started but its outcome is unknown
    ├── ToolCallInFlightError               the same keyed tool call is running now elsewhere
    └── EffectNotApplied                    raised BY a tool: its side effect did not happen

Constructors take structured arguments and build a message that says what to do next.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class MindPalaceError(Exception):
    """Base of every mindpalace error."""


class ConfigError(MindPalaceError, ValueError):
    """A setting is malformed.

    Args:
        file: the config file (or ``"environment"``) the value came from.
        key: dotted setting name, e.g. ``steps.budget_tokens``.
        problem: what was wrong, e.g. ``expected an integer, got 'abc'``.
    """

    def __init__(self, file: str, key: str, problem: str) -> None:
        self.file, self.key, self.problem = file, key, problem
        super().__init__(f"{file}: setting {key!r}: {problem}")


class WorkspaceError(MindPalaceError):
    """The workspace folder is missing or unusable."""


class SchemaVersionError(WorkspaceError):
    """The database schema is newer than this code understands; nothing was written."""

    def __init__(self, path: str, found: int, supported: int) -> None:
        self.path, self.found, self.supported = path, found, supported
        super().__init__(
            f"{path}: schema version {found} is newer than this mindpalace supports "
            f"({supported}); upgrade mindpalace to open it. Nothing was written."
        )


class ValidationError(MindPalaceError, ValueError):
    """Input was rejected before anything was stored."""


class InvalidTextError(ValidationError):
    """Text that cannot be stored safely (lone surrogate, NUL, not a string)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}")


class InvalidNameError(ValidationError):
    """A record or file name that is empty, too long or tries to escape its folder."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"invalid name {name!r}: {problem}")


class DimensionMismatchError(ValidationError):
    """An embedding's width does not match the index it is written to or searched in."""

    def __init__(self, expected: int, got: int, model: str) -> None:
        self.expected, self.got, self.model = expected, got, model
        super().__init__(
            f"embedding for model {model!r} has dimension {got}, expected {expected}"
        )


class ContextBudgetError(ValidationError):
    """The requested prompt budget is below the irreducible minimum: tool schemas, reply
    priming, the system prompt and the protected constraints / user corrections, which are
    never cut (I7) — and the conversation's newest user message at its least (whole, or head +
    tail + the note naming its reference): a prompt is never sent without the request it
    answers. The message names each part with its tokens; ``minimum`` is their sum."""

    def __init__(
        self, budget: int, minimum: int, parts: str = "tool schemas and reply priming"
    ) -> None:
        self.budget, self.minimum = budget, minimum
        super().__init__(
            f"a prompt budget of {budget} tokens is below the irreducible minimum of {minimum} "
            f"tokens ({parts}); raise budget_tokens or send fewer tools"
        )


class KnowledgeError(ValidationError):
    """A knowledge write or read was refused before anything changed: a path trick (absolute,
    ``..``, a symlink out), an anchor that does not match exactly once, an unknown revision,
    a file with a refused hand edit pending. The message says what to do next."""


class AxiomViolation(KnowledgeError):
    """A write breaks one of the knowledge axioms (seed 003 GenericAgent, enforced in code).

    Args:
        axiom: ``no-execution-no-memory`` (an L2/L3 write names no verified source),
            ``no-silent-deletion`` (a removal without a reason, a whole-file overwrite),
            ``no-volatile-state`` (timestamps, session ids, UUIDs, PIDs, temp paths in L1/L2),
            ``l1-limits`` (L1 over its line or token limit, or not a pointer index).
        file: the knowledge file the write targeted, e.g. ``L1_index.md``.
        problem: what was wrong, naming the offending text or the numbers.
    """

    def __init__(self, axiom: str, file: str, problem: str) -> None:
        self.axiom, self.file, self.problem = axiom, file, problem
        super().__init__(f"{file}: refused by axiom {axiom!r}: {problem}")


class NotFoundError(MindPalaceError, KeyError):
    """A named thing does not exist in the requested scope."""

    def __init__(self, kind: str, name: Any, scope: Any = None) -> None:
        self.kind, self.name, self.scope = kind, name, scope
        where = f" in scope {scope}" if scope is not None else ""
        super().__init__(f"unknown {kind} {name!r}{where}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class StoreError(MindPalaceError):
    """A persistence operation failed; the transaction was rolled back."""


class ConcurrencyError(StoreError):
    """Optimistic concurrency lost: another writer appended to the stream first.

    Re-read the stream (its version is now ``actual``) and retry the append.
    """

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        self.stream, self.expected, self.actual = stream, expected, actual
        super().__init__(
            f"stream {stream!r}: expected version {expected} but it is at {actual}; "
            "another writer appended first — re-read and retry"
        )


class StoreBusyError(StoreError):
    """The database stayed locked through every bounded retry."""


DOCTOR_HINT = "run `mindpalace doctor {root}` to check it and export what is readable"


class DatabaseCorruptError(StoreError):
    """The database file is damaged (a bad page, an empty or truncated file); nothing was written.

    Args:
        path: the database file.
        problem: what SQLite (or the open-time check) found, e.g. ``database disk image is
            malformed`` or ``the file is empty (0 bytes)``.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        hint = DOCTOR_HINT.format(root=Path(path).parent)
        super().__init__(
            f"{path}: the database is damaged ({problem}); it was not replaced or changed — "
            f"{hint}, then restore it from a backup"
        )


class ReadOnlyWorkspaceError(StoreError):
    """A write was refused because the database (or its folder) is read-only; nothing changed."""

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(
            f"{path}: cannot write ({problem}); the workspace is read-only — give this user "
            "write permission on the folder and its memory.db*, or open a writable copy"
        )


class DiskFullError(StoreError):
    """The disk (or quota) is full; the transaction was rolled back, nothing was written."""

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(
            f"{path}: the disk is full ({problem}); the write was rolled back — free some space "
            "and retry"
        )


class ProviderError(MindPalaceError):
    """An LLM or embedding provider failed.

    Args:
        message: what failed and what to do next.
        retryable: True for transient failures (timeouts, 429, 5xx, empty or malformed
            replies) that the provider's bounded retry loop may try again; False fails fast.
        status_code: the HTTP status of the reply, when there was one.
    """

    def __init__(self, message: str, *, retryable: bool = False, status_code: int | None = None) -> None:
        self.retryable, self.status_code = retryable, status_code
        super().__init__(message)


class ProviderTimeoutError(ProviderError):
    """The provider did not answer within the configured timeout (seconds)."""


class ProviderResponseError(ProviderError):
    """The provider answered with something unusable (HTML error page, empty reply, bad JSON)."""


class CircuitOpenError(ProviderError):
    """The circuit breaker is open after repeated failures; the provider was not called."""


class TokenBudgetExceededError(ProviderError):
    """The job's token budget is spent; the job must stop."""

    def __init__(self, job: str, budget: int, spent: int, needed: int = 0) -> None:
        self.job, self.budget, self.spent, self.needed = job, budget, spent, needed
        why = f"; the next call needs at least {needed}" if needed else ""
        super().__init__(f"job {job!r} spent {spent} of its {budget}-token budget{why}; stopping")


class AuthError(MindPalaceError):
    """An API key was missing, malformed, unknown or revoked; nothing was read or written.

    Args:
        problem: what was wrong with the key (never the secret itself).
    """

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"API key refused: {problem}")


class PermissionDeniedError(AuthError):
    """A valid API key lacks the scope (``read`` / ``write``) the call needs."""

    def __init__(self, key_id: str, needed: str, scopes: tuple[str, ...]) -> None:
        self.key_id, self.needed, self.scopes = key_id, needed, scopes
        MindPalaceError.__init__(
            self, f"API key {key_id!r} has scopes {list(scopes)} but this call needs {needed!r}; "
            "create a key with that scope (`mindpalace keys create --scope ...`)"
        )
        self.problem = f"missing scope {needed!r}"


class RemoteError(MindPalaceError):
    """The REST server could not be reached, timed out, or answered with something that is not
    a problem+json error (raised by :mod:`mindpalace.client` only).

    Args:
        message: what failed and what to do next.
        status_code: the HTTP status, when there was an answer.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class ConstraintError(MindPalaceError):
    """A protected constraint refused a change, or a guard blocked an action."""


class OutcomeUnknownError(MindPalaceError):
    """A non-idempotent tool call may or may not have happened: it was recorded as started and
    the process died mid-call, or the tool raised after it was dispatched (a reset connection
    does not prove the e-mail was not sent). It is never re-run automatically (I8).

    Resolve it with a reconcile hook (``Ledger.reconciler``) or by hand
    (``Task.resolve`` / ``mindpalace task resolve``), after checking the external system.
    """

    def __init__(self, task: str, key: str, tool: str, attempt: int, why: str = "") -> None:
        self.task, self.key, self.tool, self.attempt, self.why = task, key, tool, attempt, why
        what = f"raised after it was dispatched ({why})" if why else "started but its outcome was never recorded"
        super().__init__(
            f"task {task!r}: tool call {tool!r} (ledger key {key!r}, attempt {attempt}) {what}; "
            "it is not re-run automatically — check the external system, then resolve it with a "
            f"reconcile hook or `mindpalace task resolve {task} {key}`"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # picklable: a worker process raises it to its pool
        return type(self), (self.task, self.key, self.tool, self.attempt, self.why)


class ToolCallInFlightError(MindPalaceError):
    """A non-idempotent tool call with this ledger key is running right now — in another
    thread of this process, in another live process of this host, or in a process on another
    host whose liveness cannot be checked from here. Its outcome is not known *yet*: this is
    not an :class:`OutcomeUnknownError`, and settling it by hand now could run the side effect
    twice. Wait for the running call to finish and ask again (a repeat then returns its
    recorded result).

    Attributes:
        task, key, tool, attempt: the ledger row. owner: who runs it (``process 123 on host
            'h'``). checked: False when the owner is on another host (it may have died there;
            only a person can tell — then ``resolve(..., force=True)``).
    """

    def __init__(self, task: str, key: str, tool: str, attempt: int, owner: str, checked: bool = True) -> None:
        self.task, self.key, self.tool, self.attempt, self.owner = task, key, tool, attempt, owner
        self.checked = checked
        where = (f"is running now in {owner}" if checked else
                 f"was started by {owner}, which cannot be checked from this host")
        then = ("wait for it to finish and call again (a repeat returns its recorded result); "
                "do not resolve it while it runs — that could run the side effect twice")
        if not checked:
            then += ("; only if you know that process is gone, check the external system and "
                     f"settle it with `mindpalace task resolve {task} {key} --force`")
        super().__init__(f"task {task!r}: tool call {tool!r} (ledger key {key!r}, attempt {attempt}) {where}; {then}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable: a worker process raises it to its pool
        return type(self), (self.task, self.key, self.tool, self.attempt, self.owner, self.checked)


class EffectNotApplied(MindPalaceError):
    """Raised by a tool (not by mindpalace) to say its side effect did NOT happen — the API
    refused the request, the card was declined, validation failed before anything changed.

    The ledger then records the call ``failed`` and it may run again. Any other exception from
    a side-effecting tool is an unknown outcome (see :class:`OutcomeUnknownError`), because an
    error after dispatch does not prove the effect did not happen.

    Example:
        >>> def send_email(to: str, body: str) -> dict:            # doctest: +SKIP
        ...     if not valid(to):
        ...         raise EffectNotApplied(f"invalid recipient {to!r}")
        ...     return smtp.send(to, body)
    """
