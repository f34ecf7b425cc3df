"""The cost of lineage: the step and recall benchmarks with lineage on and off, in one run.

* **steps** — ``bench_steps``' replay of τ-bench airline runs (one session per run, a prompt
  prepared with ``Session.prepare`` before every model call, step budget B): the runs go
  alternately through two workspaces, one with ``lineage.enabled = true`` and one with
  ``false`` (run i through both, the order flipping every run, so machine load hits both
  alike). Timed: each step (``begin`` + ``note_reply``, as bench_steps), each prepare, and the
  wall time of the whole replay.
* **recall** — ``bench_recall``'s generated facts (10k, 100k with ``--fast``) in one store,
  read through two handles on the same workspace (lineage on / off); the queries alternate
  between the handles (same query, same data, order flipping). Timed: ``Session.recall``.

The budget: lineage may move either benchmark by at most 10% (issue 15).

    python benchmarks/bench_lineage.py --fast     # 20 runs, 10k + 100k facts
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as bench_recall: one query = one mat-vec

import argparse
import importlib.util
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.lineage import STREAM
from mindpalace.replay import load_transcripts
from mindpalace.scope import ANY, Scope

HERE = Path(__file__).resolve().parent
LIMIT_PCT = 10.0


def load(name: str) -> ModuleType:
    """A sibling benchmark module (run as a script or as ``python -m benchmarks``)."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


# -- steps ---------------------------------------------------------------------------------
def bench_steps(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    steps_mod = load("bench_steps")
    runs = load_transcripts(args.data / "tau-bench" / "gpt-4o-airline.json")
    picked = sorted(random.Random(args.seed).sample(range(len(runs)), min(args.runs, len(runs))))
    runs = [runs[i] for i in picked]
    system_prompt = str(runs[0].messages[0]["content"])
    out: dict[str, dict[str, Any]] = {}
    handles = {on: Memory.open(tmp / f"steps-{on}", embed={"provider": "none"},
                               steps={"budget_tokens": args.budget}, lineage={"enabled": on})
               for on in (True, False)}
    rows = {on: {"step_ms": [], "context_ms": [], "wall_s": 0.0, "over": 0} for on in handles}
    try:
        sys_tokens = handles[True].tokens.count_messages([{"role": "system", "content": system_prompt}])
        for i, run in enumerate(runs):
            for on in ((True, False) if i % 2 == 0 else (False, True)):
                row = steps_mod.Row(f"lineage-{on}-{i}", args.budget, args.budget + sys_tokens)
                t0 = time.perf_counter()
                steps_mod.run_sessions(handles[on], [[run]], row, system_prompt)
                rows[on]["wall_s"] += time.perf_counter() - t0
                rows[on]["step_ms"] += row.step_ms or []
                rows[on]["context_ms"] += row.context_ms or []
                rows[on]["over"] += row.over
        for on, mem in handles.items():
            r = rows[on]
            events = sum(v for _, name, v in mem.store.list_streams(
                Scope(mem.tenant, ANY, ANY, ANY), prefix=STREAM) if name == STREAM)
            out["on" if on else "off"] = {
                "step_p50_ms": p(r["step_ms"], 50), "step_p95_ms": p(r["step_ms"], 95),
                "prepare_p50_ms": p(r["context_ms"], 50), "prepare_p95_ms": p(r["context_ms"], 95),
                "wall_s": r["wall_s"], "steps": len(r["step_ms"]), "prompts": len(r["context_ms"]),
                "over_budget": r["over"], "lineage_events": events,
            }
    finally:
        for mem in handles.values():
            mem.close()
    return out


# -- recall --------------------------------------------------------------------------------
def bench_recall(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    recall_mod = load("bench_recall")
    rng = np.random.default_rng(args.seed)
    vocab = recall_mod.make_vocab(rng)
    embed = {"provider": "hashing", "dimensions": args.dim}
    ws = tmp / "recall"
    on = Memory.open(ws, embed=embed, lineage={"enabled": True})
    off = Memory.open(ws, embed=embed, lineage={"enabled": False})
    out: dict[str, dict[str, float]] = {}
    try:
        sessions = {True: on.session("bench", user="bench-user", agent="bench"),
                    False: off.session("bench", user="bench-user", agent="bench")}
        scope = sessions[True].facts.fact_scope
        facts: list[Any] = []
        for size in args.sizes:  # ascending: each size adds facts to the same store
            new = recall_mod.make_facts(len(facts), size - len(facts), vocab, rng)
            recall_mod.fill(on, scope, new)
            facts += new
            picks = rng.choice(len(facts), args.queries, replace=False)
            queries = [" ".join(facts[i].content.split()[: int(rng.integers(2, 4))]) for i in picks]
            for s in sessions.values():  # cold start (vector index load) outside the timing
                s.recall(queries[0], k=args.k)
            ms: dict[bool, list[float]] = {True: [], False: []}
            for i, q in enumerate(queries):
                for flag in ((True, False) if i % 2 == 0 else (False, True)):
                    t0 = time.perf_counter()
                    sessions[flag].recall(q, k=args.k)
                    ms[flag].append((time.perf_counter() - t0) * 1000)
            for flag, name in ((True, "on"), (False, "off")):
                out[f"{name}@{size}"] = {"recall_p50_ms": p(ms[flag], 50),
                                         "recall_p95_ms": p(ms[flag], 95),
                                         "recall_mean_ms": statistics.fmean(ms[flag])}
    finally:
        off.close()
        on.close()
    return out


def delta(on: float, off: float) -> str:
    return f"{100 * (on - off) / off:+.1f}%" if off else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path(os.environ.get(
        "MINDPALACE_SHARED_DATA", HERE.parent.parent / "shared" / "data")), help="the shared data folder")
    ap.add_argument("--fast", action="store_true", help="20 runs; 10k and 100k facts")
    ap.add_argument("--runs", type=int, default=None, help="τ-bench runs (default 200, 20 with --fast)")
    ap.add_argument("--budget", type=int, default=2_000, help="step budget B (tokens)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="fact counts (default 10k 100k)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["steps", "recall"], default=None)
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = ap.parse_args(argv)
    args.runs = args.runs or (20 if args.fast else 200)
    args.sizes = sorted(args.sizes or [10_000, 100_000])
    console = Console(width=160)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mindpalace-bench-lineage-") as tmp:
        if args.only in (None, "steps"):
            result["steps"] = bench_steps(args, Path(tmp))
        if args.only in (None, "recall"):
            result["recall"] = bench_recall(args, Path(tmp))
    table = Table(title=f"bench_lineage: lineage on vs off, same run (limit ±{LIMIT_PCT:.0f}%)")
    for col in ("benchmark", "metric", "lineage off", "lineage on", "change"):
        table.add_column(col, justify="right")
    worst = float("-inf")
    if "steps" in result:
        on, off = result["steps"]["on"], result["steps"]["off"]
        label = f"steps: {args.runs} τ-bench runs, B={args.budget}"
        for metric in ("step_p50_ms", "step_p95_ms", "prepare_p50_ms", "prepare_p95_ms", "wall_s"):
            table.add_row(label, metric, f"{off[metric]:.2f}", f"{on[metric]:.2f}", delta(on[metric], off[metric]))
        table.add_row(label, "lineage events", str(off["lineage_events"]), str(on["lineage_events"]), "")
        worst = max(worst, 100 * (on["wall_s"] - off["wall_s"]) / off["wall_s"])
    if "recall" in result:
        for size in args.sizes:
            on, off = result["recall"][f"on@{size}"], result["recall"][f"off@{size}"]
            for metric in ("recall_p50_ms", "recall_p95_ms", "recall_mean_ms"):
                table.add_row(f"recall: {size:,} facts, {args.queries} queries", metric,
                              f"{off[metric]:.2f}", f"{on[metric]:.2f}", delta(on[metric], off[metric]))
            worst = max(worst, 100 * (on["recall_p50_ms"] - off["recall_p50_ms"]) / off["recall_p50_ms"])
    console.print(table)
    console.print(f"largest slowdown (steps wall time, recall p50): {worst:+.1f}% "
                  f"({'within' if worst <= LIMIT_PCT else 'OVER'} the {LIMIT_PCT:.0f}% budget)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
