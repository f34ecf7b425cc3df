"""ContextBuilder: the ONLY place that assembles a prompt — every part counted, never over budget.

Building is read-only: the same stored state in gives the same messages out, nothing is written
and no model is called (``Session.context``, ``mindpalace context``). Making room first — the
consolidation of older messages into history.jsonl — is the agent path's explicit turn call,
``Session.prepare``, which runs the consolidator and then this builder.

Order of the prompt (roles from :mod:`mindpalace.blocks`, then the conversation):

0. user corrections (seed 004, newest first, at the very top)               — system
1. system prompt (given, else the session's latest ``system`` message, archived or not) — system
2. protected constraints (seed 004, I7)                                     — system
3. working checkpoint (seed 003)                                            — memory
3a. knowledge: SOUL, USER, MEMORY, L0, L1 files (seeds 002/003, under
    ``knowledge.prompt_share`` of the budget; :mod:`mindpalace.knowledge.block`)  — memory
4. memory index (seed 000)                                                  — memory
5. "Summarized memory (compressed from earlier steps)" (seed 000 summary tier) — memory
6. recent steps, 7. pending steps (seed 000)                                — memory
8. the last ``<summary>`` lines (seed 003)                                  — memory
9. archived context summary (seed 002)                                      — memory
10. recalled memory for the current query (seed 001 / 004, :mod:`mindpalace.recalled`) — memory
11. the dates of the conversation messages shown                            — memory
12. the last messages (after the consolidation cursor); in a conversation of more than
    ``knowledge.l1_reinject_every_turns`` user turns, the L1 index is shown again (a memory
    exchange) before the user turn that opened the current window of that many turns
    (seed 003: L1 re-injected every 10 turns once it has scrolled far up)

Only the authority blocks speak as ``system``; memory blocks are quoted, attributed data, and
they travel together (:func:`~mindpalace.blocks.memory_exchange`): by default ONE synthetic
read-only ``memory`` tool exchange (assistant call ``mp-memory-1`` + tool result, one unit, I1)
whose result holds every memory block in its own ``<memory source=…>`` envelopes, or one marked
``user`` message with ``[context] memory_role = "user"`` — the exchange's shell is paid once,
not once per block. Report rows stay per block: each row is what its block adds to the prompt
(the first block's row carries the shell), and the rows sum exactly to the total.

Below ``context.compact_framing_below_tokens`` (a small prompt) the memory is framed compactly
(:meth:`ContextBuilder.compact`): shorter headings of the recalled memory, the message dates and
the archived ranges not shown, date lines without their separator, no ``…`` line where recalled
messages were left out (the date line's references say so) and relative-date notes without
their ``dates:`` label — the same items, quoted, attributed, dated and with their references.

Every part is counted exactly with ``counter.count_messages(final_messages, tools)`` (I9: tool
schemas and reply priming included). The recalled-memory block may fill up to
``context.recall_share`` of the budget (one record at most ``1 / context.recall_min_items`` of
that room: a longer one shows its best-matching excerpt and its reference, so a small prompt
still holds several records; tokens fitting leaves unused — a whole message dropped for a few
tokens' excess — go to it as well, and above its share only when the conversation after the
cursor is shown whole); it is not a fixed part (consolidation does not archive
to make room for it): the oldest conversation messages give way to it, and they stay stored and
recallable. When recall has more records for the query than that room, the archived summary
(9) gives way too: it is shown under ``context.summary_share_beside_recall`` of the budget (the
ranges it hides are named, to be read back) and the recalled block gets the tokens it freed. When the prompt would exceed the budget it degrades in the order of seed 000's
``cut_messages``: drop images, drop the oldest messages (whole tool groups, never a call without
its results — I1), truncate the tails of the longest remaining blocks to a common level (the
recalled block is re-packed under that level instead: its lowest-ranked items go, whole, one by
one, and it keeps its best item while any other part still has text to cut — a level below one
item no longer drops the whole block; a block dropped anyway comes back when fitting leaves room
for its best items); each degradation is named in the report. The conversation's newest user
message — the request the prompt answers — is cut last: whole while it is at most half the
budget, else never below head + tail + the note naming its reference (:func:`request_floor`); a
budget that cannot hold that beside the parts never cut is refused with ContextBudgetError
naming it, instead of a prompt whose question is empty, a bare head or gone. The final
messages always go through :func:`~mindpalace.session.pairing.repair_pairing`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol, TypeGuard

from mindpalace.blocks import (
    AUTHORITY_BLOCKS,
    BLOCK_ORDER,
    PROTECTED_BLOCKS,
    Block,
    MemoryRole,
    Message,
    ToolSchema,
    block_messages,
    check_tools,
    is_memory_message,
    memory_exchange,
    refuse_memory_tool_name,
    tool_names,
)
from mindpalace.checks import require_int
from mindpalace.errors import ContextBudgetError, ValidationError
from mindpalace.recalled import MemoryRecaller, RecalledItem
from mindpalace.session.archived import shown_entries
from mindpalace.session.consolidator import ConsolidationResult, Consolidator
from mindpalace.session.messages import MessageLog, validate_messages
from mindpalace.session.observations import MIN_SHOWN_TOKENS, govern, head_and_tail
from mindpalace.session.pairing import PairingReport, repair_pairing, tool_groups
from mindpalace.settings import ContextSettings, SessionSettings
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
MAX_QUERIES: Final = 16  # recalled-block queries per build: each is a hybrid search (twice on a re-pack)
FIRST_LOAD_MESSAGES: Final = 64  # tail messages read first; doubled until the budget is passed
_DATES_ROUNDS: Final = 4  # the dates note is re-made while fitting drops more messages
_FLOOR_STEP: Final = 8  # tokens: finding the cap the recalled block's best item packs under
_MIN_TOP_UP: Final = 12  # unused tokens worth a re-pack of the recalled block (the smallest item)


@dataclass
class ContextReport:
    """What went into a prompt.

    Attributes:
        blocks: ``(name, tokens)`` per part in prompt order (a memory block's row counts its
            whole synthetic exchange: call + result), plus ``messages (n)``, ``tool schemas``
            and ``reply priming``; the tokens sum to `total_tokens`.
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
        recalled: the items of the recalled-memory block, best first: ref, tier, score, why
            they matched, tokens (of their envelope), date and source.
        queries: the queries the block was recalled for (empty when there was none).
        knowledge: what ``Session.prepare`` noticed in the knowledge files before building
            (hand edits committed or refused, interrupted writes finished); empty for a pure
            build.
    """

    blocks: list[tuple[str, int]]
    total_tokens: int
    budget_tokens: int
    degradations: list[str] = field(default_factory=list)
    pairing: PairingReport = field(default_factory=PairingReport)
    consolidation: ConsolidationResult | None = None
    observations: list[str] = field(default_factory=list)
    recalled: list[RecalledItem] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)
    knowledge: list[str] = field(default_factory=list)


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


class KnowledgeSource(Protocol):
    """The knowledge block of a session (read-only; :class:`mindpalace.knowledge.block.KnowledgePrompt`)."""

    share: float
    """Share of the budget the block may fill."""
    reinject_every_turns: int
    """L1 is shown again in a conversation of more than this many user turns."""

    def render(self, cap_tokens: int) -> str:
        """The block text under `cap_tokens` tokens ('' = no block)."""
        ...

    def l1_reminder(self, cap_tokens: int) -> str | None:
        """The L1 index again, or None."""
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

    def archived_summary_under(self, cap_tokens: int, *, compact: bool = False) -> str | None:
        """The archived-context block under at most `cap_tokens` tokens (None = nothing
        archived); `compact`: hidden ranges named on the header's line (a small prompt)."""
        return self.consolidator.summary_text_under(cap_tokens, compact=compact)

    def newest_user_text(self, before: int) -> str:
        """The text of the newest ``user`` message stored before index `before` (archived or
        not), looking back at most ``_USER_LOOKBACK_MESSAGES`` messages; "" when none."""
        last = before - 1
        stop = max(0, last - _USER_LOOKBACK_MESSAGES)
        while last > stop:
            first = max(stop + 1, last - 49)
            for m in reversed(self.messages.list(from_index=first, to_index=last)):
                if m.message.get("role") == "user" and (text := _text(m.message.get("content")).strip()):
                    return text
            last = first - 1
        return ""


_REQUEST_SHARE: Final = 0.5  # the newest user message up to this share of the budget is cut last
_USER_LOOKBACK_MESSAGES: Final = 1_000  # a tool loop longer than this has lost its request anyway


def request_floor(counter: TokenCounter, text: str, ref: str | None) -> int:
    """Content tokens the newest user message keeps at least: all of `text` when that is
    smaller, else the smallest cut that still reads (head + tail of ``MIN_SHOWN_TOKENS`` each
    side, twice, and the note saying how much was cut and, with `ref`, where to read it whole).
    Below it the builder refuses the budget (ContextBudgetError) instead of sending a prompt
    whose question is empty, a bare head or gone."""
    whole = counter.count(text)
    where = f"; in full as {ref}, read it with read_files" if ref else ""
    note = MESSAGE_CUT_NOTE.format(tokens=whole, where=where)  # the most digits it can need
    return min(whole, counter.count(note) + 4 * MIN_SHOWN_TOKENS)


class Repack(Protocol):
    """Re-pack the recalled block under `cap_tokens` (tokens of its text) leaving out the
    session's messages `exclude`: (text, items); ``("", [])`` when nothing fits. `each`
    (tokens) caps what one item shows below the build's own item cap (its best-matching
    excerpt when longer); None = the build's item cap. `only`: pack these items instead of
    every candidate."""

    def __call__(
        self, cap_tokens: int, exclude: frozenset[int], each: int | None = None,
        only: Sequence[RecalledItem] | None = None,
    ) -> tuple[str, list[RecalledItem]]: ...


@dataclass
class _Part:
    name: Block
    text: str
    repack: Repack | None = None  # the recalled block: shrinks by whole items
    items: list[RecalledItem] = field(default_factory=list)
    exclude: frozenset[int] = frozenset()  # messages shown verbatim (recalled block)
    cap: int = 0  # tokens its text may have (recalled block)
    skip: frozenset[str] = frozenset()  # refs another block shows (recalled block): never repeated


def _shown_elsewhere(parts: Sequence[_Part]) -> frozenset[str]:
    """``history:<N>`` refs whose summary the archived block among `parts` shows as its own
    range: the recalled block leaves them out (the same text twice in one prompt)."""
    archived = next((p.text for p in parts if p.name is Block.ARCHIVED_SUMMARY), "")
    return frozenset(f"history:{n}" for n in shown_entries(archived)) if archived else frozenset()


def _render(parts: Sequence[_Part], role: MemoryRole) -> list[Message]:
    """The messages of `parts` in order: an authority block is its ``system`` message; each run
    of consecutive memory blocks is ONE exchange (:func:`~mindpalace.blocks.memory_exchange`,
    numbered ``mp-memory-1`` …), so the exchange's shell is paid once, not once per block."""
    out: list[Message] = []
    run: list[tuple[Block, str]] = []
    seq = 0

    def flush() -> None:
        nonlocal seq
        if run:
            seq += 1
            out.extend(memory_exchange(run, memory_role=role, seq=seq))
            run.clear()

    for p in parts:
        if p.name in AUTHORITY_BLOCKS:
            flush()
            out.extend(block_messages(p.name, p.text))
        else:
            run.append((p.name, p.text))
    flush()
    return out


def _part_tokens(parts: Sequence[_Part], role: MemoryRole, counter: TokenCounter) -> list[int]:
    """Tokens each part adds to the prompt (its report row): the count of the rendered parts
    up to it minus the count up to the one before, so the rows sum exactly to the rendered
    messages' tokens (a shared exchange's shell is in the row of its first block)."""
    out: list[int] = []
    before = 0
    for k in range(1, len(parts) + 1):
        now = sum(counter.count_message(m) for m in _render(parts[:k], role))
        out.append(now - before)
        before = now
    return out


class ContextBuilder:
    """Builds the prompt of one session under a token budget. Never writes.

    Example:
        >>> built = ContextBuilder(sources, counter).build(4_000, system_prompt="You plan trips.")  # doctest: +SKIP
        >>> built.report.total_tokens <= 4_000                                                   # doctest: +SKIP
        True

    Args:
        sources: the session's memory blocks and stored messages (:class:`ContextSources`).
        counter: the token counter (I9).
        recaller: the recalled-memory component (None = no recalled-memory block and no
            message dates).
        settings: ``context`` settings (memory role, recall share).
        governance: ``[session]`` settings of tool-result governance (``tool_result_*``).
        knowledge: the knowledge block's source (None = no knowledge block).
    """

    def __init__(
        self,
        sources: ContextSources,
        counter: TokenCounter,
        recaller: MemoryRecaller | None = None,
        settings: ContextSettings | None = None,
        governance: SessionSettings | None = None,
        knowledge: KnowledgeSource | None = None,
    ) -> None:
        self.knowledge = knowledge
        self.sources = sources
        self.counter = counter
        self.recaller = recaller
        self.settings = settings or ContextSettings()
        self.governance = governance or SessionSettings()

    def build(
        self,
        budget_tokens: int,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        messages: Sequence[Message] | None = None,
        query: str | Sequence[str] | None = None,
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
            query: what the recalled-memory block is recalled for: one text or several;
                None = the newest user message of the conversation (of the stored session
                when `messages` is None, even one a tool loop has archived).

        Returns:
            A :class:`BuiltContext` whose ``report.total_tokens <= budget_tokens``.

        Stored tool results are governed first (:mod:`mindpalace.session.observations`: a huge
        one shown as head + tail + its ``message:<N>`` reference, old ones masked the same way;
        named in ``report.observations``); a message the budget still forces to be cut keeps
        its head and tail and names its reference.

        Raises:
            ContextBudgetError: the budget is below the irreducible minimum: tool schemas +
                reply priming + the system prompt and the protected constraints and user
                corrections (never cut, I7) + the conversation's last message, when it is a
                user message, at its :func:`request_floor` (never dropped, emptied or cut
                past its head, tail and reference).
            ValidationError: `budget_tokens` is not a positive int; `system_prompt` is not
                text; `tools` is not a list of JSON objects, or names a tool ``memory`` while
                ``memory_role`` is ``"tool"`` (the memory blocks' calls use that name); a given
                message is malformed; `query` is not text or a list of texts.
            ProviderError: the embedder failed to embed the query.
        """
        budget = require_int("budget_tokens", budget_tokens)
        tool_list = _check_request(system_prompt, tools, self.settings.memory_role)
        queries = check_queries(query)
        convo_given = None if messages is None else validate_messages(messages)
        if convo_given is None and system_prompt is None:
            system_prompt = self._stored_system_prompt()
        blocks = self._blocks(budget)
        self._check_floor(budget, blocks, tool_list, system_prompt)
        refs: list[str | None]
        if convo_given is None:
            # Messages are dropped before any block is cut, so only the tail that fits beside
            # the blocks can survive: read just that much (plus one chunk) from the store.
            fixed = list(blocks)
            if system_prompt is not None:
                fixed.append(_Part(Block.SYSTEM_PROMPT, system_prompt))
            room = budget - self.counter.count_messages(self._flat(fixed), tool_list)
            convo, unloaded, first = self._load_messages(max(0, room))
            refs = [f"message:{first + k}" for k in range(len(convo))]
        else:
            convo, unloaded, refs = convo_given, 0, [None] * len(convo_given)
        convo, observations = self._govern(convo, refs)
        ref_of = {id(m): r for m, r in zip(convo, refs, strict=True) if r}
        index_of = {key: int(r.removeprefix("message:")) for key, r in ref_of.items()}
        lifted = [m for m in convo if m.get("role") == "system"]
        convo = [m for m in convo if m.get("role") != "system"]
        lifted_prompt = system_prompt is None and bool(lifted)
        if lifted_prompt:
            system_prompt = _text(lifted[-1].get("content"))
        convo, pairing = repair_pairing(convo)
        if convo or lifted_prompt:  # one check of the lifted system prompt and the request
            self._check_floor(budget, blocks, tool_list, system_prompt,
                              request=(convo[-1], ref_of.get(id(convo[-1]))) if convo else None)
        convo = self._with_l1_reminder(convo, budget)
        if system_prompt:
            at = 1 if blocks and blocks[0].name is Block.CORRECTIONS else 0  # corrections stay on top
            blocks.insert(at, _Part(Block.SYSTEM_PROMPT, system_prompt))
        asked_in: frozenset[int] = frozenset()  # the request the query was taken from (verbatim)
        if queries is None:
            newest = next((m for m in reversed(convo) if m.get("role") == "user"), None)
            queries = [q] if newest is not None and (q := _text(newest.get("content")).strip()) else []
            if queries and newest is not None and id(newest) in index_of:
                asked_in = frozenset({index_of[id(newest)]})
            older: Callable[[int], str] | None = getattr(self.sources, "newest_user_text", None)
            if newest is None and older is not None and convo_given is None and (q := older(first)):
                queries = [q]  # a tool loop archived this turn's request: it is still the question
        loaded = frozenset(index_of.values())
        recalled = self._recalled_part(queries, budget, loaded, blocks, asked_in)
        if recalled is not None:
            self._summary_beside_recall(blocks, recalled, budget)
            blocks.append(recalled)
        fitter = _Fitter(self.counter, blocks, convo, tool_list, budget, self.settings.memory_role, ref_of)
        fitter.dropped_messages += unloaded
        degradations: list[str] = []
        fitter.fit(degradations)
        if recalled is None and _kept(fitter, index_of) != loaded:
            # every candidate was loaded, but fitting dropped some: those may be recalled now
            recalled = self._recalled_part(queries, budget, _kept(fitter, index_of), fitter.blocks, asked_in)
            if recalled is not None:
                fitter.blocks.append(recalled)
                fitter.fit(degradations)
        if recalled is not None and recalled in fitter.blocks and _kept(fitter, index_of) != recalled.exclude:
            # messages that gave way to the block may be recalled into it (same size or less)
            assert recalled.repack is not None
            kept = _kept(fitter, index_of)
            text, items = recalled.repack(self.counter.count(recalled.text), kept)
            if text:
                recalled.text, recalled.items, recalled.exclude = text, items, kept
        if recalled is not None and recalled in fitter.blocks and recalled.skip != (
                shown := _shown_elsewhere(fitter.blocks)):
            # fitting cut or dropped the archived block: what it no longer shows may be recalled
            assert recalled.repack is not None
            recalled.skip = shown
            text, items = recalled.repack(self.counter.count(recalled.text), recalled.exclude)
            if text:
                recalled.text, recalled.items = text, items
        self._add_dates(fitter, index_of, degradations)
        whole = not unloaded and not fitter.cut_messages and fitter.messages() == len(convo)
        self._top_up(fitter, recalled, whole, degradations)
        final, check = repair_pairing(fitter.flat())
        if not check.ok:  # cannot happen with whole-group drops; kept as a guard for I1
            pairing.closed_calls += check.closed_calls
            pairing.dropped_results += check.dropped_results
        report = fitter.report(final, degradations, pairing)
        report.observations = observations
        report.queries = list(queries)
        report.recalled = next((p.items for p in fitter.blocks if p.name is Block.RECALLED), [])
        return BuiltContext(final, report, tool_list)

    def check_request(
        self,
        budget_tokens: int,
        text: str,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
    ) -> None:
        """Refuse, before it is stored, a user message `text` that the next prompt under
        `budget_tokens` could not show: :meth:`build` would raise ContextBudgetError for it as
        the newest message (beside the parts never cut) — and would again on every later
        turn that resumes it. Read-only; nothing is written.

        Raises:
            ContextBudgetError: as :meth:`build`, naming the message and the least it needs.
            ValidationError: `budget_tokens`, `system_prompt` or `tools` are malformed.
        """
        budget = require_int("budget_tokens", budget_tokens)
        tool_list = _check_request(system_prompt, tools, self.settings.memory_role)
        if system_prompt is None:
            system_prompt = self._stored_system_prompt()
        _, last = self.sources.message_range()
        self._check_floor(budget, self._blocks(budget), tool_list, system_prompt,
                          request=({"role": "user", "content": text}, f"message:{last + 1}"))

    def fixed_tokens(
        self,
        budget_tokens: int,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
    ) -> int:
        """Tokens of every fixed part of the prompt :meth:`build` would make (system prompt and
        memory blocks, each as its messages, the message dates of the live messages included)
        except the archived summary, which the consolidator sizes itself, and the recalled
        memory, which takes its share from the conversation's room. Read-only; raises what :meth:`build` raises for
        these arguments, so ``Session.prepare`` refuses a bad request before it writes
        anything."""
        first, _ = self.sources.message_range()
        return self.fixed_tokens_from(budget_tokens, system_prompt=system_prompt, tools=tools)(first)

    def fixed_tokens_from(
        self,
        budget_tokens: int,
        *,
        system_prompt: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
    ) -> Callable[[int], int]:
        """:meth:`fixed_tokens` as a function of where the live messages start: ``f(first)`` =
        the fixed part's tokens when the messages ``first``…last are the ones in the prompt.
        The message-dates note covers only those, so it shrinks as consolidation archives
        (the consolidator re-measures its fixed part after a cut with it, instead of counting
        the dates of messages it just archived); ``first`` past the last message = no note.
        The blocks are assembled once here; each call only counts. Raises what :meth:`build`
        raises for these arguments."""
        budget = require_int("budget_tokens", budget_tokens)
        tool_list = _check_request(system_prompt, tools, self.settings.memory_role)
        if system_prompt is None:
            system_prompt = self._stored_system_prompt()
        blocks = self._blocks(budget)
        first, last = self.sources.message_range()
        newest = self.sources.read_messages(last, last) if first <= last else []
        self._check_floor(budget, blocks, tool_list, system_prompt,
                          request=(newest[-1], f"message:{last}") if newest else None)
        compact = self.compact(budget)
        fixed = [p for p in blocks if p.name is not Block.ARCHIVED_SUMMARY]
        if system_prompt is not None:
            fixed.append(_Part(Block.SYSTEM_PROMPT, system_prompt))

        # The consolidator asks for several `first`s over one range (a binary search over its
        # cut): the timestamps are read once for the widest range asked, each answer counted once.
        memo: dict[tuple[int, int], int] = {}
        stamps: dict[int, datetime] = {}
        read = (0, -1)  # the index range whose stamps `stamps` holds

        def tokens(first: int) -> int:
            nonlocal read, stamps
            _, last = self.sources.message_range()
            if (first, last) in memo:
                return memo[first, last]
            parts = list(fixed)
            if self.recaller is not None and first <= last:
                if not read[0] <= first <= last <= read[1]:
                    lo = first if read[1] < read[0] else min(first, read[0])
                    stamps = self.recaller.message_stamps(lo, last)
                    read = (lo, last)
                dates = self.recaller.message_dates(range(first, last + 1), stamps, compact=compact)
                if dates:
                    parts.append(_Part(Block.MESSAGE_DATES, dates))
            memo[first, last] = sum(self.counter.count_message(m) for m in self._flat(parts))
            return memo[first, last]

        return tokens

    def _flat(self, parts: Sequence[_Part]) -> list[Message]:
        return _render(parts, self.settings.memory_role)

    def _stored_system_prompt(self) -> str | None:
        # The session's system message, even when it was archived long ago (seed 002: the
        # system prompt is never consolidated away).
        latest = self.sources.system_message()
        return _text(latest.get("content")) if latest else None

    def _check_floor(
        self, budget: int, blocks: list[_Part], tools: list[ToolSchema] | None, system_prompt: str | None,
        *, request: tuple[Message, str | None] | None = None,
    ) -> None:
        """Raise ContextBudgetError when `budget` cannot hold the parts never cut (tool schemas,
        reply priming, protected blocks, the system prompt) — and, given `request` (the
        conversation's last message and its reference), the newest user message at its
        :func:`request_floor`: a prompt without the question it is built to answer is refused,
        not sent with that message dropped, emptied or cut past reading back."""
        minimum = self.counter.count_messages([], tools)
        if budget < minimum:
            raise ContextBudgetError(budget, minimum)
        parts = [p for p in blocks if p.name in PROTECTED_BLOCKS]
        if system_prompt:
            parts.append(_Part(Block.SYSTEM_PROMPT, system_prompt))
        def sizes() -> str:  # each part's own tokens, without the tools (for the error only)
            priming = self.counter.count_messages([])
            return ", ".join(f"{p.name.value} {self.counter.count_messages(self._flat([p])) - priming}"
                             for p in parts)

        protected = self.counter.count_messages(self._flat(parts), tools) if parts else minimum
        if budget < protected:
            raise ContextBudgetError(  # I7: these are never cut, so they must fit whole
                budget, protected, f"reply priming and tool schemas {minimum}, {sizes()} tokens, which "
                "are never cut; shorten them"
            )
        message, ref = request if request is not None else ({}, None)
        text = request_text(message.get("content")) if message.get("role") == "user" else None
        if not text or is_memory_message(message):
            return
        least = request_floor(self.counter, text, ref)
        shell = self.counter.count_message({"role": "user", "content": ""})
        floor = protected + shell + least
        if budget < floor:
            whole = self.counter.count(text)
            kept = "whole" if least == whole else "as head + tail + the note naming it"
            name = "newest user message" + (f" ({ref})" if ref else "")
            raise ContextBudgetError(
                budget, floor, f"reply priming and tool schemas {minimum}, {sizes() + ', ' if parts else ''}"
                f"the {name} {whole} tokens, which needs at least {shell + least} shown {kept}; "
                "a prompt is never sent without the request it answers — shorten it"
            )

    def _govern(self, convo: list[Message], refs: Sequence[str | None]) -> tuple[list[Message], list[str]]:
        """Tool-result governance (:func:`~mindpalace.session.observations.govern`) and its
        report lines."""
        s = self.governance
        out, report = govern(convo, refs, self.counter, max_tokens=s.tool_result_max_tokens,
                             mask_after_turns=s.tool_result_mask_after_turns,
                             masked_tokens=s.tool_result_masked_tokens)
        return out, report.lines(s.tool_result_mask_after_turns)

    def compact(self, budget: int) -> bool:
        """Whether a prompt of `budget` tokens gets the compact framing (below
        ``context.compact_framing_below_tokens``): shorter headings of the recalled memory,
        the message dates and the archived ranges not shown, so more of a small budget holds
        memory. The memory is the same — quoted, attributed, dated, with its references."""
        return budget < self.settings.compact_framing_below_tokens

    def _blocks(self, budget: int) -> list[_Part]:
        """Every memory block present, in prompt order (the system prompt is inserted later);
        the knowledge block packed under its share of `budget`; the archived summary in its
        compact form when :meth:`compact` (the same ranges shown and hidden)."""
        texts = dict(self.sources.memory_blocks())
        archived = texts.get(Block.ARCHIVED_SUMMARY)
        under: Callable[..., str | None] | None = getattr(self.sources, "archived_summary_under", None)
        if archived and under is not None and self.compact(budget):
            texts[Block.ARCHIVED_SUMMARY] = under(max(1, self.counter.count(archived)), compact=True) or archived
        if self.knowledge is not None and self.knowledge.share > 0:
            text = self.knowledge.render(self._knowledge_cap(budget))
            if text:
                texts[Block.KNOWLEDGE] = text
        return [_Part(b, texts[b]) for b in BLOCK_ORDER if texts.get(b)]

    def _knowledge_cap(self, budget: int) -> int:
        """Tokens the knowledge block's text may have: its share of the budget less the
        synthetic exchange that carries it."""
        assert self.knowledge is not None
        shell = sum(self.counter.count_message(m) for m in self._flat([_Part(Block.KNOWLEDGE, "")]))
        return int(self.knowledge.share * budget) - shell

    def _with_l1_reminder(self, convo: list[Message], budget: int) -> list[Message]:
        """`convo` with the L1 index shown again before the user turn that opened the current
        window of ``reinject_every_turns`` turns, when there are more turns than that (the
        spot moves once per window, so the prompt prefix before it stays stable)."""
        if self.knowledge is None or self.knowledge.share <= 0:
            return convo
        users = [i for i, m in enumerate(convo) if m.get("role") == "user" and not is_memory_message(m)]
        every = self.knowledge.reinject_every_turns
        if len(users) <= every:
            return convo
        text = self.knowledge.l1_reminder(self._knowledge_cap(budget))
        if not text:
            return convo
        at = users[((len(users) - 1) // every) * every]
        # seq 0: the blocks on top are numbered from 1, so the id is unique in the prompt
        reminder = block_messages(Block.KNOWLEDGE, text, memory_role=self.settings.memory_role, seq=0)
        return [*convo[:at], *reminder, *convo[at:]]

    def _recalled_part(
        self, queries: list[str], budget: int, in_prompt: frozenset[int], others: Sequence[_Part],
        asked_in: frozenset[int] = frozenset(),
    ) -> _Part | None:
        """The recalled-memory block for `queries`, packed under ``recall_share × budget``
        (what it adds to the prompt beside the blocks `others`: its text, and the memory
        exchange's shell when no other memory block carries one), leaving out the messages
        loaded for the conversation; `asked_in`: the messages the queries were taken from
        (:meth:`~mindpalace.recalled.MemoryRecaller.candidates`)."""
        if self.recaller is None or not queries or self.settings.recall_share <= 0:
            return None
        items = self.recaller.candidates(queries, asked_in=asked_in)
        if not items:
            return None
        cap = int(self.settings.recall_share * budget) - self._added_tokens(others, Block.RECALLED)
        recaller = self.recaller
        compact = self.compact(budget)
        item_cap = recaller.item_cap(cap)  # fixed per build: re-packing under a smaller cap keeps the items' form

        part = _Part(Block.RECALLED, "", exclude=in_prompt, cap=cap, skip=_shown_elsewhere(others))

        def repack(
            cap_tokens: int, exclude: frozenset[int], each: int | None = None,
            only: Sequence[RecalledItem] | None = None,
        ) -> tuple[str, list[RecalledItem]]:
            pool = items if only is None else only
            keep = [i for i in pool if i.ref not in part.skip] if part.skip else pool
            return recaller.pack(keep, cap_tokens, exclude_messages=exclude,
                                 item_cap=item_cap if each is None else min(item_cap, each), compact=compact)

        part.repack = repack
        part.text, part.items = repack(cap, in_prompt)
        return part if part.text else None

    def _summary_beside_recall(self, blocks: list[_Part], recalled: _Part, budget: int) -> None:
        """Shrink the archived summary in `blocks` to ``summary_share_beside_recall × budget``
        when the recalled block has more records than its room (packing it with the summary's
        tokens added would show more items): the query's verbatim records then take the room
        of the general summary, whose hidden ranges stay named. Otherwise nothing changes."""
        under: Callable[..., str | None] | None = getattr(self.sources, "archived_summary_under", None)
        at = next((i for i, p in enumerate(blocks) if p.name is Block.ARCHIVED_SUMMARY), None)
        if under is None or at is None or recalled.repack is None or self.settings.summary_share_beside_recall >= 1:
            return
        cap = max(1, int(self.settings.summary_share_beside_recall * budget))
        now = self.counter.count(blocks[at].text)
        if now <= cap:
            return
        _, more = recalled.repack(recalled.cap + now - cap, recalled.exclude)
        if len(more) <= len(recalled.items):
            return  # recall has nothing more to show: the summary keeps its room
        text = under(cap, compact=True) if self.compact(budget) else under(cap)
        if text:
            blocks[at] = _Part(Block.ARCHIVED_SUMMARY, text)
        else:
            del blocks[at]
        recalled.skip = _shown_elsewhere(blocks)  # the ranges now hidden may be recalled
        freed = now - self.counter.count(text) if text else now + self._added_tokens(
            [*blocks, recalled], Block.ARCHIVED_SUMMARY)
        packed, items = recalled.repack(recalled.cap + freed, recalled.exclude)
        if packed:
            recalled.text, recalled.items, recalled.cap = packed, items, recalled.cap + freed

    def _top_up(self, fitter: _Fitter, recalled: _Part | None, whole: bool, degradations: list[str]) -> None:
        """Give the recalled block the tokens fitting left unused (a whole message dropped for
        a few tokens' excess, a re-pack that came out short): re-packed under its size plus
        that slack — above its ``recall_share`` cap only when the conversation after the
        cursor is shown `whole` (nothing else wants the room) — and kept only when the prompt
        still fits (exact count). A larger cap keeps every item the smaller one took (greedy
        by rank), so this mostly adds the next-ranked items. A block fitting dropped whole
        (its envelope and shell counted before its items could be trimmed) comes back when
        the room left holds its best items."""
        if recalled is None or recalled.repack is None:
            return
        dropped = recalled not in fitter.blocks
        slack = fitter.budget - fitter.total()
        if dropped:
            slack -= self._added_tokens(fitter.blocks, Block.RECALLED)
        size = 0 if dropped else self.counter.count(recalled.text)
        room = size + slack if whole else min(size + slack, recalled.cap)
        if slack < _MIN_TOP_UP or room <= size:
            return
        before = recalled.text, recalled.items
        for cap in (room, room - slack // 3, room - 2 * slack // 3):  # packing is greedy, not monotone
            text, items = recalled.repack(cap, recalled.exclude)
            if not text or self.counter.count(text) <= size:
                continue
            recalled.text, recalled.items = text, items
            if dropped:
                fitter.insert(recalled)
            if fitter.total() <= fitter.budget:  # estimates are per item; the count is exact
                if dropped:
                    degradations.append(f"re-packed {Block.RECALLED.value} into the {slack} tokens left "
                                        f"({len(items)} items)")
                return
            recalled.text, recalled.items = before
            if dropped:
                fitter.blocks.remove(recalled)

    def _added_tokens(self, others: Sequence[_Part], block: Block) -> int:
        """Tokens an empty `block` adds to the prompt beside `others` (in prompt order): the
        memory exchange around it when it would be the only memory block, else the line
        joining it to the exchange it shares."""
        order = {b: i for i, b in enumerate(BLOCK_ORDER)}
        without = [p for p in others if p.name is not block]
        with_it = sorted([*without, _Part(block, "")], key=lambda p: order[p.name])
        return (sum(self.counter.count_message(m) for m in self._flat(with_it))
                - sum(self.counter.count_message(m) for m in self._flat(without)))

    def _add_dates(self, fitter: _Fitter, index_of: dict[int, int], degradations: list[str]) -> None:
        """The note of when the conversation messages shown were written; re-made while
        fitting drops more messages, left out if it cannot settle."""
        if self.recaller is None or not index_of:
            return
        compact = self.compact(fitter.budget)
        for _ in range(_DATES_ROUNDS):
            kept = _kept_in_order(fitter, index_of)
            fitter.set_part(Block.MESSAGE_DATES, self.recaller.message_dates(kept, compact=compact))
            fitter.fit(degradations)
            if _kept_in_order(fitter, index_of) == kept:
                return
        fitter.set_part(Block.MESSAGE_DATES, None)

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
                lo += 1
        return loaded, unloaded, lo


def _kept_in_order(fitter: _Fitter, index_of: dict[int, int]) -> list[int]:
    return [index_of[id(m)] for g in fitter.groups for m in g if id(m) in index_of]


def _kept(fitter: _Fitter, index_of: dict[int, int]) -> frozenset[int]:
    return frozenset(_kept_in_order(fitter, index_of))


class _Fitter:
    """Applies the degradations until the prompt fits; counts with the real counter."""

    def __init__(
        self,
        counter: TokenCounter,
        blocks: list[_Part],
        convo: list[Message],
        tools: list[ToolSchema] | None,
        budget: int,
        memory_role: MemoryRole,
        refs: Mapping[int, str] | None = None,
    ) -> None:
        self.counter = counter
        self.blocks = blocks
        self.groups = [convo[a:b] for a, b in tool_groups(convo)]
        self.tools = tools
        self.budget = budget
        self.role = memory_role
        self.refs = refs or {}  # id(message) → message:<N>, for stored messages
        self.dropped_messages = 0
        self.cut_messages = False  # a conversation message was cut to fit
        self.originals: dict[int, str] = {}  # id(message) → its text before the first cut
        users = [m for m in convo if m.get("role") == "user" and request_text(m.get("content"))]
        self.request = id(users[-1]) if users else None  # the newest user message: cut last

    def messages(self) -> int:
        """How many conversation messages are still in the prompt."""
        return sum(len(g) for g in self.groups)

    def flat(self) -> list[Message]:
        return _render(self.blocks, self.role) + [m for g in self.groups for m in g]

    def total(self) -> int:
        return self.counter.count_messages(self.flat(), self.tools)

    def set_part(self, name: Block, text: str | None) -> None:
        """Put, replace or (text None) remove the part `name`, in prompt order."""
        self.blocks = [p for p in self.blocks if p.name is not name]
        if text:
            self.insert(_Part(name, text))

    def insert(self, part: _Part) -> None:
        """Put `part` among the blocks in prompt order (there is no part of its name)."""
        order = {b: i for i, b in enumerate(BLOCK_ORDER)}
        at = next((i for i, p in enumerate(self.blocks) if order[p.name] > order[part.name]), len(self.blocks))
        self.blocks.insert(at, part)

    def fit(self, degradations: list[str]) -> None:
        if self.dropped_messages:
            degradations.append(f"dropped {self.dropped_messages} oldest messages (not loaded)")
            self.dropped_messages = 0
        total = self.total()
        if total <= self.budget:
            return
        total = self._drop_images(total, degradations)
        total = self._drop_oldest(total, degradations)
        if total > self.budget:
            total = self._join_text_parts(total, degradations)
        total = self._truncate(total, degradations)
        self._drop_rest(total, degradations)
        self._restore(degradations)

    def _restore(self, degradations: list[str]) -> None:
        """Give cut conversation messages back the room fitting left over, newest first.

        Cutting every part to one level in one pass does not know that emptying a memory
        block also frees its envelope, so a message (the user's request) could end cut or
        empty in a prompt that had room for it whole."""
        total = self.total()
        for msg in reversed([m for g in self.groups for m in g]):
            original = self.originals.get(id(msg))
            if total >= self.budget or original is None or msg.get("content") == original:
                continue
            before = msg["content"]
            whole = self.counter.count(original)
            keep = self.counter.count(before) + self.budget - total
            msg["content"] = original
            if keep < whole:
                self._cut(msg, f"message ({msg.get('role')})", whole, keep, self.counter.count(TRUNCATION_MARK), [])
            after = self.total()
            if after > self.budget or self.counter.count(msg["content"]) <= self.counter.count(before):
                msg["content"] = before  # a tokenizer seam: keep what fitted
                continue
            degradations.append(f"restored message ({msg.get('role')}) to {self.counter.count(msg['content'])} "
                                f"of {whole} tokens (room left after fitting)")
            total = after

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

    def _candidates(self) -> list[tuple[int, str, _Part | Message]]:
        """(content tokens, name, part or message) of every part whose text can be cut."""
        out: list[tuple[int, str, _Part | Message]] = [
            (self.counter.count(p.text), p.name.value, p) for p in self.blocks
            if p.name not in PROTECTED_BLOCKS  # I7: never cut, only dropped as the very last resort
        ]
        for group in self.groups:
            for msg in group:
                if isinstance(msg.get("content"), str) and msg["content"]:
                    out.append((self.counter.count(msg["content"]), f"message ({msg.get('role')})", msg))
        return [c for c in out if c[0] > 0]

    def _join_text_parts(self, total: int, degradations: list[str]) -> int:
        """Content parts that are all text (images already replaced) become one string, so they
        can be cut like any text: a message sent as parts was never cut, only dropped whole."""
        joined = 0
        for group in self.groups:
            for msg in group:
                content = msg.get("content")
                if isinstance(content, list) and (text := request_text(content)) is not None:
                    self.originals.setdefault(id(msg), text)
                    msg["content"] = text
                    joined += 1
        if not joined:
            return total
        degradations.append(f"joined the text parts of {joined} messages to cut them")
        return self.total()

    def _truncate(self, total: int, degradations: list[str]) -> int:
        """Cut the tails of the longest parts: the longest is cut down to the next longest,
        then both, … (one pass computes the common level), so every block keeps its head —
        for the newest-first memory index, its newest entries. The recalled block is cut
        like any part but by whole items, lowest-ranked first, and keeps its best item while
        the other parts can still give way (:func:`_level`'s floor): it is not dropped whole
        because the common level is below the size of one item."""
        mark = self.counter.count(TRUNCATION_MARK)
        cands = self._candidates()
        if total > self.budget and cands:
            sizes, excess = [c[0] for c in cands], total - self.budget
            floors = [self._floor(tokens, target) for tokens, _, target in cands]
            if sum(max(0, t - f) for t, f in zip(sizes, floors, strict=True)) < excess:
                # nothing else can keep its floor: every part may go but the request's least
                # (build() refused budgets that cannot hold it beside the protected parts)
                floors = [f if self._is_request(target) else 0
                          for f, (_, _, target) in zip(floors, cands, strict=True)]
            level = _level(sizes, excess, floors)
            for (tokens, name, target), floor in zip(cands, floors, strict=True):
                keep = max(level, floor)
                if tokens > keep:
                    self._cut(target, name, tokens, keep, mark, degradations)
            total = self.total()
        for _ in range(4 * (len(self.blocks) + 8)):  # exact fix-up for tokenizer seams; bounded
            if total <= self.budget:
                break
            cands = self._candidates()
            if not cands:
                break
            # the part with most text above its floor (the recalled block's best item), so the
            # block goes below that item only when nothing else is left to cut
            above = [(tokens - self._floor(tokens, target), tokens, name, target) for tokens, name, target in cands]
            room, tokens, name, target = max(above, key=lambda c: c[0])
            if room <= 0:
                others = [c for c in cands if not self._is_request(c[2])] or cands
                tokens, name, target = max(others, key=lambda c: c[0])
                room = tokens
            self._cut(target, name, tokens, tokens - min(room, total - self.budget), mark, degradations)
            total = self.total()
        return total

    def _is_request(self, target: _Part | Message) -> TypeGuard[Message]:
        return not isinstance(target, _Part) and id(target) == self.request

    def _floor(self, tokens: int, target: _Part | Message) -> int:
        """What fitting keeps of `target` while other parts can still give way: the newest
        user message (the request) whole when it is at most half the budget (a longer one is
        cut to the common level with the rest, head and tail kept), the recalled block its best
        item, others nothing."""
        if self._is_request(target):
            if tokens <= self.budget * _REQUEST_SHARE:
                return tokens
            return request_floor(self.counter, target["content"], self.refs.get(id(target)))
        return self._recalled_floor(target)

    def _recalled_floor(self, target: _Part | Message) -> int:
        """The smallest cap (tokens) under which the recalled block re-packs with its best
        item (packing estimates each item a little high, so a few tokens over the exact count
        of the block with that item alone); 0 for any other part or message."""
        if not (isinstance(target, _Part) and target.repack is not None and target.items):
            return 0
        best = target.items[:1]
        text, _ = target.repack(self.budget, target.exclude, only=best)
        exact = self.counter.count(text)
        for cap in range(exact, exact + 4 * _FLOOR_STEP, _FLOOR_STEP):
            if target.repack(cap, target.exclude, only=best)[0]:
                return cap
        return exact

    def _cut(
        self, target: _Part | Message, name: str, tokens: int, keep: int, mark: int, degradations: list[str]
    ) -> None:
        if isinstance(target, _Part) and target.repack is not None:  # recalled: whole items only
            text, items = target.repack(keep, target.exclude)
            if not text and target.items:  # its best item alone, else that item's best excerpt
                best = target.items[:1]
                text, items = target.repack(keep, target.exclude, only=best)
                if not text:
                    text, items = target.repack(keep, target.exclude, keep, only=best)
            if text:
                target.text, target.items = text, items
                degradations.append(f"shrank {name} from {tokens} to {self.counter.count(text)} tokens "
                                    f"({len(items)} items)")
            else:
                self.blocks = [p for p in self.blocks if p is not target]
                degradations.append(f"dropped block {name} ({tokens} tokens)")
            return
        if not isinstance(target, _Part):
            self.cut_messages = True
            self.originals.setdefault(id(target), target["content"])
            ref = self.refs.get(id(target))
            where = f"; in full as {ref}, read it with read_files" if ref else ""
            note = MESSAGE_CUT_NOTE.format(tokens=tokens - keep, where=where)
            if keep >= self.counter.count(note) + 4 * MIN_SHOWN_TOKENS:
                # a message's end matters as much as its head ("FINAL: 3 submodules failed")
                target["content"] = head_and_tail(target["content"], self.counter, keep, note)
                degradations.append(f"cut the middle of {name}{' ' + ref if ref else ''} from {tokens} "
                                    f"to {keep} tokens (head + tail kept)")
                return
        text = target.text if isinstance(target, _Part) else target["content"]
        if keep > mark:
            text = self.counter.truncate(text, keep - mark) + TRUNCATION_MARK
            degradations.append(f"truncated the tail of {name} from {tokens} to {keep} tokens")
        else:
            text = ""
            degradations.append(f"emptied {name} ({tokens} tokens)")
        if isinstance(target, _Part):
            target.text = text
            if not text:
                self.blocks = [p for p in self.blocks if p is not target]
        else:
            target["content"] = text

    def _drop_rest(self, total: int, degradations: list[str]) -> None:
        """Last resort: what is left is not text (tool-call arguments, names), or the envelopes
        and calls of memory blocks (a memory block goes whole: call and result together, I1)."""
        while total > self.budget and self.groups:
            at = next((i for i, g in enumerate(self.groups)  # the request's group goes last
                       if not any(id(m) == self.request for m in g)), None)
            if at is None:
                break
            group = self.groups.pop(at)
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
        while total > self.budget and self.groups:  # cannot happen either: build() checked the request
            group = self.groups.pop(0)
            degradations.append(f"dropped {len(group)} more messages (non-text parts)")
            total = self.total()

    def report(
        self, final: list[Message], degradations: list[str], pairing: PairingReport
    ) -> ContextReport:
        rows = [(p.name.value, tokens) for p, tokens in
                zip(self.blocks, _part_tokens(self.blocks, self.role, self.counter), strict=True)]
        convo = final[len(_render(self.blocks, self.role)):]
        if convo:
            rows.append((f"messages ({len(convo)})", sum(self.counter.count_message(m) for m in convo)))
        tools = self.counter.count_messages([], self.tools) - self.counter.count_messages([])
        if tools:
            rows.append(("tool schemas", tools))
        rows.append(("reply priming", self.counter.count_messages([])))
        total = self.counter.count_messages(final, self.tools)
        return ContextReport(rows, total, self.budget, degradations, pairing)


def _level(sizes: list[int], excess: int, floors: Sequence[int] | None = None) -> int:
    """The largest height h with sum(max(0, t - max(h, f))) >= `excess` over `sizes` (tokens)
    and their `floors` (0 when None): cutting every part longer than h down to h, but none
    below its floor, removes at least `excess` tokens; 0 when no h does."""
    lows = list(floors) if floors is not None else [0] * len(sizes)

    def removed(h: int) -> int:
        return sum(max(0, t - max(h, f)) for t, f in zip(sizes, lows, strict=True))

    lo, hi = 0, max(sizes, default=0)  # removed(lo) >= excess: the largest such h
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if removed(mid) >= excess:
            lo = mid
        else:
            hi = mid - 1
    return lo


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


def request_text(content: Any) -> str | None:
    """The text of a message as fitting cuts it: string content as is; content parts that are
    all text or images, with some text, joined by newlines (an image as
    :data:`IMAGE_PLACEHOLDER`); None for anything else (nothing to cut, e.g. an image alone)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        return None
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            return None
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") in IMAGE_TYPES:
            texts.append(IMAGE_PLACEHOLDER)
        else:
            return None
    joined = "\n".join(texts)
    return joined if any(t.strip() for t in texts if t != IMAGE_PLACEHOLDER) else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def check_queries(query: Any) -> list[str] | None:
    """`query` as a list of at most :data:`MAX_QUERIES` texts (None stays None: the newest user
    message is used).

    Raises:
        ValidationError: not a text or a list of texts, or more than MAX_QUERIES of them (each
            is a hybrid search); InvalidTextError: not storable text."""
    if query is None:
        return None
    queries = [query] if isinstance(query, str) else query
    if not isinstance(queries, list | tuple) or not all(isinstance(q, str) for q in queries):
        raise ValidationError(f"query must be a text or a list of texts, got {type(query).__name__}")
    if len(queries) > MAX_QUERIES:
        raise ValidationError(f"query: {len(queries)} queries given, at most {MAX_QUERIES} (each is "
                              "one hybrid search; join related ones into one text)")
    return [require_text("query", q) for q in queries]


def _check_request(system_prompt: Any, tools: Any, memory_role: MemoryRole) -> list[ToolSchema] | None:
    """Refuse what the model API could not be sent (the prompt is built for a real request),
    or a tool whose name the memory blocks' calls use; returns the tool schemas as a list
    (None when there are none)."""
    if system_prompt is not None:
        require_text("system_prompt", system_prompt)
    tool_list = check_tools(tools)
    refuse_memory_tool_name(tool_names(tool_list), memory_role)
    return tool_list
