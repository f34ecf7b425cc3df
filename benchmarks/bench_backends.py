"""SQLite against PostgreSQL in one run, then many worker processes on one PostgreSQL memory.

Per backend (same machine, same run, same data):

* **event appends/s** — ``store.append_events`` of one event per call (one commit each).
  Durability differs by default: PostgreSQL fsyncs every commit (``synchronous_commit=on``:
  survives power loss), SQLite's default ``synchronous=NORMAL`` does not (survives a process
  crash); the ``sqlite FULL`` row (fsync per commit) is the like-for-like line;
* **recall p95** — hybrid retrieval (BM25 + vector, fused) over ``--facts`` long-term fact
  documents of one user (100,000 at full size; SQLite: exact cosine, PostgreSQL: pgvector
  HNSW), ``Memory.retriever.search`` as ``Session.recall`` calls it, over varied queries;
* **context build p95** — ``Session.context()`` of a 200-message session with recall on.

Then the **scaling table**: 1, 2, 4 and 8 worker processes on one PostgreSQL memory, each
running agent turns (a user message, a remembered fact, a recall, an assistant message) on its
own session of one shared user; throughput (turns/s over all workers, from a common start)
and the p95 of one turn. The machine's core count is printed with it: with 2 (shared) cores,
more than 2 workers add waiting, not parallel work.

PostgreSQL: ``--url`` (or ``MINDPALACE_DATABASE_URL``), else the development server of
:mod:`mindpalace.store.postgres.dev` is started; every run uses fresh schemas.

    python benchmarks/bench_backends.py --fast
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.scope import Scope
from mindpalace.store import NewEvent
from mindpalace.testing import postgres
from mindpalace.testing.workload import CITIES, THINGS, agent_turns, fact_text

EMBED = {"provider": "hashing"}


def p95(samples: list[float]) -> float:
    return float(np.percentile(np.asarray(samples), 95)) * 1000.0  # ms


def open_memory(backend: str, folder: Path, url: str | None, synchronous: str = "NORMAL") -> Memory:
    return Memory.open(folder, embed=EMBED, database_url=url if backend == "postgres" else None,
                       store={"synchronous": synchronous})


def bench_appends(mem: Memory, n: int) -> float:
    scope = Scope("bench", "u", "a", "appends")
    start = time.perf_counter()
    for i in range(n):
        mem.store.append_events(scope, "s", [NewEvent("tool_result", {"i": i, "ok": True})])
    return n / (time.perf_counter() - start)


def load_facts(mem: Memory, n: int, rng: random.Random) -> Scope:
    """`n` long-term fact documents of one user, embedded with the workspace's embedder."""
    scope = Scope("bench", "alice", "", "")
    assert mem.embedder is not None
    batch = 1000
    for start in range(0, n, batch):
        texts = [fact_text(i, rng) for i in range(start, min(n, start + batch))]
        with mem.store.transaction():
            ids = [mem.store.index_document(scope, "fact", f"f{start + j}", t)
                   for j, t in enumerate(texts)]
        vectors = mem.embedder.embed(texts)
        mem.store.put_embeddings(ids, np.asarray(vectors, dtype=np.float32),
                                 mem.embedder.model_id)
    return scope


def bench_recall(mem: Memory, scope: Scope, queries: int, rng: random.Random) -> float:
    searched = Scope("bench", "alice", "", "")
    samples = []
    for _ in range(queries):
        q = f"{rng.choice(THINGS)} in {rng.choice(CITIES)}"
        start = time.perf_counter()
        mem.retriever.search(searched, q, k=10)
        samples.append(time.perf_counter() - start)
    return p95(samples)


def bench_context(mem: Memory, builds: int, rng: random.Random) -> float:
    s = mem.session("ctx", user="alice", agent="a")
    for i in range(200):
        s.add_message({"role": "user" if i % 2 == 0 else "assistant",
                       "content": f"turn {i}: {fact_text(i, rng)}"})
    s.context()  # warm caches once, as an agent loop would have
    samples = []
    for _ in range(builds):
        start = time.perf_counter()
        s.context(query=f"{rng.choice(THINGS)} in {rng.choice(CITIES)}")
        samples.append(time.perf_counter() - start)
    return p95(samples)


def backend_row(backend: str, url: str | None, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp, open_memory(backend, Path(tmp) / "ws", url) as mem:
        appends = bench_appends(mem, args.appends)
        t0 = time.perf_counter()
        scope = load_facts(mem, args.facts, rng)
        load_s = time.perf_counter() - t0
        recall = bench_recall(mem, scope, args.queries, rng)
        context = bench_context(mem, args.builds, rng)
    return {"backend": backend, "appends_per_s": round(appends, 1), "facts": args.facts,
            "load_s": round(load_s, 1), "recall_p95_ms": round(recall, 2),
            "context_p95_ms": round(context, 2)}


# -- scaling -----------------------------------------------------------------------------------
def scaling_row(url: str, workers: int, turns: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, ctx.Manager() as manager:
        start = manager.Barrier(workers)
        with ctx.Pool(workers) as pool:
            results = pool.starmap(agent_turns, [(url, tmp, p, turns, start) for p in range(workers)])
    samples = [r for rows in results for r in rows]
    first = min(t for t, _ in samples)
    last = max(t + d for t, d in samples)
    return {"workers": workers, "turns": len(samples),
            "turns_per_s": round(len(samples) / (last - first), 2),
            "turn_p95_ms": round(p95([d for _, d in samples]), 1)}


def fresh_url(base: str) -> tuple[str, str]:
    schema = postgres.fresh_schema_name()
    return postgres.create_schema_url(base, schema), schema


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=os.environ.get("MINDPALACE_DATABASE_URL"),
                    help="PostgreSQL server (default: MINDPALACE_DATABASE_URL, else the dev server)")
    ap.add_argument("--appends", type=int, default=2000, help="single-event appends per backend")
    ap.add_argument("--facts", type=int, default=100_000, help="fact documents for recall")
    ap.add_argument("--queries", type=int, default=200, help="recall queries per backend")
    ap.add_argument("--builds", type=int, default=50, help="context builds per backend")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--turns", type=int, default=30, help="agent turns per worker")
    ap.add_argument("--fast", action="store_true",
                    help="bounded: 300 appends, 5,000 facts, 50 queries, 20 builds, 8 turns")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.fast:
        args.appends, args.facts, args.queries, args.builds, args.turns = 300, 5000, 50, 20, 8
    base = args.url
    if not base:
        base, why = postgres.database_url()
        if base is None:
            print(f"error: {why}", file=sys.stderr)
            return 1
    schemas: list[str] = []

    def with_schema(fn: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        url, schema = fresh_url(base)
        schemas.append(schema)
        try:
            return fn(url)
        finally:
            postgres.drop_schema(base, schema)

    with tempfile.TemporaryDirectory() as tmp, \
            open_memory("sqlite", Path(tmp) / "ws", None, "FULL") as full:
        full_row = {"backend": "sqlite FULL", "appends_per_s": round(bench_appends(full, args.appends), 1)}
    rows = [backend_row("sqlite", None, args), full_row,
            with_schema(lambda url: backend_row("postgres", url, args))]
    scaling = [with_schema(lambda url, n=n: scaling_row(url, n, args.turns))
               for n in args.workers]
    cores = os.cpu_count()
    table = Table(title=f"store backends, same run ({cores} cores)")
    for col in ("backend", "event appends/s", f"recall p95 ms ({args.facts:,} facts)",
                "context build p95 ms", "fact load s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["backend"], f"{r['appends_per_s']:,.0f}",
                      *(f"{r[c]:.1f}" if c in r else "–"
                        for c in ("recall_p95_ms", "context_p95_ms", "load_s")))
    scale = Table(title=f"PostgreSQL, N worker processes, {args.turns} turns each "
                        f"(machine: {cores} shared cores)")
    for col in ("workers", "turns", "turns/s", "turn p95 ms"):
        scale.add_column(col, justify="right")
    for r in scaling:
        scale.add_row(str(r["workers"]), str(r["turns"]), f"{r['turns_per_s']:.1f}",
                      f"{r['turn_p95_ms']:.1f}")
    console = Console(width=140)
    console.print(table)
    console.print(scale)
    if args.json:
        args.json.write_text(json.dumps({"cores": cores, "backends": rows, "scaling": scaling},
                                        indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
