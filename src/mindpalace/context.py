"""ContextBuilder: the ONLY place that assembles a prompt — every part counted, never over budget.

Order of the prompt (one system message per block, then the conversation):

0. user corrections (seed 004; :func:`_corrections_block`, newest first, at the very top)
1. system prompt (given, else the latest ``system`` message of the conversation)
2. protected constraints (seed 004; :func:`_constraints_block`, filled by the tasks component)
3. working checkpoint (seed 003)
4. memory index (seed 000)
5. "Summarized memory (compressed from earlier steps)" (seed 000 summary tier)
6. recent steps, 7. pending steps (seed 000)
8. the last ``<summary>`` lines (seed 003)
9. archived context summary (seed 002; :func:`_archived_summary_block`, filled by the session
   consolidator)
10. the last messages (after the consolidation cursor)

Every part is counted exactly with ``counter.count_messages(final_messages, tools)`` (I9: tool
schemas and reply priming included). When the prompt would exceed the budget it degrades in
the order of seed 000's ``cut_messages``: drop images, drop the oldest messages (whole tool
groups, never a call without its results — I1), truncate the tail of the longest remaining
block; each degradation is named in the report. The final messages always go through
:func:`~mindpalace.session.pairing.repair_pairing`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from mindpalace.errors import ContextBudgetError, ValidationError
from mindpalace.session.messages import validate_message
from mindpalace.session.pairing import PairingReport, repair_pairing, tool_groups
from mindpalace.steps.checkpoint import render_checkpoint, render_summary_lines
from mindpalace.steps.index import INDEX_HEADER
from mindpalace.textsafe import require_text

if TYPE_CHECKING:
    from mindpalace.memory import Session
    from mindpalace.session.consolidator import ConsolidationResult

Message = dict[str, Any]

IMAGE_TYPES: Final = frozenset({"image_url", "image", "input_image"})
PROTECTED_BLOCKS: Final = frozenset({"user corrections", "protected constraints"})
"""Blocks that are never truncated (I7); dropped only after every other part is gone."""
IMAGE_PLACEHOLDER: Final = "[image omitted to fit the context budget]"
TRUNCATION_MARK: Final = "\n…[truncated to fit the context budget]"
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
        consolidation: what the consolidator archived before building (None when it did
            not run: explicit `messages` or ``consolidate=False``).
        pairing: what :func:`repair_pairing` repaired (dangling calls closed, orphan results
            dropped) in the conversation.
    """

    blocks: list[tuple[str, int]]
    total_tokens: int
    budget_tokens: int
    degradations: list[str] = field(default_factory=list)
    pairing: PairingReport = field(default_factory=PairingReport)
    consolidation: ConsolidationResult | None = None


@dataclass
class BuiltContext:
    """A prompt ready to send: ``messages`` (OpenAI format), the `tools` it was counted with,
    and the :class:`ContextReport`."""

    messages: list[Message]
    report: ContextReport
    tools: list[dict[str, Any]] | None = None


# -- hooks other components fill --------------------------------------------------------------
def _constraints_block(session: Session) -> str | None:
    """Protected constraints + guards of the session's task, verbatim (seed 004, I7); None if none."""
    from mindpalace.tasks import render_constraints

    return render_constraints(session)


def _corrections_block(session: Session) -> str | None:
    """The newest user corrections (seed 004: they take effect on the very next prompt, at the top)."""
    from mindpalace.tasks import render_corrections

    return render_corrections(session)


def _archived_summary_block(session: Session) -> str | None:
    """The consolidator's archived summary of older messages (seed 002); None when none yet."""
    block = session.consolidator.summary_block()
    return block["content"] if block else None


def _message_start(session: Session) -> int:
    """1-based index of the first message not yet consolidated (seed 002 ``last_consolidated``)."""
    return session.consolidator.last_consolidated + 1


# -- the builder --------------------------------------------------------------------------------
@dataclass
class _Part:
    name: str
    message: Message


class ContextBuilder:
    """Builds the prompt of one session under a token budget.

    Args:
        session: the session whose memory (steps, constraints, messages) goes into the prompt.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.counter = session.memory.tokens

    def default_budget(self) -> int:
        """context window − max completion − safety buffer (tokens), from ``[session]``."""
        s = self.session.memory.settings.session
        return s.context_window_tokens - s.max_completion_tokens - s.safety_buffer_tokens

    def build(
        self,
        budget_tokens: int | None = None,
        *,
        system_prompt: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        messages: list[Message] | None = None,
        consolidate: bool = True,
    ) -> BuiltContext:
        """Assemble the prompt for the next model call.

        Args:
            budget_tokens: hard cap on ``count_messages(result.messages, tools)`` (tokens);
                None = :meth:`default_budget`.
            system_prompt: the system prompt; None = the latest ``system`` message of the
                conversation (system messages are always lifted out of the conversation; with
                stored messages, the session's latest one even if it is archived).
            tools: tool schemas sent with the request (counted, I9).
            messages: the conversation; None = the session's stored messages after the
                consolidation cursor (only the tail that can matter is read).
            consolidate: with stored messages, first let the session's consolidator archive
                older messages into history.jsonl when the prompt is over `budget_tokens`
                (seed 002), so messages leave the prompt with a durable summary (I2) rather
                than by the last-resort drop.

        Returns:
            A :class:`BuiltContext` whose ``report.total_tokens <= budget_tokens``.

        Raises:
            ContextBudgetError: the budget is below the irreducible minimum: tool schemas +
                reply priming + the protected constraints and user corrections (never cut, I7).
            ValidationError: `budget_tokens` is not a positive int; `system_prompt` is not
                text; `tools` is not a list of JSON objects; a given message is malformed.
        """
        budget = self.default_budget() if budget_tokens is None else budget_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValidationError(f"budget_tokens must be a positive int, got {budget_tokens!r}")
        _check_request(system_prompt, tools)
        if messages is None and system_prompt is None:
            # The session's system message, even when it was archived long ago (seed 002: the
            # system prompt is never consolidated away).
            latest = self.session.messages.latest_system()
            system_prompt = _text(latest.get("content")) if latest else None
        minimum = self.counter.count_messages([], tools)
        if budget < minimum:
            raise ContextBudgetError(budget, minimum)
        degradations: list[str] = []
        blocks = self._blocks()
        consolidation = None
        if messages is None and consolidate:
            consolidation = self._consolidate(blocks, system_prompt, tools, budget)
            if consolidation.consolidated:  # the archived-summary block changed
                blocks = self._blocks()
        protected = [p.message for p in blocks if p.name in PROTECTED_BLOCKS]
        if protected and budget < (floor := self.counter.count_messages(protected, tools)):
            raise ContextBudgetError(  # I7: constraints are never cut, so they must fit whole
                budget, floor, "tool schemas, reply priming and the protected constraints and "
                "user corrections, which are never cut"
            )
        if messages is None:
            # Messages are dropped before any block is cut, so only the tail that fits beside
            # the blocks can survive: read just that much (plus one chunk) from the store.
            fixed = [p.message for p in blocks]
            if system_prompt is not None:
                fixed.append({"role": "system", "content": system_prompt})
            room = budget - self.counter.count_messages(fixed, tools)
            convo, unloaded = self._load_messages(max(0, room))
        else:
            convo, unloaded = _given_messages(messages), 0
        lifted = [m for m in convo if m.get("role") == "system"]
        convo = [m for m in convo if m.get("role") != "system"]
        if system_prompt is None and lifted:
            system_prompt = _text(lifted[-1].get("content"))
        convo, pairing = repair_pairing(convo)
        if system_prompt:
            at = 1 if blocks and blocks[0].name == "user corrections" else 0  # corrections stay on top
            blocks.insert(at, _Part("system prompt", {"role": "system", "content": system_prompt}))
        fitter = _Fitter(self.counter, blocks, convo, tools, budget)
        if unloaded:
            fitter.dropped_messages += unloaded
        fitter.fit(degradations)
        final, check = repair_pairing(fitter.flat())
        if not check.ok:  # cannot happen with whole-group drops; kept as a guard for I1
            pairing.closed_calls += check.closed_calls
            pairing.dropped_results += check.dropped_results
        report = fitter.report(final, degradations, pairing)
        report.consolidation = consolidation
        return BuiltContext(final, report, tools)

    def _consolidate(
        self,
        blocks: list[_Part],
        system_prompt: str | None,
        tools: list[dict[str, Any]] | None,
        budget: int,
    ) -> ConsolidationResult:
        """Run the consolidator with the exact size of every fixed part but its own summary."""
        fixed = [p.message for p in blocks if p.name != "archived summary"]
        if system_prompt is not None:
            fixed.append({"role": "system", "content": system_prompt})
        tokens = sum(self.counter.count_message(m) for m in fixed)
        return self.session.consolidator.maybe_consolidate(
            system_tokens=tokens, tools=tools, budget_tokens=budget
        )

    def _blocks(self) -> list[_Part]:
        """Every block but the system prompt (which :meth:`build` inserts), in prompt order."""
        steps = self.session.steps
        steps.refresh()  # another process may have moved the tiers since this handle looked
        index = steps.index()
        texts = [
            ("user corrections", _corrections_block(self.session)),
            ("protected constraints", _constraints_block(self.session)),
            ("working checkpoint", render_checkpoint(steps.state.checkpoint)),
            ("memory index", INDEX_HEADER + "\n" + "\n".join(index) if index else None),
            ("summarized memory", steps.render_summary()),
            ("recent steps", steps.render_recent()),
            ("pending steps", steps.render_pending()),
            ("summary lines", render_summary_lines(steps.summary_lines)),
            ("archived summary", _archived_summary_block(self.session)),
        ]
        return [_Part(name, {"role": "system", "content": t}) for name, t in texts if t]

    def _load_messages(self, budget: int) -> tuple[list[Message], int]:
        """The stored tail after the cursor: read backwards in growing chunks until the loaded
        messages alone pass the budget (older ones would be dropped anyway). Returns
        (messages, count of older messages not loaded)."""
        log = self.session.messages
        first, end = _message_start(self.session), log.count() + 1
        loaded: list[Message] = []
        lo, chunk = end, FIRST_LOAD_MESSAGES
        while lo > first:
            new_lo = max(first, lo - chunk)
            loaded = [m.message for m in log.list(from_index=new_lo, to_index=lo - 1)] + loaded
            lo, chunk = new_lo, chunk * 2
            if self.counter.count_messages(_without_images(loaded)) > budget:
                break
        unloaded = lo - first
        if unloaded:  # a partial load may start inside a tool group: its results go with it
            while loaded and loaded[0].get("role") == "tool":
                loaded.pop(0)
                unloaded += 1
        return loaded, unloaded


class _Fitter:
    """Applies the three degradations until the prompt fits; counts with the real counter."""

    def __init__(
        self,
        counter: Any,
        blocks: list[_Part],
        convo: list[Message],
        tools: list[dict[str, Any]] | None,
        budget: int,
    ) -> None:
        self.counter = counter
        self.blocks = blocks
        self.groups = [convo[a:b] for a, b in tool_groups(convo)]
        self.tools = tools
        self.budget = budget
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
        out = [(self.counter.count(p.message["content"]), p.name, p.message) for p in self.blocks
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
        if keep > mark:
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
        rows = [(p.name, self.counter.count_message(p.message)) for p in self.blocks]
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


def _given_messages(messages: Any) -> list[Message]:
    """Checked, storable copies of caller-given messages (the same rules as stored ones)."""
    if not isinstance(messages, list | tuple):
        raise ValidationError(f"messages must be a list of chat messages, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        try:
            out.append(validate_message(m))  # a fresh copy: the caller's list is never changed
        except ValidationError as exc:
            raise ValidationError(f"messages[{i}]: {exc}") from exc
    return out


def _check_request(system_prompt: Any, tools: Any) -> None:
    """Refuse what the model API could not be sent (the prompt is built for a real request)."""
    if system_prompt is not None:
        require_text("system_prompt", system_prompt)
    if tools is None:
        return
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValidationError(f"tools must be a list of tool schemas (dicts), got {type(tools).__name__}")
    try:
        json.dumps(tools, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"tools must be JSON-serialisable: {exc}") from exc
