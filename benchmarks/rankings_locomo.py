"""Dump every LoCoMo question's ``Session.recall`` top-k (scores, explanations, metadata) so two
commits can be compared byte for byte — the check that a change to the query path's mechanics
changed no ranking.

One scope per conversation, the turns added as ``bench_peers`` adds them (speaker as the message
name, captions, timestamps), then every question whose evidence is among the turns is recalled
with k = 10. Each hit is written with its tier, ref, text, ``repr`` of its score (every bit), every
field of its explanation, its metadata and its fact id; the JSON is canonical (sorted keys), so
``cmp`` of two dumps, or ``--against``, is the check.

    python benchmarks/rankings_locomo.py --out /tmp/before.json                 # on the baseline
    python benchmarks/rankings_locomo.py --out /tmp/after.json --against /tmp/before.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the same vectors whatever the load

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

K = 10


def default_data() -> Path:
    shared = os.environ.get("MINDPALACE_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    return Path(shared) / "locomo" / "locomo10.json"


def hit_record(hit: Any) -> dict[str, Any]:
    """One recall hit as plain JSON: every field, the score as its exact ``repr``."""
    why = hit.why
    return {
        "tier": hit.tier, "ref": hit.ref, "text": hit.text, "score": repr(hit.score),
        "scope": str(hit.scope),
        "why": {
            "terms": list(why.terms), "keyword_rank": why.keyword_rank,
            "keyword_score": None if why.keyword_score is None else repr(why.keyword_score),
            "vector_rank": why.vector_rank,
            "similarity": None if why.similarity is None else repr(why.similarity),
            "neighbor": why.neighbor, "working": why.working, "date": why.date,
            "supersedes": why.supersedes, "superseded_by": why.superseded_by, "str": str(why),
        },
        "meta": {k: repr(v) for k, v in sorted(hit.meta.items())},
        "fact": None if hit.fact is None else hit.fact.id,
    }


def dump(data: Path, folder: Path, *, conversations: int, max_turns: int, max_questions: int,
         embed: str) -> dict[str, Any]:
    """{conversation id: [{question, hits: [hit_record…]}…]} for the first `conversations`."""
    from mindpalace import Memory
    from mindpalace.eval.locomo import load_locomo, turn_content

    out: dict[str, Any] = {}
    with Memory.open(folder, embed={"provider": embed}) as mem:
        for conv in load_locomo(data)[:conversations]:
            turns = conv.turns[:max_turns] if max_turns else conv.turns
            known = {t.dia_id for t in turns}
            questions = [q for q in conv.questions if set(q.evidence) <= known]
            questions = questions[:max_questions] if max_questions else questions
            s = mem.session("conversation", user=conv.sample_id, agent="rankings")
            s.messages.add_many(
                [{"role": "user", "name": t.speaker, "content": turn_content(t, captions=True)} for t in turns],
                timestamps=[t.date for t in turns],
            )
            out[conv.sample_id] = [
                {"question": q.question, "hits": [hit_record(h) for h in s.recall(q.question, k=K)]}
                for q in questions
            ]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=None, help="locomo10.json (default: the shared data).")
    ap.add_argument("--conversations", type=int, default=2, help="Conversations (default 2).")
    ap.add_argument("--max-turns", type=int, default=0, help="Turns per conversation, 0 = all.")
    ap.add_argument("--max-questions", type=int, default=0, help="Questions per conversation, 0 = all.")
    ap.add_argument("--embed", default="use", help="Embedder (default: mindpalace's default, use).")
    ap.add_argument("--out", type=Path, required=True, help="Where the canonical JSON dump goes.")
    ap.add_argument("--against", type=Path, default=None, help="A previous dump: exit 1 unless identical.")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = dump(args.data or default_data(), Path(tmp) / "mp", conversations=args.conversations,
                      max_turns=args.max_turns, max_questions=args.max_questions, embed=args.embed)
    text = json.dumps(result, sort_keys=True, indent=1, ensure_ascii=False)
    args.out.write_text(text, encoding="utf-8")
    n = sum(len(v) for v in result.values())
    print(f"{n} queries x top {K} from {len(result)} conversation(s) -> {args.out}")
    if args.against is None:
        return 0
    before = json.loads(args.against.read_text(encoding="utf-8"))
    if before == result:
        print(f"identical to {args.against}")
        return 0
    for conv, rows in result.items():
        for i, row in enumerate(rows):
            old = before.get(conv, [])
            if i >= len(old) or old[i] != row:
                print(f"DIFFERENT: {conv} question {i}: {row['question']!r}")
                return 1
    print(f"DIFFERENT from {args.against} (conversations or question counts)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
