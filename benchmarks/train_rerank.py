"""Train the learned rerank (``facts.rerank``) on LoCoMo's dev conversations; write its weights.

1. **Collect.** Each dev conversation (conv-26, conv-30 only: the other eight are held out) is
   written as ``mindpalace eval locomo`` writes it, then every question is recalled through
   ``Session.recall`` inside :func:`mindpalace.retrieval.rerank.recording`, with the stage off:
   each question's best ``--depth`` fused candidates and their feature rows. A candidate is
   relevant when its turn is one of the question's evidence turns.
2. **Train.** Pairwise logistic regression (a linear RankNet): for every question, every
   (relevant, irrelevant) pair of its candidates is one example ``x_pos − x_neg`` with label 1;
   the weights minimise the mean log loss + ``--l2`` · |w|² (the fused score not
   penalised: it is the prior) by Newton's method from zero — a
   convex problem solved exactly, so the same data give the same weights (numpy only).
3. **Report and write.** Offline R@5 / R@10 of the candidates reordered by the weights against
   the fused order (recall of the question's evidence among the reordered top; a question
   whose evidence is not in its candidates counts its misses), and leave-one-conversation-out
   (train on one dev conversation, score the other) so the gain is not only the fit's. With
   ``--out`` the weights are written (the shipped ones: ``src/mindpalace/retrieval/rerank.json``).

    python benchmarks/train_rerank.py --cache /tmp/rerank_rows.npz --out src/mindpalace/retrieval/rerank.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the same vectors whatever the load

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEV = ("conv-26", "conv-30")
WEIGHTS = Path(__file__).resolve().parents[1] / "src" / "mindpalace" / "retrieval" / "rerank.json"


@dataclass(frozen=True, slots=True)
class Group:
    """One question's candidates: rows (n, F) best first by fused score, labels (n,) 0/1,
    `evidence` the question's evidence turn count (≥ the relevant candidates), `conversation`."""

    rows: np.ndarray
    labels: np.ndarray
    evidence: int
    conversation: str


def default_data() -> Path:
    shared = os.environ.get("MINDPALACE_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    return Path(shared) / "locomo" / "locomo10.json"


def collect(data: Path, conversations: Sequence[str], depth: int) -> list[Group]:
    """Feature rows and evidence labels of every question of `conversations` (see the module
    docstring, step 1); the stage is off, its depth `depth`."""
    from mindpalace import Memory
    from mindpalace.eval.locomo import ingest, load_locomo, recall_ranking
    from mindpalace.retrieval.rerank import recording

    groups: list[Group] = []
    convs = [c for c in load_locomo(data) if c.sample_id in set(conversations)]
    with tempfile.TemporaryDirectory(prefix="mindpalace-rerank-") as tmp, Memory.open(
        Path(tmp) / "ws", facts={"rerank": False, "rerank_depth": depth}
    ) as memory:
        for conv in convs:
            where = ingest(memory, conv)
            memory.retriever.sync_embeddings()
            for q in conv.questions:
                with recording() as seen:
                    recall_ranking(memory, conv, q, where, 10)
                first = next((r for r in seen if r.query == q.question), None)
                if first is None:
                    continue
                turns = [where.get((str(d.scope.session), d.ref)) for d in first.docs]
                labels = np.array([t is not None and t in q.evidence for t in turns], dtype=np.float64)
                groups.append(Group(first.rows, labels, len(set(q.evidence)), conv.sample_id))
    return groups


def save(groups: Sequence[Group], path: Path) -> None:
    """Groups to one ``.npz`` (rows stacked, with each group's length, evidence, conversation)."""
    np.savez(
        path, rows=np.concatenate([g.rows for g in groups]), labels=np.concatenate([g.labels for g in groups]),
        sizes=np.array([len(g.labels) for g in groups]), evidence=np.array([g.evidence for g in groups]),
        conversations=np.array([g.conversation for g in groups]),
    )


def load(path: Path) -> list[Group]:
    """Groups written by :func:`save`."""
    z = np.load(path)
    bounds = np.concatenate([[0], np.cumsum(z["sizes"])])
    return [
        Group(z["rows"][a:b], z["labels"][a:b], int(e), str(c))
        for a, b, e, c in zip(bounds[:-1], bounds[1:], z["evidence"], z["conversations"], strict=True)
    ]


def without(groups: Sequence[Group], names: Sequence[str]) -> list[Group]:
    """`groups` with the columns of the features `names` zeroed (their fitted weight is then 0).

    Raises:
        ValueError: a name is not a feature.
    """
    from mindpalace.retrieval.rerank import FEATURES

    unknown = set(names) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; features: {list(FEATURES)}")
    keep = np.array([name not in names for name in FEATURES], dtype=np.float64)
    return [Group(g.rows * keep, g.labels, g.evidence, g.conversation) for g in groups]


def pairs(groups: Sequence[Group], depth: int) -> np.ndarray:
    """(pairs, F) differences relevant − irrelevant within each group's best `depth` rows."""
    out = []
    for g in groups:
        rows, labels = g.rows[:depth], g.labels[:depth]
        pos, neg = rows[labels > 0], rows[labels == 0]
        if len(pos) and len(neg):
            out.append((pos[:, None, :] - neg[None, :, :]).reshape(-1, rows.shape[1]))
    if not out:
        raise ValueError("no group holds both a relevant and an irrelevant candidate")
    return np.concatenate(out)


# The fused order is the prior: its score is not shrunk, so a strong penalty gives back
# (nearly) the fused order rather than a ranker that knows nothing.
UNPENALISED = ("final_norm",)


def fit(diffs: np.ndarray, l2: float, iterations: int = 50) -> np.ndarray:
    """Weights w minimising mean(log(1 + exp(−diffs @ w))) + l2 · |w|² over every feature but
    :data:`UNPENALISED` (Newton's method from 0; stops when the step is below 1e-10).
    `diffs`: (pairs, len(FEATURES))."""
    from mindpalace.retrieval.rerank import FEATURES

    n, f = diffs.shape
    penalty = np.array([0.0 if name in UNPENALISED else 2 * l2 for name in FEATURES])[:f]
    penalty += 1e-9  # keeps the Hessian invertible when a feature is constant
    w = np.zeros(f)
    for _ in range(iterations):
        margin = diffs @ w
        p = 0.5 * (1.0 + np.tanh(-0.5 * margin))  # sigmoid(−margin), without overflow
        grad = -(diffs * p[:, None]).mean(axis=0) + penalty * w
        hess = (diffs * (p * (1 - p))[:, None]).T @ diffs / n + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return w


def recall_at(groups: Sequence[Group], weights: np.ndarray | None, depth: int, ks: Sequence[int] = (5, 10)) -> dict[int, float]:
    """Mean recall (%) of each group's evidence in its top k, the best `depth` rows reordered by
    `weights` (None = the fused order), the rest after them in fused order."""
    out = {k: 0.0 for k in ks}
    for g in groups:
        order = np.arange(len(g.labels))
        if weights is not None:
            head = np.argsort(-(g.rows[:depth] @ weights), kind="stable")
            order = np.concatenate([head, order[depth:]])
        for k in ks:
            out[k] += float(g.labels[order[:k]].sum()) / max(g.evidence, 1)
    return {k: round(100 * v / max(len(groups), 1), 2) for k, v in out.items()}


def weights_document(weights: np.ndarray, depth: int, trained_on: str) -> dict[str, object]:
    """The ``rerank.json`` document (rounded to 6 significant digits, so a rerun that agrees to
    rounding writes the same file)."""
    from mindpalace.retrieval.rerank import FEATURES

    return {
        "depth": depth, "features": list(FEATURES), "trained_on": trained_on,
        "weights": [float(f"{w:.6g}") for w in weights],
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=None, help="locomo10.json (default: the shared data).")
    ap.add_argument("--depth", type=int, default=30, help="Candidates reordered (default 30).")
    ap.add_argument("--l2", type=float, default=1e-2, help="L2 penalty (default 1e-2).")
    ap.add_argument("--without", action="append", default=[], metavar="FEATURE",
                    help="Leave a feature out (its weight 0); repeatable.")
    ap.add_argument("--cache", type=Path, default=None, help="An .npz of collected rows (of this --depth): read if present, else written.")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"Where the weights JSON goes (the shipped file: {WEIGHTS.relative_to(WEIGHTS.parents[3])}).")
    args = ap.parse_args(argv)
    if args.cache is not None and args.cache.exists():
        groups = load(args.cache)
    else:
        groups = collect(args.data or default_data(), DEV, args.depth)
        if args.cache is not None:
            save(groups, args.cache)
    if args.without:
        groups = without(groups, args.without)
    weights = fit(pairs(groups, args.depth), args.l2)
    print(f"{len(groups)} questions, depth {args.depth}, l2 {args.l2:g}")
    print(f"  fused order      R@5/R@10 {recall_at(groups, None, args.depth)}")
    print(f"  learned (fit)    R@5/R@10 {recall_at(groups, weights, args.depth)}")
    for held in DEV:
        train = [g for g in groups if g.conversation != held]
        test = [g for g in groups if g.conversation == held]
        w = fit(pairs(train, args.depth), args.l2)
        print(f"  {held}: fused {recall_at(test, None, args.depth)} -> learned on the other {recall_at(test, w, args.depth)}")
    from mindpalace.retrieval.rerank import FEATURES

    for name, w in zip(FEATURES, weights, strict=True):
        print(f"    {name:14s} {w:+.4f}")
    if args.out is not None:
        left_out = f", without {', '.join(args.without)}" if args.without else ""
        doc = weights_document(weights, args.depth, f"LoCoMo dev {' + '.join(DEV)}: {len(groups)} questions, "
                               f"pairwise logistic, l2 {args.l2:g}{left_out}")
        args.out.write_text(json.dumps(doc, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
