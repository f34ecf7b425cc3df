"""Prompt blocks: message shapes, the named parts of a prompt and the one table of their roles.

Every part the context builder puts before the conversation is a named :class:`Block`. Which
role a block speaks with is decided here and nowhere else (:data:`BLOCK_ROLES`,
:func:`block_message`), so the builder and anything that must count a block exactly as it will
appear (the consolidator's estimate of its own summary) agree by construction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Literal

from mindpalace.errors import ValidationError
from mindpalace.textsafe import require_text

Message = dict[str, Any]
"""One OpenAI-format chat message: ``{"role": …, "content": …}`` (plus tool fields)."""
ToolSchema = dict[str, Any]
"""One OpenAI-format tool schema: ``{"type": "function", "function": {"name": …, …}}``."""
Role = Literal["system", "user", "assistant"]


class Block(StrEnum):
    """The named parts of a prompt, in the order the context builder places them."""

    CORRECTIONS = "user corrections"  # seed 004: on the very top, newest first
    SYSTEM_PROMPT = "system prompt"
    CONSTRAINTS = "protected constraints"  # seed 004, I7
    CHECKPOINT = "working checkpoint"  # seed 003
    MEMORY_INDEX = "memory index"  # seed 000
    STEP_SUMMARY = "summarized memory"  # seed 000 summary tier
    RECENT_STEPS = "recent steps"  # seed 000
    PENDING_STEPS = "pending steps"  # seed 000
    SUMMARY_LINES = "summary lines"  # seed 003 <summary> history
    ARCHIVED_SUMMARY = "archived summary"  # seed 002 consolidation


BLOCK_ORDER: Final[tuple[Block, ...]] = tuple(Block)
"""Prompt order of the blocks (the conversation follows the last one)."""

_ROLES: dict[Block, Role] = {block: "system" for block in Block}
BLOCK_ROLES: Final[Mapping[Block, Role]] = MappingProxyType(_ROLES)
"""The role each block is sent with. Every block speaks as ``system`` today."""

PROTECTED_BLOCKS: Final = frozenset({Block.CORRECTIONS, Block.SYSTEM_PROMPT, Block.CONSTRAINTS})
"""Blocks that are never truncated or dropped (I7; the system prompt too): a budget they do
not fit is refused with ContextBudgetError naming them."""


def block_message(block: Block, text: str) -> Message:
    """The chat message carrying `block` with content `text`, in the block's role."""
    return {"role": BLOCK_ROLES[block], "content": text}


def check_tools(tools: Any) -> list[ToolSchema] | None:
    """`tools` as a list of tool schemas a model API can take (None stays None).

    Raises:
        ValidationError: not a list of dicts, not JSON (NaN, sets, non-string keys, objects),
            or text a request cannot carry (NUL, lone surrogates).
    """
    if tools is None:
        return None
    if not isinstance(tools, list | tuple) or not all(isinstance(t, dict) for t in tools):
        raise ValidationError(f"tools must be a list of tool schemas (dicts), got {type(tools).__name__}")
    try:  # sorted keys, as they are counted (I9): mixed key types cannot be sent either
        text = json.dumps(list(tools), allow_nan=False, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"tools must be JSON-serialisable: {exc}") from exc
    require_text("tools", text)
    return list(tools)
