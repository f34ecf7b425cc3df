"""JSON shapes of what the facade returns (one function per result type, shared by the routes)."""

from __future__ import annotations

from typing import Any

from mindpalace.context import BuiltContext
from mindpalace.facts import Fact, RecallHit, Remembered
from mindpalace.memory import SessionStatus
from mindpalace.session.messages import StoredMessage
from mindpalace.steps import ReadResult
from mindpalace.store import Record
from mindpalace.tasks.eventstore import TaskEventRecord
from mindpalace.timeutil import to_iso


def message(m: StoredMessage) -> dict[str, Any]:
    return {"index": m.index, "message": m.message, "timestamp": to_iso(m.timestamp)}


def record(r: Record) -> dict[str, Any]:
    return {"name": r.name, "type": r.type, "step_id": r.step_id, "description": r.description,
            "body": r.body, "meta": r.meta,
            "created_at": None if r.created_at is None else to_iso(r.created_at)}


def record_summary(r: Record) -> dict[str, Any]:
    """A record without its body (for lists)."""
    data = record(r)
    del data["body"]
    return data


def read_result(result: ReadResult) -> dict[str, Any]:
    return {"found": {name: record(r) for name, r in result.found.items()},
            "missing": list(result.missing), "problems": dict(result.problems)}


def fact(f: Fact) -> dict[str, Any]:
    return f.to_json()


def remembered(done: Remembered) -> dict[str, Any]:
    return {"fact": fact(done.fact), "archived": [fact(f) for f in done.archived],
            "evicted": [fact(f) for f in done.evicted]}


def hit(h: RecallHit) -> dict[str, Any]:
    return {"tier": h.tier, "ref": h.ref, "text": h.text, "score": h.score,
            "session": h.scope.session, "why": str(h.why), "meta": h.meta,
            "fact": None if h.fact is None else fact(h.fact)}


def status(st: SessionStatus) -> dict[str, Any]:
    return {"scope": {"user": st.scope.user, "agent": st.scope.agent, "session": st.scope.session},
            "messages": st.messages, "last_consolidated": st.last_consolidated,
            "history_entries": st.history_entries, "prompt_tokens": st.prompt_tokens,
            "budget_tokens": st.budget_tokens, "target_tokens": st.target_tokens,
            "lease": st.lease, "last_summary": st.last_summary,
            "last_summary_kind": st.last_summary_kind, "live": [message(m) for m in st.live]}


def event(r: TaskEventRecord) -> dict[str, Any]:
    return {"task": r.task, "version": r.version, "type": r.type, "data": r.data,
            "created_at": to_iso(r.created_at)}


def built(b: BuiltContext) -> dict[str, Any]:
    rep = b.report
    data: dict[str, Any] = {
        "messages": b.messages, "tools": b.tools,
        "blocks": [{"name": name, "tokens": tokens} for name, tokens in rep.blocks],
        "total_tokens": rep.total_tokens, "budget_tokens": rep.budget_tokens,
        "degradations": rep.degradations,
        "recalled": [{"ref": i.ref, "tier": i.tier, "score": i.score, "why": i.why,
                      "tokens": i.tokens} for i in rep.recalled],
        "consolidation": None if rep.consolidation is None else rep.consolidation.to_json(),
    }
    return data
