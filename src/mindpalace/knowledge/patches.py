"""Patch-only edits of knowledge files (seed 003: "only patch, never overwrite").

A model never rewrites a file; it sends small patches located by an **anchor** — text that must
occur exactly once in the file:

* ``replace`` — the anchor becomes `text`;
* ``insert`` — `text` goes in as whole lines after (or before) the line holding the anchor, or
  at the end of the file when there is no anchor (this also creates a new file);
* ``remove`` — the anchor is deleted; a **reason is mandatory** and ends up in the commit
  message, so a removal is always a visible, explained git change (axiom b).

Applying a patch is pure text work (:func:`apply_patch`); re-applying one that is already in
the file changes nothing (an insert whose lines are there, a replace whose anchor is gone and
whose text is there) — so a maintenance job run twice on the same input is a no-op (I5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from mindpalace.errors import AxiomViolation, KnowledgeError
from mindpalace.knowledge.axioms import NO_SILENT_DELETION
from mindpalace.knowledge.layout import check_file
from mindpalace.textsafe import require_text

Op = Literal["replace", "insert", "remove"]
MAX_PATCH_CHARS: Final = 64 * 1024  # one patch is a small edit; a bigger one is an overwrite


@dataclass(frozen=True, slots=True)
class Patch:
    """One located edit of one knowledge file. Build with :meth:`replace`, :meth:`insert`,
    :meth:`remove` (or :meth:`from_json`).

    Attributes:
        file: the file relative to its scope folder (``L2_facts.md``, ``L3/deploy.md``).
        op: ``replace`` / ``insert`` / ``remove``.
        anchor: the located span (must occur exactly once); None for an insert at the end.
        text: the new text (replace, insert).
        before: insert before the anchor's line instead of after it.
        reason: why (mandatory for remove; recorded in the commit message).
        source: what verified the content — ``ledger:<task>/<key>`` or ``record:<name>``;
            mandatory for L2 and L3 (axiom a).

    Raises:
        KnowledgeError: a bad file name, op or field; text that cannot be stored.
    """

    file: str
    op: Op
    anchor: str | None = None
    text: str = ""
    before: bool = False
    reason: str = ""
    source: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "file", check_file(self.file))
        if self.op not in ("replace", "insert", "remove"):
            raise KnowledgeError(f"patch op must be replace, insert or remove, got {self.op!r}")
        for field in ("text", "reason"):
            _text(f"patch {field}", getattr(self, field))
        if self.anchor is not None:
            _text("patch anchor", self.anchor)
            if not self.anchor.strip():
                raise KnowledgeError("patch anchor is blank; give text that occurs once in the file")
        if self.source is not None:
            _text("patch source", self.source)
        if self.op in ("replace", "remove") and self.anchor is None:
            raise KnowledgeError(f"a {self.op} patch needs an anchor: the exact text to {self.op}")
        if self.op == "insert" and not self.text.strip():
            raise KnowledgeError(f"{self.file}: an insert patch needs non-blank text")
        if self.op == "remove" and not self.reason.strip():
            raise AxiomViolation(NO_SILENT_DELETION, self.file,
                                 "a removal needs a reason (it is recorded in the commit message)")

    @classmethod
    def replace(cls, file: str, anchor: str, text: str, *, source: str | None = None,
                reason: str = "") -> Patch:
        return cls(file, "replace", anchor, text, reason=reason, source=source)

    @classmethod
    def insert(cls, file: str, text: str, *, after: str | None = None, before: str | None = None,
               source: str | None = None, reason: str = "") -> Patch:
        if after is not None and before is not None:
            raise KnowledgeError("an insert goes after one anchor or before one, not both")
        return cls(file, "insert", before if before is not None else after, text,
                   before=before is not None, reason=reason, source=source)

    @classmethod
    def remove(cls, file: str, anchor: str, *, reason: str, source: str | None = None) -> Patch:
        return cls(file, "remove", anchor, "", reason=reason, source=source)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "op": self.op, "anchor": self.anchor, "text": self.text,
                "before": self.before, "reason": self.reason, "source": self.source}

    @classmethod
    def from_json(cls, data: Any) -> Patch:
        """A patch from its JSON form (:meth:`to_json`). Raises KnowledgeError on unknown or
        missing fields."""
        if not isinstance(data, dict):
            raise KnowledgeError(f"a patch must be a JSON object, got {type(data).__name__}")
        allowed = {"file", "op", "anchor", "text", "before", "reason", "source"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise KnowledgeError(f"unknown patch fields {unknown}; allowed: {sorted(allowed)}")
        if "file" not in data or "op" not in data:
            raise KnowledgeError("a patch needs 'file' and 'op'")
        if not isinstance(data.get("before", False), bool):
            raise KnowledgeError("patch field 'before' must be true or false")
        return cls(data["file"], data["op"], data.get("anchor"), data.get("text", "") or "",
                   bool(data.get("before", False)), data.get("reason", "") or "", data.get("source"))

    def describe(self) -> str:
        """One line for a commit message: ``insert L2_facts.md: "…" (source …)``."""
        what = {"replace": f"replace {_short(self.anchor)} with {_short(self.text)}",
                "insert": f"insert {_short(self.text)}",
                "remove": f"remove {_short(self.anchor)}"}[self.op]
        extra = "".join(f"; {k}: {v}" for k, v in (("reason", self.reason), ("source", self.source)) if v)
        return f"{self.file}: {what}{extra}"


def _text(field: str, value: Any) -> str:
    try:
        text = require_text(field, value)
    except Exception as exc:
        raise KnowledgeError(str(exc)) from exc
    if len(text) > MAX_PATCH_CHARS:
        raise KnowledgeError(f"{field} is {len(text)} characters; one patch holds at most "
                             f"{MAX_PATCH_CHARS} — split the edit")
    return text


def _short(text: str | None, limit: int = 60) -> str:
    flat = " ".join((text or "").split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def occurrences(content: str, needle: str) -> list[int]:
    """Start offsets of every (possibly overlapping) occurrence of `needle`."""
    out, at = [], content.find(needle)
    while at >= 0:
        out.append(at)
        at = content.find(needle, at + 1)
    return out


def _locate(content: str, patch: Patch) -> int | None:
    """The one offset of the anchor; None when absent. Raises when it is ambiguous."""
    assert patch.anchor is not None
    found = occurrences(content, patch.anchor)
    if len(found) > 1:
        raise KnowledgeError(f"{patch.file}: the anchor {_short(patch.anchor)} occurs {len(found)} "
                             "times; give a longer anchor that occurs exactly once")
    return found[0] if found else None


def _lines_present(content: str, text: str) -> bool:
    """True when `text`'s lines already stand as consecutive whole lines of `content`."""
    block = [ln.rstrip() for ln in text.strip("\n").split("\n")]
    lines = [ln.rstrip() for ln in content.split("\n")]
    n = len(block)
    return any(lines[i:i + n] == block for i in range(len(lines) - n + 1))


def apply_patch(content: str | None, patch: Patch) -> str:
    """`content` (None = the file does not exist yet) with `patch` applied; equal to `content`
    when the patch is already applied (a no-op).

    Raises:
        KnowledgeError: the anchor occurs more than once, or (replace / remove / anchored
            insert) not at all; a replace / remove of a file that does not exist.
        AxiomViolation: a replace whose anchor is the whole of a multi-line file (that is an
            overwrite, refused: patch the parts that change), or a replace with empty text
            (a removal: use remove with a reason).
    """
    if content is None and (patch.op != "insert" or patch.anchor is not None):
        raise KnowledgeError(f"{patch.file} does not exist; create it with an insert without an anchor")
    base = content or ""
    if patch.op == "insert":
        return _insert(base, patch)
    at = _locate(base, patch)
    anchor = patch.anchor or ""
    if patch.op == "replace":
        if not patch.text.strip():
            raise AxiomViolation(NO_SILENT_DELETION, patch.file,
                                 "a replace with empty text is a removal: use remove with a reason")
        if at is None:
            if len(occurrences(base, patch.text)) == 1:
                return base  # already applied
            raise KnowledgeError(f"{patch.file}: the anchor {_short(anchor)} is not in the file "
                                 "(it must match the current text exactly, once)")
        if anchor.strip() == base.strip() and len([ln for ln in base.splitlines() if ln.strip()]) > 1:
            raise AxiomViolation(NO_SILENT_DELETION, patch.file,
                                 "a replace of the whole file is an overwrite; patch the parts "
                                 "that change (replace / insert / remove with a reason)")
        return base[:at] + patch.text + base[at + len(anchor):]
    if at is None:
        raise KnowledgeError(f"{patch.file}: the text to remove {_short(anchor)} is not in the file")
    end = at + len(anchor)
    whole_lines = (at == 0 or base[at - 1] == "\n") and (end == len(base) or base[end] == "\n")
    if whole_lines and end < len(base):
        end += 1  # take the line break with the lines
    return base[:at] + base[end:]


def _insert(base: str, patch: Patch) -> str:
    text = patch.text if patch.text.endswith("\n") else patch.text + "\n"
    if patch.anchor is None:
        if _lines_present(base, text):
            return base
        if base and not base.endswith("\n"):
            base += "\n"
        return base + text
    at = _locate(base, patch)
    if at is None:
        raise KnowledgeError(f"{patch.file}: the anchor {_short(patch.anchor)} is not in the file "
                             "(it must match the current text exactly, once)")
    if _lines_present(base, text):
        return base
    if patch.before:
        line_start = base.rfind("\n", 0, at) + 1
        return base[:line_start] + text + base[line_start:]
    end = at + len(patch.anchor)
    line_end = base.find("\n", end - 1 if end > at and base[end - 1] == "\n" else end)
    if line_end < 0:
        return base + "\n" + text
    return base[:line_end + 1] + text + base[line_end + 1:]
