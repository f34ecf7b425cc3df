"""The agent loop: a small tool-using loop on a :class:`~mindpalace.memory.Session` and any
OpenAI-compatible model, wiring every mechanism of the seeds.

One user turn (one step of the session's default task, seed 004):

1. the user message and ``step_started`` are stored in one transaction;
2. before EVERY model call, ``Session.prepare`` (consolidate if over budget, then build — seed
   002): corrections on top, constraints verbatim, checkpoint, memory index, step tiers,
   ``<summary>`` lines, archived summary, recalled memory, then the conversation — never over
   the budget;
3. the model answers; a ``{"read_files": …}`` request loads records and re-invokes it within
   the same budget, at most ``steps.max_read_files_reinvocations`` times (seed 000,
   :func:`mindpalace.steps.readfiles.run_with_recall`);
4. its ``<summary>`` line (or the tool-call fallback) goes to step memory (seed 003);
5. tool calls: the assistant message is stored first (so a crash knows what was in flight),
   then each call is validated against its schema, checked by the constraint guards, run —
   side-effecting ones through the idempotency ledger, exactly once — and recorded as a step
   (pending → evaluated, record ``step_N``); the results are stored with a task checkpoint in
   one transaction, and the loop goes back to 2;
6. a reply without tool calls ends the turn: the reply and ``step_finished`` in one transaction.

A crash anywhere leaves a started, unfinished task step: the next :meth:`Agent.resume` (or
:meth:`Agent.run`) sweeps orphaned pending steps, answers the stored tool calls that have no
result (a completed side effect returns its recorded result, an unknown outcome is surfaced to
the model, never re-run — I8) and continues the turn.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from mindpalace.agent.tools import Tool, as_tool, render_result
from mindpalace.blocks import ToolSchema, refuse_memory_tool_name
from mindpalace.context import BuiltContext
from mindpalace.errors import (
    ConfigError,
    ConstraintError,
    ContextBudgetError,
    EffectNotApplied,
    OutcomeUnknownError,
    ProviderError,
    TokenBudgetExceededError,
    ToolCallInFlightError,
    ValidationError,
)
from mindpalace.providers.llm import ChatReply, LLMProvider, TokenBudget, ToolCallRequest
from mindpalace.providers.llm.base import load_prompt
from mindpalace.settings import AgentSettings, Settings
from mindpalace.steps.checkpoint import compact_args
from mindpalace.steps.readfiles import (
    parse_read_files,
    recall_message,
    request_text,
    run_with_recall,
)
from mindpalace.steps.tiers import one_line
from mindpalace.tasks import NOT_RUN, ledger_key
from mindpalace.textsafe import clean_text, require_text
from mindpalace.tokens import TokenCounter

if TYPE_CHECKING:
    from mindpalace.memory import Session
    from mindpalace.session.lease import Lease

CHECKPOINT_TOOL: Final = "update_working_checkpoint"
ACTION_MAX_CHARS: Final = 2_000  # a step's action (record + repeat key); the full call is in the log
DANGLING_LOOKBACK: Final = 256  # stored messages searched for tool calls without results
_SUMMARY_TAG = re.compile(r"\s*<summary>.*?</summary>\s*", re.DOTALL | re.IGNORECASE)

Stopped = Literal["reply", "max_iterations", "token_budget"]
Status = Literal["ok", "replayed", "refused", "invalid", "error", "unknown", "unknown_tool"]


@dataclass
class ToolOutcome:
    """What one tool call of the model came to.

    Attributes:
        call_id / name / arguments: the call as the model sent it (arguments as raw text).
        status: ``ok``; ``replayed`` (a completed side effect: its recorded result, not run
            again); ``refused`` (a guard or protected constraint said no; the tool did not
            run); ``invalid`` (arguments not matching the schema; it did not run); ``error``
            (the tool raised, or said its effect did not happen); ``unknown`` (a side effect
            whose outcome is unknown — never re-run automatically); ``unknown_tool``.
        content: the tool message the model got.
        step: the step-memory step that records it (its record is ``step_<step>``).
        ledger_key: the idempotency-ledger key of a side-effecting call (None otherwise).
    """

    call_id: str
    name: str
    arguments: str
    status: Status
    content: str
    step: int | None = None
    ledger_key: str | None = None


@dataclass
class AgentTurn:
    """One user turn of the agent (one step of the session's default task).

    Attributes:
        index: the task step index of the turn.
        reply: the final answer with its ``<summary>`` tag removed ("" when it stopped early).
        stopped: ``reply``; ``max_iterations`` (``agent.max_iterations`` model calls without
            a final answer); ``token_budget`` (``agent.turn_token_budget`` spent).
        model_calls: model calls made, read_files re-invocations included.
        tool_calls: every tool call, in order.
        read_files: records loaded for the model by the read_files protocol; missing_files:
            names it asked for that do not exist.
        summaries: the ``<summary>`` lines recorded, one per model reply.
        prompt_tokens: ``count_messages(prompt, tools)`` of every model call; each is at most
            `budget_tokens`.
        budget_tokens: the prompt budget of every model call (tokens).
        unknown_calls: ledger keys of side effects whose outcome is unknown (surfaced, not
            re-run; settle them with ``mindpalace task resolve``).
        resumed: the turn was continued after a crash or a stop.
        earlier: the unfinished turn :meth:`Agent.run` finished before this one, if any.
    """

    index: int
    reply: str = ""
    stopped: Stopped = "reply"
    model_calls: int = 0
    tool_calls: list[ToolOutcome] = field(default_factory=list)
    read_files: list[str] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    budget_tokens: int = 0
    unknown_calls: list[str] = field(default_factory=list)
    resumed: bool = False
    earlier: AgentTurn | None = None


def agent_llm(settings: Settings, counter: TokenCounter) -> LLMProvider:
    """The agent's OpenAI-compatible model client from settings and the environment.

    ``agent.base_url`` / ``api_key`` / ``model``, else ``[llm]``'s when its provider is
    'openai', else ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``OPENAI_MODEL``; model default
    ``llm.model``. Timeouts, retries, backoff and the breaker are ``[llm]``'s.

    Raises:
        ConfigError: neither an endpoint nor an API key anywhere.
    """
    from mindpalace.providers.llm.openai import OpenAIProvider
    from mindpalace.settings import LLMSettings

    a, llm = settings.agent, settings.llm
    mine = llm.provider == "openai"
    values = llm.model_dump() | {
        "provider": "openai",
        "base_url": a.base_url or (llm.base_url if mine else None) or os.environ.get("OPENAI_BASE_URL") or None,
        "api_key": a.api_key or (llm.api_key if mine else None) or os.environ.get("OPENAI_API_KEY") or None,
        "model": a.model or os.environ.get("OPENAI_MODEL") or llm.model,
    }
    if values["base_url"] is None and values["api_key"] is None:
        raise ConfigError(
            "settings", "agent.base_url",
            "the agent has no model endpoint: set agent.base_url (MINDPALACE_AGENT__BASE_URL, "
            "`mindpalace chat --base-url`) or OPENAI_BASE_URL for an OpenAI-compatible server, "
            "or agent.api_key / OPENAI_API_KEY for the OpenAI API")
    return OpenAIProvider(LLMSettings(**values), counter)


class Agent:
    """A tool-using agent loop on one session (see the module docstring for one turn).

    Example:
        >>> @tool(side_effect=True)                                   # doctest: +SKIP
        ... def book_ticket(place: str, date: str) -> dict: ...
        >>> with Agent(mem.session("trip-42", user="u1"), [book_ticket]) as agent:  # doctest: +SKIP
        ...     print(agent.run("Book Senso-ji for 2025-05-20").reply)

    Args:
        session: the session whose memory the agent uses and writes.
        tools: :class:`~mindpalace.agent.tools.Tool` objects or plain annotated callables
            (read-only tools); ``update_working_checkpoint`` (seed 003) is always added.
        llm: the model client; default :func:`agent_llm` from the workspace settings
            (closed with the agent).
        settings: ``[agent]`` settings; default the workspace's.
        holder: the name on the session's turn lease while a turn runs.

    Raises:
        ValidationError: two tools share a name, or a callable cannot be made a tool.
        ConfigError: no model endpoint can be configured (see :func:`agent_llm`).
    """

    def __init__(
        self,
        session: Session,
        tools: Iterable[Tool | Any] = (),
        *,
        llm: LLMProvider | None = None,
        settings: AgentSettings | None = None,
        holder: str = "agent",
    ) -> None:
        self.session = session
        ws = session.memory.settings
        self.settings = settings or ws.agent
        self.counter = session.memory.tokens
        self.holder = holder
        self.tools: dict[str, Tool] = {}
        for t in [*map(as_tool, tools), Tool.from_function(self._update_working_checkpoint, name=CHECKPOINT_TOOL)]:
            if t.name in self.tools:
                raise ValidationError(f"two tools are named {t.name!r}; tool names must be unique")
            refuse_memory_tool_name([t.name], ws.context.memory_role)
            self.tools[t.name] = t
            if t.reconcile is not None:
                session.task.ledger.reconciler(t.name, t.reconcile)
        self.schemas: list[ToolSchema] = [t.schema for t in self.tools.values()]
        self.system_prompt = load_prompt("agent").replace("{system_prompt}", self.settings.system_prompt).strip()
        self.budget_tokens = self.settings.budget_tokens or ws.session.input_budget_tokens
        self.max_completion_tokens = ws.session.max_completion_tokens or None
        self._owns_llm = llm is None
        self.llm = llm if llm is not None else agent_llm(ws, self.counter)
        self._lease: Lease | None = None

    # -- the public calls ----------------------------------------------------------------
    def run(self, message: str) -> AgentTurn:
        """Answer one user message: model calls and tool calls until a final reply.

        An unfinished earlier turn (a crash) is continued first; it is in ``.earlier``.

        Args:
            message: the user's message (text).

        Returns:
            The :class:`AgentTurn`.

        Raises:
            InvalidTextError: `message` is empty or not storable text (nothing stored).
            ContextBudgetError: `agent.budget_tokens` cannot show `message` beside the parts
                of the prompt never cut (nothing stored; see ``ContextBuilder.check_request``).
            SessionBusyError: another live process holds the session's turn lease.
            ProviderError: the model failed after its retries (or the breaker is open); the
                turn stays unfinished and a later run continues it.
            StoreError: the store could not be written.
        """
        text = require_text("message", message, allow_empty=False)
        with self._turn_lease():
            # before it is stored: a stored message no prompt can show wedges every later turn
            self.session.context_builder.check_request(
                self.budget_tokens, text, system_prompt=self.system_prompt, tools=self.schemas)
            earlier = self._resume()
            turn = self._start(text)
            self._loop(turn)
            turn.earlier = earlier
            return turn

    def resume(self) -> AgentTurn | None:
        """Continue the turn a crash or an error left unfinished; None when there is none.

        Tool calls the model made whose results were never stored are answered first through
        the ledger: a completed side effect returns its recorded result (it is not run again),
        an unknown outcome is reported to the model (never re-run), a reconcile hook settles
        it when the tool has one. Raises as :meth:`run`.
        """
        with self._turn_lease():
            return self._resume()

    def correct(self, text: str, **updates: Any) -> None:
        """Record a user correction: it is at the top of the very next prompt (seed 004).
        `updates` set protected constraints as the user in the same event.

        Raises:
            InvalidTextError / ValidationError: empty text, bad constraint names or values.
        """
        self.session.constraints.feedback(text, updates=updates or None)

    def close(self) -> None:
        """Close the model client when the agent created it."""
        if self._owns_llm:
            self.llm.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- turns ---------------------------------------------------------------------------
    @contextmanager
    def _turn_lease(self) -> Iterator[None]:
        if self._lease is not None:  # re-entered (run → resume): one lease per turn
            yield
            return
        with self.session.lease(holder=self.holder) as lease:
            self._lease = lease
            try:
                yield
            finally:
                self._lease = None

    def _start(self, text: str) -> AgentTurn:
        s = self.session
        with s.store.transaction():
            index = s.task.state().step
            s.add_message({"role": "user", "content": text})
            s.task.start_step(index, one_line(text, 120))
        return AgentTurn(index, budget_tokens=self.budget_tokens)

    def _resume(self) -> AgentTurn | None:
        resumption = self.session.task.resume()
        current = resumption.state.current
        if current is None:
            return None
        self.session.steps.sweep_orphans("agent process restarted mid-turn")
        turn = AgentTurn(current.index, budget_tokens=self.budget_tokens, resumed=True,
                         unknown_calls=list(resumption.unknown_calls))
        self._loop(turn)
        return turn

    def _loop(self, turn: AgentTurn) -> None:
        s = self.session
        budget = TokenBudget("agent turn", self.settings.turn_token_budget)
        calls = 0
        while True:
            dangling = self._dangling_calls()
            if dangling:
                self._run_tools(turn, dangling)
            if calls >= self.settings.max_iterations:
                turn.stopped = "max_iterations"
                break
            reply = self._model_call(turn, budget)
            calls += 1
            if reply is None:
                turn.stopped = "token_budget"
                break
            turn.summaries.append(s.steps.note_reply(reply.text, [c.to_json() for c in reply.tool_calls]))
            if reply.tool_calls:
                with s.store.transaction():  # what is in flight is durable before anything runs
                    s.add_message(reply.message())
                    s.task.checkpoint(pending=[f"{c.name}#{c.id}" for c in reply.tool_calls])
                continue
            with s.store.transaction():
                s.add_message(reply.message())
                s.task.finish_step(turn.index, output={"reply": one_line(reply.text, 300)})
            turn.reply = _SUMMARY_TAG.sub(" ", reply.text).strip()
            return
        # stopped early: the turn is closed (a later resume must not spend again) as a failure
        s.task.finish_step(turn.index, outcome="failure", output={"stopped": turn.stopped})

    def _model_call(self, turn: AgentTurn, budget: TokenBudget) -> ChatReply | None:
        """prepare → model → read_files re-invocations (seed 000); None when the turn's token
        budget is spent. When the prepared prompt leaves no room for the records the model
        asks for, they are answered on the same prompt rebuilt (pure build) under a budget
        that leaves them room — up to half of it."""
        s = self.session
        built = s.prepare(self.budget_tokens, system_prompt=self.system_prompt, tools=self.schemas)
        answered: list[ChatReply] = []  # the first reply, handed to run_with_recall unasked

        def invoke(messages: list[dict[str, Any]]) -> ChatReply:
            if answered:
                return answered.pop()
            turn.model_calls += 1
            reply = self.llm.chat(messages, tools=self.schemas, max_tokens=self.max_completion_tokens,
                                  temperature=self.settings.temperature, budget=budget)
            if self._lease is not None:
                self._lease.renew()
            return reply

        try:
            first = invoke(built.messages)
            base = built.messages
            names = parse_read_files(first.text)
            if names is not None and self._max_reinvocations > 0:
                base = self._room_for_records(built, names)
            answered.append(first)
            recall = run_with_recall(
                invoke, base, s.read_records, counter=self.counter, budget_tokens=self.budget_tokens,
                max_reinvocations=self._max_reinvocations, tools=self.schemas,
                reply_text=lambda r: r.text,
            )
        except TokenBudgetExceededError:
            return None
        except ProviderError:
            s.steps.sweep_orphans("model call failed")  # seed 000: no pending line is left behind
            raise
        turn.prompt_tokens.extend([built.report.total_tokens, *recall.prompt_tokens[1:]])
        turn.read_files.extend(recall.loaded)
        turn.missing_files.extend(recall.missing)
        reply: ChatReply = recall.reply
        return reply

    @property
    def _max_reinvocations(self) -> int:
        return self.session.memory.settings.steps.max_read_files_reinvocations

    def _room_for_records(self, built: BuiltContext, names: list[str]) -> list[dict[str, Any]]:
        """The prompt to answer a read_files request on: `built` when the records fit beside
        it, else the same prompt rebuilt under the budget less their size (at most half the
        budget; oldest messages and recalled items give way, as the builder degrades)."""
        s = self.session
        full = recall_message(s.read_records(names))
        echo = {"role": "assistant", "content": request_text(names)}
        need = min(self.counter.count_messages([echo, full or echo]), self.budget_tokens // 2)
        if built.report.total_tokens + need <= self.budget_tokens:
            return built.messages
        try:
            return s.context(self.budget_tokens - need, system_prompt=self.system_prompt,
                             tools=self.schemas).messages
        except ContextBudgetError:  # the fixed part leaves no such room: records are cut to fit
            return built.messages

    # -- tool calls ----------------------------------------------------------------------
    def _dangling_calls(self) -> list[ToolCallRequest]:
        """The newest stored assistant tool calls that have no stored result (a crash between
        storing the calls and storing their results), in call order."""
        log = self.session.messages
        last = log.count()
        answered: set[str] = set()
        for stored in reversed(log.list(from_index=max(1, last - DANGLING_LOOKBACK + 1), to_index=last)):
            m = stored.message
            if m.get("role") == "tool":
                answered.add(str(m.get("tool_call_id")))
                continue
            if m.get("role") == "assistant" and m.get("tool_calls"):
                return [_request(c) for c in m["tool_calls"] if c.get("id") not in answered]
            return []
        return []

    def _run_tools(self, turn: AgentTurn, calls: list[ToolCallRequest]) -> None:
        outcomes = [self._run_tool(call) for call in calls]
        s = self.session
        with s.store.transaction():  # all results of one assistant turn, with the checkpoint
            for o in outcomes:
                s.add_message({"role": "tool", "tool_call_id": o.call_id, "content": o.content})
            s.task.checkpoint(pending=[])
        turn.tool_calls.extend(outcomes)
        turn.unknown_calls.extend(o.ledger_key for o in outcomes
                                  if o.status == "unknown" and o.ledger_key
                                  and o.ledger_key not in turn.unknown_calls)

    def _run_tool(self, call: ToolCallRequest) -> ToolOutcome:
        s = self.session
        t = self.tools.get(call.name)
        shown = clean_text(compact_args(call.arguments, s.memory.settings.steps.fallback_args_max_chars))
        action = clean_text(compact_args(call.arguments, ACTION_MAX_CHARS))
        step = s.steps.begin(f"{clean_text(call.name)}({shown})", action=f"{clean_text(call.name)}({action})")
        key: str | None = None
        if t is None:
            status: Status = "unknown_tool"
            content = f"error: there is no tool {call.name!r}; the tools are: {', '.join(self.tools)}"
        else:
            try:
                kwargs, args = t.parse(call.arguments, max_chars=self.settings.tool_arguments_max_chars)
            except ValidationError as exc:
                status, content = "invalid", f"error: {exc}; the tool did not run — call it again with arguments matching its schema"
            else:
                if t.side_effect:
                    key = ledger_key(t.name, args, t.key(args) if t.key is not None else None)
                status, content = self._dispatch(t, kwargs, args)
        content = clean_text(content)
        verdict = "success" if status in ("ok", "replayed") else f"failed: {status}"
        s.steps.evaluate(step, verdict, analysis=one_line(content, 300), tool_outputs=[content])
        return ToolOutcome(call.id, call.name, call.arguments, status, content, step, key)

    def _dispatch(self, t: Tool, kwargs: dict[str, Any], args: dict[str, Any]) -> tuple[Status, str]:
        """Run one validated call: guards first; side effects through the ledger (I8)."""
        s = self.session
        if not t.side_effect:
            try:
                s.constraints.enforce(t.name, args)
            except ConstraintError as exc:
                return "refused", f"refused: {exc}; the tool did not run"
            try:
                return "ok", render_result(t.fn(**kwargs))
            except Exception as exc:  # the tool's own failure is the model's to handle
                return "error", f"error: {t.name} raised {type(exc).__name__}: {exc}"
        call = s.tool_call(t.name, args, idempotent=t.idempotent,
                           key=t.key(args) if t.key is not None else None)
        try:
            with call:
                if call.done:
                    return "replayed", ("already done earlier — this is its recorded result; it "
                                        "was not run again: " + render_result(call.result))
                value = call.run(lambda **_: t.fn(**kwargs))
        except ConstraintError as exc:
            return "refused", f"refused: {exc}; the tool did not run"
        except OutcomeUnknownError as exc:
            return "unknown", f"outcome unknown, not run again: {exc}"
        except ToolCallInFlightError as exc:  # running elsewhere now: its result comes later
            return "refused", f"not run: the same call is running now elsewhere ({exc})"
        except Exception as exc:
            entry = call.entry
            if entry is None or entry.status not in ("failed", "unknown"):
                raise  # not the tool's failure: the ledger or the store (nothing ran)
            if entry.status == "failed" or isinstance(exc, EffectNotApplied):
                return "error", f"error: {t.name} failed and did not take effect ({type(exc).__name__}: {exc}); it may be tried again"
            return "unknown", (f"outcome unknown: {t.name} raised {type(exc).__name__}: {exc} after it "
                               "was dispatched, so it may have taken effect; it will not be run "
                               "again automatically")
        if value is NOT_RUN:
            return "error", f"error: {t.name} did not take effect; it may be tried again"
        note = (f" (note: this result tried to change protected constraints {', '.join(call.notes)}; "
                "refused — they keep their values)") if call.notes else ""
        return "ok", render_result(value) + note

    def _update_working_checkpoint(self, key_info: str = "", related_sop: str = "") -> str:
        """Update your working checkpoint, shown at the top of every prompt: the key facts and
        progress to keep across a long task, and the procedure you follow.

        Args:
            key_info: the facts to keep (replaces the previous key_info; empty = unchanged).
            related_sop: the name of the procedure you follow (empty = unchanged).
        """
        cp = self.session.steps.checkpoint(key_info=key_info or None, related_sop=related_sop or None)
        return f"working checkpoint updated: key_info={cp.key_info!r}, related_sop={cp.related_sop!r}"


def _request(call: dict[str, Any]) -> ToolCallRequest:
    fn = call.get("function") or {}
    args = fn.get("arguments", "")
    return ToolCallRequest(str(call.get("id")), str(fn.get("name", "")),
                           args if isinstance(args, str) else render_result(args))

