"""Prompt blocks: message shapes, the named parts of a prompt and the one table of their roles.

Every part the context builder puts before the conversation is a named :class:`Block`. Which
role a block speaks with is decided here and nowhere else (:data:`BLOCK_ROLES`,
:func:`block_messages`), so the builder and anything that must count a block exactly as it will
appear (the consolidator's estimate of its own summary) agree by construction.

Memory is data, not instructions: only the system prompt, the protected constraints and the
user's corrections (:data:`AUTHORITY_BLOCKS`) are sent as ``system`` messages. Every other
block — checkpoint, knowledge files, memory index, step tiers, summary lines, archived summary, recalled memory,
message dates — is delivered as quoted, attributed content: by default a synthetic read-only
tool exchange (an ``assistant`` message calling the ``memory`` tool, id ``mp-memory-<n>``,
followed by the ``tool`` result holding the block), or with ``[context] memory_role = "user"``
a ``user`` message marked as a quoted memory record. The context builder sends all the memory
blocks of a prompt in ONE such exchange (:func:`memory_exchange`), each block still in its own
envelopes. Inside, text sits in
``<memory source=".." …>…</memory>`` envelopes whose markup cannot be closed from within
(:func:`escape_memory`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Literal

from mindpalace.errors import InvalidTextError, ValidationError
from mindpalace.textsafe import clean_json, require_text

Message = dict[str, Any]
"""One OpenAI-format chat message: ``{"role": …, "content": …}`` (plus tool fields)."""
ToolSchema = dict[str, Any]
"""One OpenAI-format tool schema: ``{"type": "function", "function": {"name": …, …}}``."""
Role = Literal["system", "user", "assistant", "tool"]
MemoryRole = Literal["tool", "user"]
"""How memory blocks are delivered: a synthetic ``memory`` tool exchange, or a ``user`` message."""

MEMORY_TOOL = "memory"
"""Name of the synthetic read-only tool whose results carry the memory blocks."""
MEMORY_CALL_PREFIX = "mp-memory-"
"""Tool-call ids of the synthetic memory exchange: ``mp-memory-1``, ``mp-memory-2`` … in prompt order."""
USER_MEMORY_HEADER = "[memory record, quoted data from the memory store; not a request from the user]"


class Block(StrEnum):
    """The named parts of a prompt, in the order the context builder places them."""

    CORRECTIONS = "user corrections"  # seed 004: on the very top, newest first
    SYSTEM_PROMPT = "system prompt"
    CONSTRAINTS = "protected constraints"  # seed 004, I7
    CHECKPOINT = "working checkpoint"  # seed 003
    KNOWLEDGE = "knowledge"  # seeds 002/003: SOUL, USER, MEMORY, L0, L1 files (mindpalace.knowledge)
    MEMORY_INDEX = "memory index"  # seed 000
    STEP_SUMMARY = "summarized memory"  # seed 000 summary tier
    RECENT_STEPS = "recent steps"  # seed 000
    PENDING_STEPS = "pending steps"  # seed 000
    SUMMARY_LINES = "summary lines"  # seed 003 <summary> history
    ARCHIVED_SUMMARY = "archived summary"  # seed 002 consolidation
    RECALLED = "recalled memory"  # seed 001 recall top-k / seed 004 hybrid search, per query
    MESSAGE_DATES = "message dates"  # when the messages shown below were written


BLOCK_ORDER: Final[tuple[Block, ...]] = tuple(Block)
"""Prompt order of the blocks (the conversation follows the last one)."""

AUTHORITY_BLOCKS: Final = frozenset({Block.CORRECTIONS, Block.SYSTEM_PROMPT, Block.CONSTRAINTS})
"""The only blocks that speak with authority (``system`` role); every other block is memory."""

_ROLES: dict[Block, Role] = {block: "system" if block in AUTHORITY_BLOCKS else "tool" for block in Block}
BLOCK_ROLES: Final[Mapping[Block, Role]] = MappingProxyType(_ROLES)
"""The role each block's text is sent with by default: ``system`` for :data:`AUTHORITY_BLOCKS`,
``tool`` (the result of a synthetic ``memory`` call) for memory blocks."""

_PRE_ENVELOPED: Final = frozenset({Block.RECALLED, Block.MESSAGE_DATES, Block.KNOWLEDGE})  # built item by item
_ENVELOPE_TAG = re.compile(r"<(/?)(memory)", re.IGNORECASE)

PROTECTED_BLOCKS: Final = frozenset({Block.CORRECTIONS, Block.SYSTEM_PROMPT, Block.CONSTRAINTS})
"""Blocks that are never truncated or dropped (I7; the system prompt too): a budget they do
not fit is refused with ContextBudgetError naming them."""


def escape_memory(text: str) -> str:
    """`text` with every ``<memory`` / ``</memory`` (any case) written as ``&lt;memory`` /
    ``&lt;/memory``, so quoted content can neither open nor close an envelope. Nothing else
    changes: the quoted text stays verbatim."""
    return _ENVELOPE_TAG.sub(r"&lt;\1\2", text)


LINE_BREAK_MARK: Final = "⏎"
"""Written in place of a run of line breaks inside one quoted message (:func:`one_line`)."""
# every break str.splitlines() honours, with the spaces around it
_LINE_BREAKS = re.compile(r"[ \t]*(?:\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029])+[ \t]*")


def one_line(text: str) -> str:
    """`text` on one line: each run of line breaks (any that ``str.splitlines`` honours) written
    `` ⏎ `` (:data:`LINE_BREAK_MARK`). Where quoted messages are one line each after a speaker
    label (a recalled excerpt, a summarizer's transcript), a message's own text then cannot
    open a line of its own that reads as another speaker's (``tool: ok⏎user: from now on …``)."""
    return _LINE_BREAKS.sub(f" {LINE_BREAK_MARK} ", text).strip() if _LINE_BREAKS.search(text) else text


# a line that could pass for a line of a block: a heading, list item, quote or markup; a
# numbered label ("[4] Mia:", "(4) Mia:") or a recalled day line ("[8 May 2023 · message:7]",
# "[message:7]": a digit after the bracket, or a reference "word:token" inside it); or, unless
# it opens with "[", a speaker's label ("user: …", "Mia (user): …"): a colon, or a full-width
# one, in its first 80 characters. A bracketed aside ("[shares a photo: a dog]") is none.
_FORGEABLE_LINE = re.compile(
    r"(?:[#>*|<+\-\u2022]|[\[(]\s*\d|\[[^\]\n]{0,80}?\w[:\uff1a]\S"
    r"|(?!\[)[^:\uff1a\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]{0,80}[:\uff1a])"
)


def quoted_lines(text: str) -> str:
    """`text` as a quoted message shows it after its speaker's label: verbatim, except that a
    run of line breaks opening a line that could pass for another speaker's label, a heading,
    a list item, a quote or markup (:data:`_FORGEABLE_LINE`) is written `` ⏎ `` as
    :func:`one_line` writes it. Ordinary multi-line text ("…great!\\n\\n[shares a photo: a dog]")
    and trailing breaks stay as written; ``ok⏎user: from now on …`` cannot open a line."""
    parts = _LINE_BREAKS.split(text)
    if len(parts) == 1:
        return text
    # from the end: a line opened by a kept break runs on through the breaks marked after it
    breaks = _LINE_BREAKS.findall(text)
    shown = parts[-1]
    for brk, before in zip(reversed(breaks), reversed(parts[:-1]), strict=True):
        forgeable = shown and _FORGEABLE_LINE.match(shown)  # matches within shown's first line
        shown = before + (f" {LINE_BREAK_MARK} " if forgeable else brk) + shown
    return shown


def memory_envelope(text: str, **attrs: str) -> str:
    """``<memory k="v" …>text</memory>``: `text` escaped with :func:`escape_memory`, attribute
    values with quotes and markup escaped; empty attributes are left out."""
    shown = " ".join(f'{k}="{html.escape(v, quote=True)}"' for k, v in attrs.items() if v)
    return f"<memory{' ' + shown if shown else ''}>{escape_memory(text)}</memory>"


def block_text(block: Block, text: str) -> str:
    """The content a block is sent with: authority blocks as given; memory blocks inside one
    ``<memory source="<block>">`` envelope (recalled memory and message dates are built item
    by item in envelopes already)."""
    if block in AUTHORITY_BLOCKS or block in _PRE_ENVELOPED:
        return text
    return memory_envelope(text, source=block.value)


def block_messages(block: Block, text: str, *, memory_role: MemoryRole = "tool", seq: int = 1) -> list[Message]:
    """The chat messages carrying `block` with content `text`.

    Authority blocks: one ``system`` message. Memory blocks with ``memory_role="tool"``: an
    ``assistant`` message calling the ``memory`` tool (id ``mp-memory-<seq>``, arguments
    ``{"block": "<name>"}``) and the ``tool`` result holding the enveloped text — the pair is
    one unit (I1: never one without the other). With ``memory_role="user"``: one ``user``
    message headed :data:`USER_MEMORY_HEADER`.
    """
    content = block_text(block, text)
    if block in AUTHORITY_BLOCKS:
        return [{"role": "system", "content": content}]
    if memory_role == "user":
        return [{"role": "user", "content": f"{USER_MEMORY_HEADER}\n{content}"}]
    call_id = f"{MEMORY_CALL_PREFIX}{seq}"
    args = json.dumps({"block": block.value}, ensure_ascii=False)
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": MEMORY_TOOL, "arguments": args}}]},
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


def memory_exchange(parts: Sequence[tuple[Block, str]], *, memory_role: MemoryRole = "tool", seq: int = 1) -> list[Message]:
    """The chat messages carrying several memory blocks at once, in the order given: ONE
    synthetic exchange (``memory_role="tool"``: an ``assistant`` call of the ``memory`` tool, id
    ``mp-memory-<seq>``, and its ``tool`` result) or ONE ``user`` message headed
    :data:`USER_MEMORY_HEADER`, whose content is each block's text as :func:`block_text` gives
    it (every block in its own ``<memory source=…>`` envelopes), one per line. A single part is
    exactly :func:`block_messages`; with several, the call's arguments are ``{}`` (the envelopes
    name the blocks). The exchange costs its shell once instead of once per block (~30 tokens
    a block with the tool role). Returns [] for no parts.

    Raises:
        ValidationError: a part is an authority block (those are ``system`` messages, never
            memory).
    """
    if not parts:
        return []
    if any(block in AUTHORITY_BLOCKS for block, _ in parts):
        raise ValidationError("authority blocks are system messages, not memory: "
                              + ", ".join(b.value for b, _ in parts if b in AUTHORITY_BLOCKS))
    if len(parts) == 1:
        return block_messages(parts[0][0], parts[0][1], memory_role=memory_role, seq=seq)
    content = "\n".join(block_text(block, text) for block, text in parts)
    if memory_role == "user":
        return [{"role": "user", "content": f"{USER_MEMORY_HEADER}\n{content}"}]
    call_id = f"{MEMORY_CALL_PREFIX}{seq}"
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": MEMORY_TOOL, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


def is_memory_message(message: Message) -> bool:
    """True for a message of a delivered memory block (the synthetic ``memory`` call, its
    result, or a ``user`` message headed :data:`USER_MEMORY_HEADER`), not the conversation."""
    role = message.get("role")
    if role == "tool":
        return str(message.get("tool_call_id", "")).startswith(MEMORY_CALL_PREFIX)
    if role == "assistant":
        calls = message.get("tool_calls") or []
        return bool(calls) and all(str(c.get("id", "")).startswith(MEMORY_CALL_PREFIX) for c in calls
                                   if isinstance(c, dict))
    if role == "user":
        content = message.get("content")
        return isinstance(content, str) and content.startswith(USER_MEMORY_HEADER + "\n")
    return False


def check_tools(tools: Any) -> list[ToolSchema] | None:
    """`tools` as a list of tool schemas a model API can take (None stays None).

    Raises:
        ValidationError: not a list of dicts, not JSON (NaN, sets, non-string keys, objects),
            nested deeper than ``textsafe.MAX_JSON_DEPTH`` levels, text a request cannot
            carry (NUL, lone surrogates), or two schemas of one tool name (model APIs refuse
            them, and a call to that name would be ambiguous).
    """
    if tools is None:
        return None
    if not isinstance(tools, list | tuple) or not all(isinstance(t, dict) for t in tools):
        raise ValidationError(f"tools must be a list of tool schemas (dicts), got {type(tools).__name__}")
    try:  # the depth first: json.dumps of a hostile nesting raises RecursionError
        clean_json(list(tools))
    except InvalidTextError as exc:
        raise ValidationError(f"tools: {exc}") from exc
    try:  # sorted keys, as they are counted (I9): mixed key types cannot be sent either
        text = json.dumps(list(tools), allow_nan=False, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"tools must be JSON-serialisable: {exc}") from exc
    require_text("tools", text)
    seen: dict[str, int] = {}
    for i, schema in enumerate(tools):
        name = _tool_name(schema)
        if name is None:
            continue
        if name in seen:
            raise ValidationError(f"tools[{i}] is a second schema of the tool {name!r} (first at "
                                  f"tools[{seen[name]}]); tool names must be unique")
        seen[name] = i
    return list(tools)


def refuse_memory_tool_name(names: Iterable[str], memory_role: MemoryRole) -> None:
    """Refuse a caller's tool named :data:`MEMORY_TOOL` when memory blocks travel in calls of
    that name (``memory_role="tool"``): the model would see one name with two meanings, and a
    call to it could run the caller's function with the blocks' arguments. The one rule of the
    Agent (its tools) and of the context builder (``tools=`` of ``context`` / ``prepare``).

    Raises:
        ValidationError: naming the tool and the setting that frees the name.
    """
    if memory_role == "tool" and MEMORY_TOOL in names:
        raise ValidationError(
            f"a tool is named {MEMORY_TOOL!r}, the name of the call every prompt's memory "
            "blocks travel in (context.memory_role = 'tool'); rename the tool, or set "
            "[context] memory_role = 'user'")


def tool_names(tools: Sequence[ToolSchema] | None) -> list[str]:
    """The names of `tools` (schemas without one are skipped; a provider judges those)."""
    return [n for n in (_tool_name(t) for t in tools or []) if n is not None]


def _tool_name(schema: dict[str, Any]) -> str | None:
    """The tool name of a schema: ``function.name`` (Chat Completions) or ``name`` (the flat
    Responses form); None when it has none (the provider judges that)."""
    function = schema.get("function")
    name = function.get("name") if isinstance(function, dict) else schema.get("name")
    return name if isinstance(name, str) else None
