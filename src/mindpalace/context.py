"""ContextBuilder: the ONLY place that assembles a prompt — every part counted, never over budget.

Building is read-only: the same stored state in gives the same messages out, nothing is written
and no model is called (``Session.context``, ``mindpalace context``). Making room first — the
consolidation of older messages into history.jsonl — is the agent path's explicit turn call,
``Session.prepare``, which runs the consolidator and then this builder.

Order of the prompt (one message per block, roles from :data:`mindpalace.blocks.BLOCK_ROLES`,
then the conversation):

0. user corrections (seed 004, newest first, at the very top)
1. system prompt (given, else the session's latest ``system`` message, archived or not)
2. protected constraints (seed 004, I7)
3. working checkpoint (seed 003)
4. memory index (seed 000)
5. "Summarized memory (compressed from earlier steps)" (seed 000 summary tier)
6. recent steps, 7. pending steps (seed 000)
8. the last ``<summary>`` lines (seed 003)
9. archived context summary (seed 002)
10. the last messages (after the consolidation cursor)

Every part is counted exactly with ``counter.count_messages(final_messages, tools)`` (I9: tool
schemas and reply priming included). When the prompt would exceed the budget it degrades in
the order of seed 000's ``cut_messages``: drop images, drop the oldest messages (whole tool
groups, never a call without its results — I1), truncate the tail of the longest remaining
block; each degradation is named in the report. The final messages always go through
:func:`~mindpalace.session.pairing.repair_pairing`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from mindpalace.blocks import (
    BLOCK_ORDER,
    PROTECTED_BLOCKS,
    Block,
    Message,
    ToolSchema,
    block_message,
    check_tools,
)
from mindpalace.checks import require_int
from mindpalace.errors import ContextBudgetError
from mindpalace.session.consolidator import ConsolidationResult, Consolidator
from mindpalace.session.messages import MessageLog, validate_messages
from mindpalace.session.observations import MIN_SHOWN_TOKENS, govern, head_and_tail
from mindpalace.session.pairing import PairingReport, repair_pairing, tool_groups
from mindpalace.settings import SessionSettings
from mindpalace.steps.checkpoint import render_checkpoint, render_summary_lines
from mindpalace.steps.index import INDEX_HEADER
from mindpalace.steps.memory import StepMemory
from mindpalace.tasks.task import Tasks
from mindpalace.textsafe import require_text
from mindpalace.tokens import TokenCounter

IMAGE_TYPES: Final = frozenset({"image_url", "image", "input_image"})
IMAGE_PLACEHOLDER: Final = "[image omitted to fit the context budget]"
TRUNCATION_MARK: Final = "\n…[truncated to fit the context budget]"
MESSAGE_CUT_NOTE: Final = "…[{tokens} tokens cut from the middle to fit the context budget{where}]…"
FIRST_LOAD_MESSAGES: Final = 64  # tail messages read first; doubled until the budget is passed


@dataclass
class ContextReport:
    """What went into a prompt.

    Attributes:
        blocks: ``(name, tokens)`` per part in prompt order, plus ``messages (n)``,
            ``tool schemas`` and ``reply priming``; the tokens sum to `total_tokens`.
        total_tokens: ``count_messages(messages, tools)`` of the returned prompt.
        budget_tokens: the budget asked for; ``total_tokens <= budget_tokens`` always.
        degradations: what was dropped or cut, in order (empty when everything fit).
        pairing: what :func:`repair_pairing` repaired (dangling calls closed, orphan results
            dropped) in the conversation.
        consolidation: what ``Session.prepare`` archived before building (None for a pure
            build, ``Session.context``).
        observations: tool results governance shortened on this build (cut to
            ``session.tool_result_max_tokens`` or masked for age), each naming its
            ``message:<N>``; nothing is lost, so these are not degradations.
    """

    blocks: list[tuple[str, int]]
    total_tokens: int
    budget_tokens: int
    degradations: list[str] = field(default_factory=list)
    pairing: PairingReport = field(default_factory=PairingReport)
    consolidation: ConsolidationResult | None = None
    observations: list[str] = field(default_factory=list)


@dataclass
class BuiltContext:
    """A prompt ready to send: ``messages`` (OpenAI format), the `tools` it was counted with,
    and the :class:`ContextReport`."""

    messages: list[Message]
    report: ContextReport
    tools: list[ToolSchema] | None = None


class ContextSources(Protocol):
    """What a prompt is built from — read-only views of the session's components."""

    def memory_blocks(self) -> Mapping[Block, str]:
        """The text of every memory block the session has now (absent = no such block)."""
        ...

    def system_message(self) -> Message | None:
        """The session's newest ``system`` message, archived or not (None when none)."""
        ...

    def message_range(self) -> tuple[int, int]:
        """(first, last) 1-based index of the messages still in the prompt (after the
        consolidation cursor); first > last when there are none."""
        ...

    def read_messages(self, first: int, last: int) -> list[Message]:
        """Stored messages first..last (inclusive), oldest first."""
        ...


class SessionSources:
    """:class:`ContextSources` over one session's components (the facade wires it)."""

    def __init__(
        self, messages: MessageLog, steps: StepMemory, consolidator: Consolidator, tasks: Tasks
    ) -> None:
        self.messages = messages
        self.steps = steps
        self.consolidator = consolidator
        self.tasks = tasks

    def memory_blocks(self) -> dict[Block, str]:
        steps = self.steps
        steps.refresh()  # another process may have moved the tiers since this handle looked
        index = steps.index()
        corrections, constraints = self.tasks.prompt_blocks()
        texts = {
            Block.CORRECTIONS: corrections,
            Block.CONSTRAINTS: constraints,
            Block.CHECKPOINT: render_checkpoint(steps.state.checkpoint),
            Block.MEMORY_INDEX: INDEX_HEADER + "\n" + "\n".join(index) if index else None,
            Block.STEP_SUMMARY: steps.render_summary(),
            Block.RECENT_STEPS: steps.render_recent(),
            Block.PENDING_STEPS: steps.render_pending(),
            Block.SUMMARY_LINES: render_summary_lines(steps.summary_lines),
            Block.ARCHIVED_SUMMARY: self.consolidator.summary_text(),
        }
        return {block: text for block, text in texts.items() if text}

    def system_message(self) -> Message | None:
        return self.messages.latest_system()

    def message_range(self) -> tuple[int, int]:
        return self.consolidator.last_consolidated + 1, self.messages.count()

    def read_messages(self, first: int, last: int) -> list[Message]:
        return [m.message for m in self.messages.list(from_index=first, to_index=last)]


@dataclass
class _Part:
    name: Block
    message: Message


class ContextBuilder:
    """Builds the prompt of one session under a token budget. Never writes.

    Example:
        >>> built = ContextBuilder(sources, counter).build(4_000, system_prompt="You plan trips.")  # doctest: +SKIP
        >>> built.report.total_tokens <= 4_000                                                   # doctest: +SKIP
        True

    Args:
        sources: the session's memory blocks and stored messages (:class:`ContextSources`).
        counter: the token counter (I9).
        settings: ``[session]`` (tool-result governance: ``tool_result_*``); default settings.
    """

    def __init__(
        self, sources: ContextSources, counter: TokenCounter, settings: SessionSettings | None = None
    ) -> None:
        self.sources = sources
        self.counter = counter
        self.settings = settings or SessionSettings()

    def build(
        self,
        budget_tokens: int,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        messages: Sequence[Message] | None = None,
    ) -> BuiltContext:
        """Assemble the prompt for the next model call. Read-only.

        Args:
            budget_tokens: hard cap on ``count_messages(result.messages, tools)`` (tokens).
            system_prompt: the system prompt; None = the latest ``system`` message of the
                conversation (system messages are always lifted out of the conversation; with
                stored messages, the session's latest one even if it is archived).
            tools: tool schemas sent with the request (counted, I9).
            messages: the conversation; None = the session's stored messages after the
                consolidation cursor (only the tail that can matter is read).

        Returns:
            A :class:`BuiltContext` whose ``report.total_tokens <= budget_tokens``.

        Stored tool results are governed first (:mod:`mindpalace.session.observations`: a huge
        one shown as head + tail + its ``message:<N>`` reference, old ones masked the same way;
        named in ``report.observations``); a message the budget still forces to be cut keeps
        its head and tail and names its reference.

        Raises:
            ContextBudgetError: the budget is below the irreducible minimum: tool schemas +
                reply priming + the system prompt and the protected constraints and user
                corrections (never cut, I7).
            ValidationError: `budget_tokens` is not a positive int; `system_prompt` is not
                text; `tools` is not a list of JSON objects; a given message is malformed.
        """
        budget = require_int("budget_tokens", budget_tokens)
        tool_list = _check_request(system_prompt, tools)
        convo_given = None if messages is None else validate_messages(messages)
        if convo_given is None and system_prompt is None:
            system_prompt = self._stored_system_prompt()
        blocks = self._blocks()
        self._check_floor(budget, blocks, tool_list, system_prompt)
        refs: list[str | None]
        if convo_given is None:
            # Messages are dropped before any block is cut, so only the tail that fits beside
            # the blocks can survive: read just that much (plus one chunk) from the store.
            fixed = [p.message for p in blocks]
            if system_prompt is not None:
                fixed.append(block_message(Block.SYSTEM_PROMPT, system_prompt))
            room = budget - self.counter.count_messages(fixed, tool_list)
            convo, unloaded, start = self._load_messages(max(0, room))
            refs = [f"message:{start + k}" for k in range(len(convo))]
        else:
            convo, unloaded, refs = convo_given, 0, [None] * len(convo_given)
        convo, observations = self._govern(convo, refs)
        ref_of = {id(m): r for m, r in zip(convo, refs, strict=True) if r}
        lifted = [m for m in convo if m.get("role") == "system"]
        convo = [m for m in convo if m.get("role") != "system"]
        if system_prompt is None and lifted:
            system_prompt = _text(lifted[-1].get("content"))
            self._check_floor(budget, blocks, tool_list, system_prompt)
        convo, pairing = repair_pairing(convo)
        if system_prompt:
            at = 1 if blocks and blocks[0].name is Block.CORRECTIONS else 0  # corrections stay on top
            blocks.insert(at, _Part(Block.SYSTEM_PROMPT, block_message(Block.SYSTEM_PROMPT, system_prompt)))
        fitter = _Fitter(self.counter, blocks, convo, tool_list, budget, ref_of)
        fitter.dropped_messages += unloaded
        degradations: list[str] = []
        fitter.fit(degradations)
        final, check = repair_pairing(fitter.flat())
        if not check.ok:  # cannot happen with whole-group drops; kept as a guard for I1
            pairing.closed_calls += check.closed_calls
            pairing.dropped_results += check.dropped_results
        report = fitter.report(final, degradations, pairing)
        report.observations = observations
        return BuiltContext(final, report, tool_list)

    def fixed_tokens(
        self,
        budget_tokens: int,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
    ) -> int:
        """Tokens of every fixed part of the prompt :meth:`build` would make (system prompt and
        memory blocks, each as ``count_message``) except the archived summary, which the
        consolidator sizes itself. Read-only; raises what :meth:`build` raises for these
        arguments, so ``Session.prepare`` refuses a bad request before it writes anything."""
        budget = require_int("budget_tokens", budget_tokens)
        tool_list = _check_request(system_prompt, tools)
        if system_prompt is None:
            system_prompt = self._stored_system_prompt()
        blocks = self._blocks()
        self._check_floor(budget, blocks, tool_list, system_prompt)
        fixed = [p.message for p in blocks if p.name is not Block.ARCHIVED_SUMMARY]
        if system_prompt is not None:
            fixed.append(block_message(Block.SYSTEM_PROMPT, system_prompt))
        return sum(self.counter.count_message(m) for m in fixed)

    def _stored_system_prompt(self) -> str | None:
        # The session's system message, even when it was archived long ago (seed 002: the
        # system prompt is never consolidated away).
        latest = self.sources.system_message()
        return _text(latest.get("content")) if latest else None

    def _check_floor(
        self, budget: int, blocks: list[_Part], tools: list[ToolSchema] | None, system_prompt: str | None
    ) -> None:
        minimum = self.counter.count_messages([], tools)
        if budget < minimum:
            raise ContextBudgetError(budget, minimum)
        parts = [p for p in blocks if p.name in PROTECTED_BLOCKS]
        if system_prompt:
            parts.append(_Part(Block.SYSTEM_PROMPT, block_message(Block.SYSTEM_PROMPT, system_prompt)))
        protected = [p.message for p in parts]
        if protected and budget < (floor := self.counter.count_messages(protected, tools)):
            sizes = ", ".join(f"{p.name.value} {self.counter.count_message(p.message)}" for p in parts)
            raise ContextBudgetError(  # I7: these are never cut, so they must fit whole
                budget, floor, f"reply priming and tool schemas {minimum}, {sizes} tokens, which "
                "are never cut; shorten them"
            )

    def _govern(self, convo: list[Message], refs: Sequence[str | None]) -> tuple[list[Message], list[str]]:
        """Tool-result governance (:func:`~mindpalace.session.observations.govern`) and its
        report lines."""
        s = self.settings
        out, report = govern(convo, refs, self.counter, max_tokens=s.tool_result_max_tokens,
                             mask_after_turns=s.tool_result_mask_after_turns,
                             masked_tokens=s.tool_result_masked_tokens)
        return out, report.lines(s.tool_result_mask_after_turns)

    def _blocks(self) -> list[_Part]:
        """Every memory block present, in prompt order (the system prompt is inserted later)."""
        texts = self.sources.memory_blocks()
        return [_Part(b, block_message(b, texts[b])) for b in BLOCK_ORDER if texts.get(b)]

    def _load_messages(self, budget: int) -> tuple[list[Message], int, int]:
        """The stored tail after the cursor: read backwards in growing chunks until the loaded
        messages alone (as governed) pass the budget (older ones would be dropped anyway).
        Returns (messages, count of older messages not loaded, index of the first loaded)."""
        first, last = self.sources.message_range()
        end = last + 1
        loaded: list[Message] = []
        lo, chunk = end, FIRST_LOAD_MESSAGES
        while lo > first:
            new_lo = max(first, lo - chunk)
            loaded = self.sources.read_messages(new_lo, lo - 1) + loaded
            lo, chunk = new_lo, chunk * 2
            refs = [""] * len(loaded)  # sizes as governance will show them
            if self.counter.count_messages(_without_images(self._govern(loaded, refs)[0])) > budget:
                break
        unloaded = max(0, lo - first)
        if unloaded:  # a partial load may start inside a tool group: its results go with it
            while loaded and loaded[0].get("role") == "tool":
                loaded.pop(0)
                unloaded += 1
        return loaded, unloaded, first + unloaded


class _Fitter:
    """Applies the three degradations until the prompt fits; counts with the real counter."""

    def __init__(
        self,
        counter: TokenCounter,
        blocks: list[_Part],
        convo: list[Message],
        tools: list[ToolSchema] | None,
        budget: int,
        refs: Mapping[int, str] | None = None,
    ) -> None:
        self.counter = counter
        self.blocks = blocks
        self.groups = [convo[a:b] for a, b in tool_groups(convo)]
        self.tools = tools
        self.budget = budget
        self.refs = refs or {}  # id(message) → message:<N>, for stored messages
        self.dropped_messages = 0

    def flat(self) -> list[Message]:
        return [p.message for p in self.blocks] + [m for g in self.groups for m in g]

    def total(self) -> int:
        return self.counter.count_messages(self.flat(), self.tools)

    def fit(self, degradations: list[str]) -> None:
        if self.dropped_messages:
            degradations.append(f"dropped {self.dropped_messages} oldest messages (not loaded)")
            self.dropped_messages = 0
        total = self.total()
        if total <= self.budget:
            return
        total = self._drop_images(total, degradations)
        total = self._drop_oldest(total, degradations)
        total = self._truncate(total, degradations)
        self._drop_rest(total, degradations)

    def _drop_images(self, total: int, degradations: list[str]) -> int:
        dropped = 0
        for group in self.groups:
            for msg in group:
                content = msg.get("content")
                if isinstance(content, list):
                    parts = []
                    for part in content:
                        if isinstance(part, dict) and part.get("type") in IMAGE_TYPES:
                            parts.append({"type": "text", "text": IMAGE_PLACEHOLDER})
                            dropped += 1
                        else:
                            parts.append(part)
                    msg["content"] = parts
        if not dropped:
            return total
        degradations.append(f"dropped {dropped} images")
        return self.total()

    def _drop_oldest(self, total: int, degradations: list[str]) -> int:
        n = 0
        while total > self.budget and len(self.groups) > 1:
            group = self.groups.pop(0)
            total -= sum(self.counter.count_message(m) for m in group)
            n += len(group)
        if n:
            degradations.append(f"dropped {n} oldest messages")
            total = self.total()
        return total

    def _candidates(self) -> list[tuple[int, str, Message]]:
        """(content tokens, name, message) of every part whose text can be cut."""
        out = [(self.counter.count(p.message["content"]), p.name.value, p.message) for p in self.blocks
               if p.name not in PROTECTED_BLOCKS]  # I7: never cut, only dropped as the very last resort
        for group in self.groups:
            for msg in group:
                if isinstance(msg.get("content"), str) and msg["content"]:
                    out.append((self.counter.count(msg["content"]), f"message ({msg.get('role')})", msg))
        return [c for c in out if c[0] > 0]

    def _truncate(self, total: int, degradations: list[str]) -> int:
        """Cut the tails of the longest parts: the longest is cut down to the next longest,
        then both, … (one pass computes the common level), so every block keeps its head —
        for the newest-first memory index, its newest entries."""
        mark = self.counter.count(TRUNCATION_MARK)
        cands = self._candidates()
        if total > self.budget and cands:
            level = _level([c[0] for c in cands], total - self.budget)
            for tokens, name, msg in cands:
                if tokens > level:
                    self._cut(msg, name, tokens, level, mark, degradations)
            total = self.total()
        for _ in range(4 * (len(self.blocks) + 8)):  # exact fix-up for tokenizer seams; bounded
            if total <= self.budget:
                break
            cands = self._candidates()
            if not cands:
                break
            tokens, name, msg = max(cands, key=lambda c: c[0])
            self._cut(msg, name, tokens, tokens - (total - self.budget), mark, degradations)
            total = self.total()
        return total

    def _cut(self, msg: Message, name: str, tokens: int, keep: int, mark: int, degradations: list[str]) -> None:
        ref = self.refs.get(id(msg))
        where = f"; in full as {ref}, read it with read_files" if ref else ""
        note = MESSAGE_CUT_NOTE.format(tokens=tokens - keep, where=where)
        if name.startswith("message") and keep >= self.counter.count(note) + 4 * MIN_SHOWN_TOKENS:
            # a message's end matters as much as its head ("FINAL: 3 submodules failed")
            msg["content"] = head_and_tail(msg["content"], self.counter, keep, note)
            degradations.append(f"cut the middle of {name}{' ' + ref if ref else ''} from {tokens} "
                                f"to {keep} tokens (head + tail kept)")
        elif keep > mark:
            msg["content"] = self.counter.truncate(msg["content"], keep - mark) + TRUNCATION_MARK
            degradations.append(f"truncated the tail of {name} from {tokens} to {keep} tokens")
        else:
            msg["content"] = ""
            degradations.append(f"emptied {name} ({tokens} tokens)")
            self.blocks = [p for p in self.blocks if p.message is not msg]

    def _drop_rest(self, total: int, degradations: list[str]) -> None:
        """Last resort: what is left is not text (tool-call arguments, names)."""
        while total > self.budget and self.groups:
            group = self.groups.pop(0)
            degradations.append(f"dropped {len(group)} more messages (non-text parts)")
            total = self.total()
        while total > self.budget and self.blocks:
            unprotected = [p for p in self.blocks if p.name not in PROTECTED_BLOCKS]
            if not unprotected:  # cannot happen: build() refuses budgets below the protected floor
                break
            part = unprotected[0]
            self.blocks.remove(part)
            degradations.append(f"dropped block {part.name}")
            total = self.total()

    def report(
        self, final: list[Message], degradations: list[str], pairing: PairingReport
    ) -> ContextReport:
        rows = [(p.name.value, self.counter.count_message(p.message)) for p in self.blocks]
        convo = final[len(self.blocks):]
        if convo:
            rows.append((f"messages ({len(convo)})", sum(self.counter.count_message(m) for m in convo)))
        tools = self.counter.count_messages([], self.tools) - self.counter.count_messages([])
        if tools:
            rows.append(("tool schemas", tools))
        rows.append(("reply priming", self.counter.count_messages([])))
        total = self.counter.count_messages(final, self.tools)
        return ContextReport(rows, total, self.budget, degradations, pairing)


def _level(sizes: list[int], excess: int) -> int:
    """The largest height h with sum(max(0, t - h)) >= `excess` over `sizes` (tokens): cutting
    every part longer than h down to h removes at least `excess` tokens."""
    ordered = [*sorted(sizes, reverse=True), 0]
    top = 0
    for k in range(1, len(ordered)):
        top += ordered[k - 1]
        h = (top - excess) // k
        if h >= ordered[k]:
            return max(0, h)
    return 0


def _without_images(messages: list[Message]) -> list[Message]:
    """`messages` with image parts replaced by the placeholder (images are dropped first)."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = [{"type": "text", "text": IMAGE_PLACEHOLDER}
                     if isinstance(p, dict) and p.get("type") in IMAGE_TYPES else p for p in content]
            m = {**m, "content": parts}
        out.append(m)
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _check_request(system_prompt: Any, tools: Any) -> list[ToolSchema] | None:
    """Refuse what the model API could not be sent (the prompt is built for a real request);
    returns the tool schemas as a list (None when there are none)."""
    if system_prompt is not None:
        require_text("system_prompt", system_prompt)
    return check_tools(tools)
