"""Tool-result governance on every build: cap huge results, mask old ones (seed 002's per-iteration
context governance; "observation masking").

Seed 002's runner trims tool results in the messages it sends on every iteration, apart from
consolidation (which archives). Here that is a pure function over the conversation the context
builder is about to fit: a tool result above ``tool_result_max_tokens`` is shown as its head and
tail around a note giving its size and its reference (``message:<N>``: the message log stores it
whole, so nothing is lost and the model can read it back with read_files); a tool result older
than ``tool_result_mask_after_turns`` assistant turns is shown the same way in at most
``tool_result_masked_tokens``. The call, the result's role and its ``tool_call_id`` stay, so
pairing (I1) is untouched. A result with no reference (a conversation passed in by the caller,
not stored) is never shortened here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mindpalace.tokens import TokenCounter

MIN_SHOWN_TOKENS: Final = 8  # below this a head or tail says nothing; the handle alone is shown


@dataclass
class ObservationReport:
    """What governance did to one conversation.

    Attributes:
        capped: ``(reference, tokens before, tokens after)`` of results cut to the size cap.
        masked: the same for results masked for age.
    """

    capped: list[tuple[str, int, int]] = field(default_factory=list)
    masked: list[tuple[str, int, int]] = field(default_factory=list)

    def lines(self, mask_after_turns: int) -> list[str]:
        """One human-readable line per kind of change (for the context report)."""
        out = []
        if self.capped:
            out.append("cut " + ", ".join(f"tool result {r} from {a} to {b} tokens (head + tail)"
                                          for r, a, b in self.capped))
        if self.masked:
            refs = ", ".join(r for r, _, _ in self.masked)
            saved = sum(a - b for _, a, b in self.masked)
            out.append(f"masked {len(self.masked)} tool results older than {mask_after_turns} turns "
                       f"({refs}; {saved} tokens saved)")
        return out


def head_and_tail(text: str, counter: TokenCounter, max_tokens: int, note: str) -> str:
    """`text` as its head, `note`, and its tail, at most `max_tokens` tokens together (the head
    gets two thirds of the room). When no useful head fits, the note alone (cut if need be)."""
    room = max_tokens - counter.count(note) - 2
    if room < 2 * MIN_SHOWN_TOKENS:
        return counter.truncate(note, max_tokens)
    head = counter.truncate(text, room - room // 3)
    tail = _tail(text[len(head):], counter, room // 3)
    out = f"{head}\n{note}\n{tail}"
    while counter.count(out) > max_tokens and (head or tail):  # tokenizer seams at the joins
        if len(tail) > len(head) // 2:
            tail = tail[1:]
        else:
            head = head[:-1]
        out = f"{head}\n{note}\n{tail}"
    return out if counter.count(out) <= max_tokens else counter.truncate(note, max_tokens)


def _tail(text: str, counter: TokenCounter, max_tokens: int) -> str:
    """The longest suffix of `text` (cut at a character) with at most `max_tokens` tokens."""
    if max_tokens <= 0 or not text:
        return ""
    window = text[-max_tokens * 16:]  # a token is rarely more than 16 characters
    lo, hi = 0, len(window)
    while lo < hi:  # smallest start whose suffix fits (token count shrinks as the start grows)
        mid = (lo + hi) // 2
        if counter.count(window[mid:]) <= max_tokens:
            hi = mid
        else:
            lo = mid + 1
    return window[lo:]


def _text_of(content: Any) -> str | None:
    """A tool result's text: the string, or its text parts joined as ``read_records`` joins
    them (a list of ``{"type": "text"}`` parts is as governable as a string); else None."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return "\n".join(p["text"] for p in content)
    return None


def govern(
    messages: Sequence[dict[str, Any]],
    refs: Sequence[str | None],
    counter: TokenCounter,
    *,
    max_tokens: int,
    mask_after_turns: int,
    masked_tokens: int,
) -> tuple[list[dict[str, Any]], ObservationReport]:
    """The conversation with huge and old tool results shortened. Pure: the input list and its
    dicts are not changed; a shortened message is a copy with a new ``content``.

    Args:
        messages: OpenAI-format messages, oldest first.
        refs: the reference of each message (``message:<N>``), None where it has none (then
            that message is never shortened).
        counter: the token counter (I9).
        max_tokens: cap on one tool result's content (tokens); 0 = no cap.
        mask_after_turns: a tool result followed by at least this many assistant messages is
            masked; 0 = never.
        masked_tokens: what a masked result keeps (head + tail + handle, tokens).

    Returns:
        ``(messages, report)``: same length, roles, ids and tool calls as the input.
    """
    out = list(messages)
    report = ObservationReport()
    later_turns = 0  # assistant messages after the current position
    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        role = m.get("role")
        if role == "assistant":
            later_turns += 1
            continue
        ref = refs[i] if i < len(refs) else None
        content = _text_of(m.get("content"))
        if role != "tool" or ref is None or content is None:
            continue
        old = bool(mask_after_turns) and later_turns >= mask_after_turns
        limit = masked_tokens if old else max_tokens
        if not limit:
            continue
        tokens = counter.count(content)
        if tokens <= limit:
            continue
        verb = f"masked: older than {mask_after_turns} turns" if old else "cut: too long for the prompt"
        note = (f"…[tool result {verb}; {tokens} tokens in full as {ref} — read it with "
                f"read_files]…")
        short = head_and_tail(content, counter, limit, note)
        out[i] = {**m, "content": short}
        (report.masked if old else report.capped).append((ref, tokens, counter.count(short)))
    report.capped.reverse()
    report.masked.reverse()
    return out, report
