"""Replay a recorded agent transcript through a session: messages, steps, <summary> lines.

Accepted inputs (:func:`load_transcripts`):

* OpenAI-format message lists: a JSON list of messages, a JSON object with ``messages``, or
  JSONL with one message per line (``tool_calls`` on assistant messages, ``tool`` results);
* τ-bench result files: a JSON list of runs ``{task_id, trial, reward, info, traj}``, each run
  one transcript;
* SWE-agent ``.traj`` files: the ``history`` messages (thought / action / observation).

Step mapping: an assistant message with tool calls is one step (goal = its text, else the
calls); its tool results are the evaluation (``failed`` when a result reads as an error). In
SWE-agent transcripts without tool calls, an assistant message with an ``action`` is the step
and the next user message (the observation) its evaluation. Every assistant message also adds
its ``<summary>`` line (or the tool-call fallback). A step whose result never arrives is swept
as an orphan (``Eval: unknown``).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mindpalace.checks import require_int
from mindpalace.errors import ValidationError
from mindpalace.session.messages import validate_message
from mindpalace.steps.checkpoint import compact_args
from mindpalace.steps.tiers import one_line
from mindpalace.textsafe import MAX_JSON_DEPTH, clean_json

if TYPE_CHECKING:
    from mindpalace.memory import Session

Message = dict[str, Any]
_ERROR = re.compile(r"^\s*(error\b|traceback|exception\b)|command not found|no such file", re.I)
_SUMMARY_TAG = re.compile(r"<summary>.*?</summary>", re.DOTALL | re.I)
_KEEP = ("role", "content", "name", "tool_calls", "tool_call_id")
MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024  # the whole τ-bench result file is 4 MB
MAX_DEPTH = MAX_JSON_DEPTH  # an OpenAI message nests < 10 deep (tool-call arguments included)


class _NonFinite:
    """What ``NaN`` / ``Infinity`` / an overflowing number parse to: refused by validation with
    the file and message named, instead of reaching the store halfway through a replay."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _parse_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_NonFinite, parse_float=_parse_float)


def _problem(value: Any, where: str = "", depth: int = 0) -> str | None:
    """The first non-finite number or over-deep nesting in a parsed message, as ``field: why``."""
    if depth > MAX_DEPTH:
        return f"{where or 'message'}: nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, _NonFinite) or (isinstance(value, float) and not math.isfinite(value)):
        return f"{where or 'value'}: {value!r} is not a finite number (NaN and Infinity are not JSON)"
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        found = _problem(v, f"{where}[{k!r}]" if isinstance(k, int) else f"{where}.{k}".lstrip("."), depth + 1)
        if found:
            return found
    return None


@dataclass(frozen=True)
class Transcript:
    """One recorded agent run: a name and its OpenAI-format messages."""

    name: str
    messages: list[Message]


@dataclass
class ReplayStats:
    """What a replay did. Times are milliseconds; token figures are prompt tokens.

    Attributes:
        step_ms: time spent in step memory per step (begin + evaluate incl. any compaction,
            plus the reply's <summary> line).
        context_ms: time of each context build (one per model call, when a budget is given).
        prompt_tokens: total tokens of each built prompt.
    """

    transcripts: int = 0
    messages: int = 0
    steps: int = 0
    model_calls: int = 0
    orphans: int = 0
    step_ms: list[float] = field(default_factory=list)
    context_ms: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    over_budget: int = 0
    degraded: int = 0
    tool_results: list[str] = field(default_factory=list)

    @property
    def peak_prompt_tokens(self) -> int:
        return max(self.prompt_tokens, default=0)


# -- loading -------------------------------------------------------------------------------------
def load_transcripts(path: str | Path) -> list[Transcript]:
    """Read a transcript file in any accepted format.

    Raises:
        ValidationError: the file is not JSON / JSONL of a recognised shape (the message says
            which shapes are accepted).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_TRANSCRIPT_BYTES:
            raise ValidationError(f"{path}: {size} bytes, over the {MAX_TRANSCRIPT_BYTES}-byte "
                                  "transcript limit; split it into several files")
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValidationError(f"{path}: cannot read the transcript ({exc})") from exc
    try:
        data: Any = _loads(text)
    except RecursionError as exc:
        raise ValidationError(f"{path}: JSON nested too deep to be a transcript") from exc
    except ValueError:
        data = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                data.append(_loads(line))
            except RecursionError as exc:
                raise ValidationError(f"{path}: line {lineno}: JSON nested too deep") from exc
            except ValueError as exc:
                raise ValidationError(f"{path}: neither JSON nor JSONL (line {lineno}: {exc})") from exc
    transcripts = _shape(path, data)
    # Check every message before anything is replayed: a bad message halfway through a file
    # must not leave the first half stored (a fixed re-run would then duplicate it).
    validate_transcripts(transcripts, source=str(path))
    if not any(t.messages for t in transcripts):
        raise ValidationError(f"{path}: the transcript has no messages; nothing to replay")
    return transcripts


def validate_transcripts(transcripts: Iterable[Transcript], *, source: str = "") -> list[Transcript]:
    """Validate every message of every transcript — OpenAI shape, JSON only, finite numbers,
    nesting depth — before anything is stored; returns them as a list.

    Raises:
        ValidationError: ``<source>: transcript 'name', message i: why`` for the first bad one
            (i is 1-based); nothing was written.
    """
    out = list(transcripts)
    prefix = f"{source}: " if source else ""
    for t in out:
        if not isinstance(t, Transcript) or not isinstance(t.messages, list):
            raise ValidationError(f"{prefix}expected Transcript objects with a list of messages, got {t!r:.80}")
        for i, m in enumerate(t.messages, start=1):
            where = f"{prefix}transcript {t.name!r}, message {i}"
            if not isinstance(m, dict):
                raise ValidationError(f"{where}: a message must be an object, got {type(m).__name__}")
            found = _problem(m)
            if found:
                raise ValidationError(f"{where}: {found}")
            try:
                validate_message({k: v for k, v in m.items() if not k.startswith("_")})
            except ValidationError as exc:
                raise ValidationError(f"{where}: {exc}") from exc
    return out


def _shape(path: Path, data: Any) -> list[Transcript]:
    """Recognise the file's shape and keep the OpenAI fields of every message."""
    try:
        if isinstance(data, dict) and isinstance(data.get("history"), list):
            return [Transcript(path.stem, [_clean(m) for m in data["history"]])]
        if isinstance(data, dict) and isinstance(data.get("messages"), list):
            return [Transcript(path.stem, [_clean(m) for m in data["messages"]])]
        if isinstance(data, list) and data and all(isinstance(r, dict) and "traj" in r for r in data):
            return [
                Transcript(f"{r.get('task_id', i)}-{r.get('trial', 0)}", [_clean(m) for m in _runs(r)])
                for i, r in enumerate(data)
            ]
    except ValidationError as exc:
        raise ValidationError(f"{path}: {exc}") from exc
    if isinstance(data, list) and all(isinstance(m, dict) and "role" in m for m in data):
        return [Transcript(path.stem, [_clean(m) for m in data])]
    raise ValidationError(
        f"{path}: not a transcript; expected a JSON/JSONL list of OpenAI messages, "
        "{'messages': [...]}, a τ-bench run list, or a SWE-agent .traj"
    )


def _runs(run: dict[str, Any]) -> list[Any]:
    if not isinstance(run["traj"], list):
        raise ValidationError(f"τ-bench run {run.get('task_id', '?')}: 'traj' must be a list of messages")
    return run["traj"]


def _clean(message: Any) -> Message:
    """Keep the OpenAI fields; SWE-agent's ``tool_call_ids`` list becomes ``tool_call_id`` and
    its ``action`` is kept under ``_action`` for step mapping (not stored)."""
    if not isinstance(message, dict):
        raise ValidationError(f"transcript message must be an object, got {type(message).__name__}")
    out = {k: message[k] for k in _KEEP if message.get(k) is not None}
    ids = message.get("tool_call_ids")
    if out.get("role") == "tool" and "tool_call_id" not in out and isinstance(ids, list) and ids:
        out["tool_call_id"] = str(ids[0])
    if out.get("role") == "assistant":
        out.setdefault("content", None if out.get("tool_calls") else "")
        if message.get("action") and not out.get("tool_calls"):
            out["_action"] = str(message["action"])
    # Recorded tool output is untrusted bulk text: NUL / lone surrogates are escaped here, so
    # the step record gets the same text as the stored message (not refused halfway). A message
    # too deep to clean is kept as it is: validate_transcripts refuses it, naming it.
    try:
        return clean_json(out)
    except ValidationError:
        return out


# -- replay ----------------------------------------------------------------------------------------
class _StepTracker:
    """The step currently waiting for its result(s)."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.waiting: set[str] = set()
        self.outputs: list[str] = []
        self.by_observation = False


def replay(
    session: Session,
    transcripts: Iterable[Transcript],
    *,
    budget_tokens: int | None = None,
    system_prompt: str | None = None,
    on_model_call: Callable[[Session], None] | None = None,
) -> ReplayStats:
    """Feed transcripts into `session` in order (they share the session: one long run).

    Args:
        budget_tokens: when given, the prompt is made with ``session.prepare`` (consolidate,
            then build — the agent path) before every assistant message (= every model call)
            and its size recorded.
        system_prompt: passed to the context builder (else the transcript's system message).
        on_model_call: called before every assistant message (e.g. a baseline to compare).

    Returns:
        :class:`ReplayStats` with per-step and per-build timings.

    Raises:
        ValidationError: a bad message anywhere in `transcripts` (see
            :func:`validate_transcripts`) or a budget below 1 token — before anything is stored.
    """
    if budget_tokens is not None:
        require_int("budget_tokens", budget_tokens)
    transcripts = validate_transcripts(transcripts)
    stats = ReplayStats()
    steps = session.steps
    for transcript in transcripts:
        stats.transcripts += 1
        tracker = _StepTracker()
        for raw in transcript.messages:
            msg = {k: v for k, v in raw.items() if not k.startswith("_")}
            role = msg.get("role")
            if role == "assistant":
                _close(session, tracker, stats, "the next reply came before the result")
                if on_model_call is not None:
                    on_model_call(session)
                if budget_tokens is not None:
                    _measure(session, budget_tokens, system_prompt, stats)
                stats.model_calls += 1
                session.add_message(msg)
                t0 = time.perf_counter()
                steps.note_reply(msg.get("content"), msg.get("tool_calls"))
                _begin(steps, raw, tracker)
                stats.step_ms.append((time.perf_counter() - t0) * 1000)
            else:
                session.add_message(msg)
                if role == "tool":
                    stats.tool_results.append(str(msg.get("content") or ""))
                    _tool_result(steps, msg, tracker, stats)
                elif role == "user" and tracker.by_observation and tracker.step is not None:
                    stats.tool_results.append(_as_text(msg.get("content")))
                    tracker.outputs.append(_as_text(msg.get("content")))
                    _finish(steps, tracker, stats)
            stats.messages += 1
        _close(session, tracker, stats, "the transcript ended before the result")
    return stats


def _begin(steps: Any, raw: Message, tracker: _StepTracker) -> None:
    calls = raw.get("tool_calls") or []
    action = raw.get("_action")
    if not calls and not action:
        return
    text = _SUMMARY_TAG.sub("", _as_text(raw.get("content"))).strip()
    if calls:
        names = "; ".join(
            f"{(c.get('function') or {}).get('name', '?')}"
            f"({compact_args((c.get('function') or {}).get('arguments', ''), 200)})"
            for c in calls
        )
    else:
        names = one_line(str(action), 300)
    goal = one_line(text, 300) if text else f"call {names}"
    tracker.step = steps.begin(goal, action=names)
    tracker.waiting = {str(c.get("id")) for c in calls}
    tracker.outputs = []
    tracker.by_observation = not calls


def _tool_result(steps: Any, msg: Message, tracker: _StepTracker, stats: ReplayStats) -> None:
    cid = str(msg.get("tool_call_id"))
    if tracker.step is None or cid not in tracker.waiting:
        return
    tracker.waiting.discard(cid)
    tracker.outputs.append(_as_text(msg.get("content")))
    if not tracker.waiting:
        t0 = time.perf_counter()
        _finish(steps, tracker, stats, started=t0)


def _finish(steps: Any, tracker: _StepTracker, stats: ReplayStats, started: float | None = None) -> None:
    t0 = started if started is not None else time.perf_counter()
    failed = any(_ERROR.search(o[:200]) for o in tracker.outputs)
    first = next((o for o in tracker.outputs if o.strip()), "")
    steps.evaluate(
        tracker.step, "failed" if failed else "success", analysis=one_line(first, 200),
        tool_outputs=tracker.outputs,
    )
    if stats.step_ms:
        stats.step_ms[-1] += (time.perf_counter() - t0) * 1000
    stats.steps += 1
    tracker.step, tracker.waiting, tracker.outputs, tracker.by_observation = None, set(), [], False


def _close(session: Session, tracker: _StepTracker, stats: ReplayStats, reason: str) -> None:
    if tracker.step is None:
        return
    if tracker.outputs:  # some results of a parallel batch arrived: evaluate with those
        _finish(session.steps, tracker, stats)
        return
    stats.orphans += len(session.steps.sweep_orphans(reason))
    stats.steps += 1
    tracker.step, tracker.waiting, tracker.by_observation = None, set(), False


def _measure(session: Session, budget: int, system_prompt: str | None, stats: ReplayStats) -> None:
    t0 = time.perf_counter()
    built = session.prepare(budget, system_prompt=system_prompt)
    stats.context_ms.append((time.perf_counter() - t0) * 1000)
    stats.prompt_tokens.append(built.report.total_tokens)
    stats.over_budget += built.report.total_tokens > budget
    stats.degraded += bool(built.report.degradations)


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
