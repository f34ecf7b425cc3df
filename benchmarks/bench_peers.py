"""mindpalace against its peers, side by side in one run: LangGraph's store and checkpointer, bm25s.

The peers are installed from PyPI into the benchmark's OWN virtual environment (never the
package's dependencies): ``--setup-peers`` creates it (default ``/tmp/mindpalace-peers-venv``,
from a Python whose ``sqlite3`` can load extensions — LangGraph's ``SqliteStore`` needs
sqlite-vec) with ``langgraph``, ``langgraph-checkpoint-sqlite``, ``bm25s`` and this repository
(only for its embedder). The peer side runs there as a subprocess; this process runs
mindpalace through its public API only (``Memory`` / ``Session`` / tasks / ledger), so it
measures whatever the product path is at this commit. Without the peer environment the peer
columns say ``n/a``.

Measured:

1. **LoCoMo recall latency** (``$MINDPALACE_SHARED_DATA/locomo/locomo10.json``, one scope per
   conversation, ~600 turns each): per-query p50 / p95 of ``Session.recall`` (k = 10) against
   LangGraph ``SqliteStore.search`` with the SAME embedder (mindpalace's default, wrapped as a
   LangGraph embed function) and against bm25s (tokenize + retrieve); evidence recall@10 of
   each beside it, so a faster system that finds less is visible. Each side's query time is
   also reported without its query embedding (the same model on both sides, timed inside the
   call): the rest is what the two stores do, and it does not swing with the embedder's share
   of a loaded machine the way the totals (measured minutes apart) do.
2. **Durable steps** at ``synchronous`` = FULL and NORMAL on both sides: one agent's
   checkpoint, a ledger tool call + checkpoint (three commits: ``started`` before the tool runs,
   its outcome, the checkpoint), the same tool step as ``call.run(fn, checkpoint=…)`` (two
   commits: the outcome and the checkpoint share one), start + finish step (mindpalace) against one
   LangGraph graph step (a looping one-node ``StateGraph`` compiled with ``SqliteSaver``,
   ``durability="sync"``; the node appends the same artifact, or calls the same tool); a bare
   ``write + fsync`` loop on the same disk as the floor; 8 agents (threads) on one store,
   aggregate durable steps/s, against LangGraph with the same 8 agents on one saver. The
   exactly-once floor row is what two bare fsyncs allow (``started`` must be durable before
   the side effect, the outcome before ``run`` returns): no ledger on this disk can beat it.
3. **Storage** (logical database size, ``page_count × page_size``, WAL included) after N/2 and
   N checkpoint steps: linear growth doubles from N/2 to N, quadratic quadruples.

Targets (issue 16), each row says whether it is met: LoCoMo query p95 below LangGraph's; at
FULL one agent's checkpoint within 1.5× one bare fsync; a ledger tool call ≥ 3× LangGraph's
steps/s; 8 agents aggregate ≥ 10× LangGraph's; storage linear.

    python benchmarks/bench_peers.py --setup-peers     # once: build the peer venv (PyPI)
    python benchmarks/bench_peers.py                   # 2 conversations, 300 steps, 2,000 for storage
    python benchmarks/bench_peers.py --quick           # 1 conversation cut to 80 turns, 40 steps
    python benchmarks/bench_peers.py --no-locomo       # durable steps and storage only
"""

from __future__ import annotations

import os

# Both sides embed every query with the same model (a numpy mat-mul chain): BLAS threads only
# add spin contention on a shared 2-core machine and make the embedding time swing with the
# load, so each side (this process and the peer subprocess, which inherits it) uses one.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PEER_VENV = Path("/tmp/mindpalace-peers-venv")
PEER_PACKAGES = ["langgraph", "langgraph-checkpoint-sqlite", "bm25s"]
SYNC_MODES = ("FULL", "NORMAL")
K = 10
_T0 = time.perf_counter()


def log(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


# -- shared helpers (both processes) ------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; nan for no values."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def latency(samples_s: Sequence[float], prefix: str = "") -> dict[str, float]:
    """{prefix + "p50_ms", prefix + "p95_ms", prefix + "n"} of `samples_s` (seconds)."""
    ms = [s * 1000 for s in samples_s]
    return {f"{prefix}p50_ms": percentile(ms, 50), f"{prefix}p95_ms": percentile(ms, 95), f"{prefix}n": len(ms)}


def recall_at_k(ranked: Sequence[str], evidence: Sequence[str]) -> float:
    return len(set(ranked[:K]) & set(evidence)) / len(evidence)


def db_bytes(path: Path) -> int:
    """Logical size of a SQLite database with its WAL (a fresh connection sees WAL frames)."""
    conn = sqlite3.connect(path)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(pages) * int(size)
    finally:
        conn.close()


def steps_per_second(step: Callable[[int], object], n: int, warmup: int = 3) -> float:
    for i in range(warmup):
        step(1_000_000 + i)  # warm-up steps, numbered apart from the timed ones
    start = time.perf_counter()
    for i in range(n):
        step(i)
    return n / (time.perf_counter() - start)


def concurrent_steps_per_second(make_step: Callable[[int], Callable[[int], object]], agents: int, n: int) -> float:
    """Aggregate steps/s of `agents` threads doing `n` steps each (make_step(a) per agent)."""
    steps = [make_step(a) for a in range(agents)]
    for s in steps:
        s(1_000_000)  # warm up each agent's session / thread outside the timed part

    def run(step: Callable[[int], object]) -> None:
        for i in range(n):
            step(i)

    return agents * n / timed_threads([lambda s=s: run(s) for s in steps])


def timed_threads(bodies: Sequence[Callable[[], object]]) -> float:
    """Run each body in its own thread, all released at once by a barrier; returns the seconds
    from the release until the last thread ends. An exception raised in a body is re-raised
    here after every thread has joined (never swallowed by the thread)."""
    barrier = threading.Barrier(len(bodies) + 1)
    errors: list[BaseException] = []

    def run(body: Callable[[], object]) -> None:
        barrier.wait()
        try:
            body()
        except BaseException as exc:  # reported after join
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


def fsync_per_second(folder: Path, n: int) -> float:
    """A bare durable append: write 64 bytes + os.fsync, n times, in `folder`."""
    path = folder / "fsync-floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        def step(_: int) -> None:
            os.write(fd, b"x" * 64)
            os.fsync(fd)
        return steps_per_second(step, n)
    finally:
        os.close(fd)
        path.unlink()


# -- the peer side (runs in the peer venv) ----------------------------------------------------------
def peer_main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    root = Path(spec["root"])
    out: dict[str, Any] = {"versions": _peer_versions()}
    if spec.get("locomo"):
        log("peer: LoCoMo on LangGraph SqliteStore and bm25s")
        out["locomo"] = _peer_locomo(root, spec["locomo"], spec["embed"])
    if spec.get("locomo_only"):
        Path(out_path).write_text(json.dumps(out), encoding="utf-8")
        return 0
    out["durable"] = {
        sync: _peer_durable(root / f"lg-{sync}", sync, spec["steps"], spec["agents"], spec["agent_steps"])
        for sync in SYNC_MODES
    }
    log("peer: storage")
    out["storage"] = _peer_storage(root / "lg-storage", spec["storage_steps"])
    Path(out_path).write_text(json.dumps(out), encoding="utf-8")
    return 0


def _peer_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in PEER_PACKAGES}


def _peer_locomo(root: Path, convs: list[dict[str, Any]], embed: str) -> dict[str, Any]:
    import bm25s
    from langgraph.store.base import PutOp
    from langgraph.store.sqlite import SqliteStore

    from mindpalace.providers.embed import make_embedder
    from mindpalace.settings import EmbedSettings

    embedder = make_embedder(EmbedSettings(provider=embed))  # type: ignore[arg-type]
    assert embedder is not None

    embed_s = [0.0]  # time spent embedding, so a query's search can be timed without it

    def embed_fn(texts: list[str]) -> list[list[float]]:
        start = time.perf_counter()
        out = [list(map(float, v)) for v in embedder.embed(list(texts))]
        embed_s[0] += time.perf_counter() - start
        return out

    root.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(root / "lg-store.db", check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn, index={"dims": embedder.dim, "embed": embed_fn, "fields": ["text"]})
    store.setup()
    lg_times: list[float] = []
    lg_search: list[float] = []
    bm_times: list[float] = []
    lg_recall: list[float] = []
    bm_recall: list[float] = []
    ingest = 0.0
    for conv in convs:
        ns = ("locomo", conv["id"])
        start = time.perf_counter()
        for i in range(0, len(conv["turns"]), 64):  # one embed call per batch, like mindpalace's sync
            store.batch([PutOp(ns, dia_id, {"text": text}) for dia_id, text in conv["turns"][i:i + 64]])
        ingest += time.perf_counter() - start
        ids = [d for d, _ in conv["turns"]]
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize([t for _, t in conv["turns"]], stopwords="en", show_progress=False),
                        show_progress=False)
        store.search(ns, query="warm up", limit=K)  # first query loads the model
        for question, evidence in conv["questions"]:
            embed_s[0] = 0.0
            start = time.perf_counter()
            items = store.search(ns, query=question, limit=K)
            lg_times.append(time.perf_counter() - start)
            lg_search.append(lg_times[-1] - embed_s[0])
            lg_recall.append(recall_at_k([i.key for i in items], evidence))
            start = time.perf_counter()
            tokens = bm25s.tokenize([question], stopwords="en", show_progress=False)
            docs, _ = retriever.retrieve(tokens, k=min(K, len(ids)), show_progress=False)
            bm_times.append(time.perf_counter() - start)
            bm_recall.append(recall_at_k([ids[int(j)] for j in docs[0]], evidence))
    conn.close()
    return {
        "langgraph": {**latency(lg_times), **latency(lg_search, "search_"),
                      "recall_at_10": statistics.fmean(lg_recall), "ingest_s": ingest},
        "bm25s": {**latency(bm_times), "recall_at_10": statistics.fmean(bm_recall)},
    }


def _lg_app(saver: Any, *, tool: bool) -> Any:
    import operator
    from typing import Annotated, TypedDict

    from langgraph.graph import END, START, StateGraph

    # functional form: the module's postponed annotations would not resolve a local class's
    State = TypedDict("State", {"items": Annotated[list[dict[str, Any]], operator.add], "target": int})  # noqa: UP013

    def step(state: Any) -> dict[str, Any]:
        i = len(state["items"])
        if tool:
            return {"items": [{f"ticket:{i}": book_ticket(f"p{i}", "2025-05-20")}]}
        return {"items": [{f"ticket:{i}": {"booking_id": f"TK{i}"}}]}

    def more(state: Any) -> str:
        return "step" if len(state["items"]) < state["target"] else END

    graph = StateGraph(State)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", more)
    return graph.compile(checkpointer=saver)


def _lg_saver(path: Path, sync: str) -> tuple[Any, sqlite3.Connection]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous={sync}")
    got = conn.execute("PRAGMA synchronous").fetchone()[0]
    assert got == {"FULL": 2, "NORMAL": 1}[sync], f"synchronous={sync} did not stick ({got})"
    return saver, conn


def _lg_run(app: Any, thread: str, steps: int) -> float:
    """Run `steps` graph steps of one agent in one invoke; returns the seconds taken."""
    cfg: dict[str, Any] = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    state = app.get_state(cfg)
    done = len(state.values.get("items", [])) if state.values else 0
    start = time.perf_counter()
    app.invoke({"items": [], "target": done + steps}, cfg, durability="sync")
    return time.perf_counter() - start


def _peer_durable(folder: Path, sync: str, steps: int, agents: int, agent_steps: int) -> dict[str, float]:
    log(f"peer: durable steps, synchronous={sync}")
    saver, conn = _lg_saver(folder / "lg.db", sync)
    out = {}
    for name, tool in (("step", False), ("tool_step", True)):
        app = _lg_app(saver, tool=tool)
        _lg_run(app, f"warm-{name}", 3)
        out[name] = steps / _lg_run(app, f"one-{name}", steps)
    app = _lg_app(saver, tool=False)
    for a in range(agents):
        _lg_run(app, f"agent-{a}", 1)
    seconds = timed_threads([lambda a=a: _lg_run(app, f"agent-{a}", agent_steps) for a in range(agents)])
    out["agents"] = agents * agent_steps / seconds
    conn.close()
    return out


def _peer_storage(folder: Path, steps: int) -> dict[str, int]:
    saver, conn = _lg_saver(folder / "lg.db", "NORMAL")
    app = _lg_app(saver, tool=False)
    _lg_run(app, "storage", steps // 2)
    half = db_bytes(folder / "lg.db")
    _lg_run(app, "storage", steps - steps // 2)
    full = db_bytes(folder / "lg.db")
    conn.close()
    return {"half": half, "full": full}


def book_ticket(place: str, date: str) -> dict[str, str]:
    """The side-effecting tool of the durable workloads (the same on both sides)."""
    return {"booking_id": f"TK-{place}", "place": place, "date": date}


# -- the mindpalace side ---------------------------------------------------------------------------
def load_conversations(path: Path, conversations: int, max_turns: int, max_questions: int) -> list[Any]:
    from mindpalace.eval.locomo import load_locomo

    convs = load_locomo(path)[:conversations]
    out = []
    for c in convs:
        turns = c.turns[:max_turns] if max_turns else c.turns
        known = {t.dia_id for t in turns}
        qs = [q for q in c.questions if set(q.evidence) <= known]
        out.append((c, turns, qs[:max_questions] if max_questions else qs))
    return out


def mp_locomo(root: Path, convs: list[Any], embed: str) -> dict[str, Any]:
    from mindpalace import Memory
    from mindpalace.eval.locomo import turn_content

    times: list[float] = []
    search: list[float] = []
    recalls: list[float] = []
    ingest = 0.0
    with Memory.open(root / "mp-locomo", embed={"provider": embed}) as mem:
        embed_s = _time_query_embedding(mem)
        for conv, turns, questions in convs:
            s = mem.session("conversation", user=conv.sample_id, agent="bench")
            start = time.perf_counter()
            indexes = s.messages.add_many(
                [{"role": "user", "name": t.speaker, "content": turn_content(t, captions=True)} for t in turns],
                timestamps=[t.date for t in turns],
            )
            where = {str(i): t.dia_id for i, t in zip(indexes, turns, strict=True)}
            s.recall("warm up", k=K)  # embeds the new turns: ingest cost, not query cost
            ingest += time.perf_counter() - start
            for q in questions:
                embed_s[0] = 0.0
                start = time.perf_counter()
                hits = s.recall(q.question, k=K)
                times.append(time.perf_counter() - start)
                search.append(times[-1] - embed_s[0])
                ranked = [where[h.ref] for h in hits if h.tier == "message" and h.ref in where]
                recalls.append(recall_at_k(ranked, q.evidence))
    return {**latency(times), **latency(search, "search_"),
            "recall_at_10": statistics.fmean(recalls) if recalls else float("nan"), "ingest_s": ingest}


def _time_query_embedding(mem: Any) -> list[float]:
    """Make the retriever's embedder add the seconds of each ``embed_query`` to the returned
    one-element list (the caller zeroes it before a query)."""
    embedder = mem.retriever.embedder
    spent = [0.0]
    if embedder is None:
        return spent
    inner = embedder.embed_query

    def embed_query(text: str) -> Any:
        start = time.perf_counter()
        try:
            return inner(text)
        finally:
            spent[0] += time.perf_counter() - start

    embedder.embed_query = embed_query
    return spent


def mp_durable(root: Path, sync: str, steps: int, agents: int, agent_steps: int) -> dict[str, float]:
    from mindpalace import Memory

    out = {}
    with Memory.open(root / f"mp-{sync}", embed={"provider": "none"}, store={"synchronous": sync}) as mem:
        s = mem.session("one", user="bench", agent="a0")

        def checkpoint(i: int) -> None:
            s.checkpoint(step=i, artifacts={f"ticket:{i}": {"booking_id": f"TK{i}"}})

        def tool_call(i: int) -> None:
            with s.tool_call("book_ticket", {"place": f"p{i}", "date": "2025-05-20"}) as call:
                result = call.result if call.done else call.run(book_ticket)
            s.checkpoint(step=i, artifacts={f"ticket:{i}": result})

        def tool_step(i: int) -> None:
            # the same durable tool step with the outcome and the checkpoint in ONE commit: the
            # result itself is durable in the ledger row written by that commit
            with s.tool_call("book_ticket2", {"place": f"p{i}", "date": "2025-05-20"}) as call:
                if not call.done:
                    call.run(book_ticket, checkpoint={"step": i, "artifacts": {f"ticket:{i}": f"p{i}"}})

        def start_finish(i: int) -> None:
            s.task.start_step(i + 10_000_000, f"step {i}")
            s.task.finish_step(i + 10_000_000, output={"text": f"booked p{i}"})

        out["checkpoint"] = steps_per_second(checkpoint, steps)
        out["tool_call"] = steps_per_second(tool_call, steps)
        out["tool_step"] = steps_per_second(tool_step, steps)
        out["start_finish"] = steps_per_second(start_finish, steps)

        def make_agent(a: int) -> Callable[[int], object]:
            agent = mem.session(f"agent-{a}", user="bench", agent=f"a{a}")
            return lambda i: agent.checkpoint(step=i, artifacts={f"ticket:{i}": {"booking_id": f"TK{i}"}})

        out["agents"] = concurrent_steps_per_second(make_agent, agents, agent_steps)
    return out


def mp_storage(root: Path, steps: int) -> dict[str, int]:
    from mindpalace import Memory

    folder = root / "mp-storage"
    with Memory.open(folder, embed={"provider": "none"}) as mem:
        s = mem.session("storage", user="bench", agent="a0")
        empty = db_bytes(folder / "memory.db")
        for i in range(steps // 2):
            s.checkpoint(step=i, artifacts={f"ticket:{i}": {"booking_id": f"TK{i}"}})
        half = db_bytes(folder / "memory.db")
        for i in range(steps // 2, steps):
            s.checkpoint(step=i, artifacts={f"ticket:{i}": {"booking_id": f"TK{i}"}})
        full = db_bytes(folder / "memory.db")
    return {"half": half - empty, "full": full - empty}


# -- running the peer side ---------------------------------------------------------------------------
def setup_peers(venv: Path) -> None:
    """Create the peer venv from a Python whose sqlite3 can load extensions, install the peers."""
    python = next((p for p in ("/usr/bin/python3", sys.executable, shutil.which("python3") or "")
                   if p and _loads_extensions(p)), None)
    if python is None:
        raise SystemExit("no Python here has a sqlite3 that can load extensions (LangGraph's "
                         "SqliteStore needs sqlite-vec)")
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *PEER_PACKAGES, "-e", str(REPO)], check=True)


def _loads_extensions(python: str) -> bool:
    probe = "import sqlite3; sqlite3.connect(':memory:').enable_load_extension(True)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def run_peers(python: Path, spec: dict[str, Any], root: Path) -> dict[str, Any] | None:
    if not python.exists():
        return None
    spec_path, out_path = root / "peer-spec.json", root / "peer-out.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    # the peer's progress and errors go straight to our stderr
    proc = subprocess.run([str(python), __file__, "--peer-side", str(spec_path), str(out_path)])
    if proc.returncode != 0:
        raise SystemExit(f"the peer side failed (exit {proc.returncode}); see the error above")
    result: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
    return result


# -- the table -------------------------------------------------------------------------------------------
def fmt(x: float | None, spec: str = ",.0f") -> str:
    return "n/a" if x is None or x != x else format(x, spec)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("yes" if ok else "NO")


def build_rows(mp: dict[str, Any], peer: dict[str, Any] | None, floor: dict[str, float]) -> list[list[str]]:
    rows: list[list[str]] = []
    loc = mp.get("locomo")
    if loc is not None:
        lg = peer["locomo"]["langgraph"] if peer else None
        bm = peer["locomo"]["bm25s"] if peer else None
        for q in ("p50_ms", "p95_ms"):
            target = "p95 < LangGraph's" if q == "p95_ms" else ""
            ok = None if lg is None or q != "p95_ms" else loc[q] < lg[q]
            rows.append([f"LoCoMo, {loc['n']} queries", f"query {q[:3]} (ms)", fmt(loc[q], ".2f"),
                         fmt(lg[q] if lg else None, ".2f"), fmt(bm[q] if bm else None, ".2f"),
                         fmt(lg[q] / loc[q] if lg else None, ".2f") + ("×" if lg else ""),
                         target, verdict(ok) if target else ""])
        for q in ("search_p50_ms", "search_p95_ms"):
            target = "p95 < LangGraph's" if q == "search_p95_ms" else ""
            have = lg is not None and q in lg
            ok = None if not have or not target else loc[q] < lg[q]
            rows.append([f"LoCoMo, {loc['n']} queries", f"query {q[7:10]} without the query embedding (ms)",
                         fmt(loc[q], ".2f"), fmt(lg[q] if have else None, ".2f"), "",
                         fmt(lg[q] / loc[q] if have else None, ".2f") + ("×" if have else ""),
                         target, verdict(ok) if target else ""])
        rows.append([f"LoCoMo, {loc['n']} queries", "evidence recall@10", fmt(loc["recall_at_10"], ".3f"),
                     fmt(lg["recall_at_10"] if lg else None, ".3f"), fmt(bm["recall_at_10"] if bm else None, ".3f"),
                     "", "", ""])
        rows.append([f"LoCoMo, {loc['n']} queries", "ingest incl. embedding (s)", fmt(loc["ingest_s"], ".1f"),
                     fmt(lg["ingest_s"] if lg else None, ".1f"), "", "", "", ""])
    if "durable" not in mp:  # --locomo-only
        return rows
    for sync in SYNC_MODES:
        d = mp["durable"][sync]
        p = peer["durable"][sync] if peer else None
        fs = floor["fsync"]
        where = f"durable, synchronous={sync}"
        ratio_floor = fs / d["checkpoint"]
        rows.append([where, "bare write+fsync /s (floor)", fmt(fs), "", "", "", "", ""])
        rows.append([where, "checkpoint steps/s", fmt(d["checkpoint"]), fmt(p["step"] if p else None), "",
                     fmt(d["checkpoint"] / p["step"] if p else None, ".1f") + ("×" if p else ""),
                     "≤ 1.5× one fsync" if sync == "FULL" else "",
                     f"{verdict(ratio_floor <= 1.5)} ({ratio_floor:.2f}× fsync)" if sync == "FULL" else
                     f"({ratio_floor:.2f}× fsync)"])
        # exactly-once needs `started` durable before the tool runs and the outcome durable
        # before run() returns: two fsyncs, whatever the engine — the ceiling of the rows below
        # (at NORMAL a WAL commit does not fsync, so there is no such floor)
        if sync == "FULL":
            rows.append([where, "exactly-once floor: 2 bare fsyncs per tool call /s", fmt(fs / 2),
                         fmt(p["tool_step"] if p else None), "",
                         fmt(fs / 2 / p["tool_step"] if p else None, ".1f") + ("×" if p else ""), "", ""])
        for label, key in (("ledger tool call + checkpoint /s (3 commits)", "tool_call"),
                           ("ledger tool call, run(checkpoint=…) /s (2 commits)", "tool_step")):
            tool_ratio = d[key] / p["tool_step"] if p else None
            rows.append([where, label, fmt(d[key]), fmt(p["tool_step"] if p else None),
                         "", fmt(tool_ratio, ".1f") + ("×" if p else ""), "≥ 3× LangGraph" if sync == "FULL" else "",
                         verdict(None if tool_ratio is None else tool_ratio >= 3) if sync == "FULL" else ""])
        rows.append([where, "start + finish step /s", fmt(d["start_finish"]), fmt(p["step"] if p else None), "",
                     fmt(d["start_finish"] / p["step"] if p else None, ".1f") + ("×" if p else ""), "", ""])
        agents_ratio = d["agents"] / p["agents"] if p else None
        rows.append([where, f"{mp['agents']} agents, aggregate steps/s", fmt(d["agents"]),
                     fmt(p["agents"] if p else None), "", fmt(agents_ratio, ".1f") + ("×" if p else ""),
                     "≥ 10× LangGraph" if sync == "FULL" else "",
                     verdict(None if agents_ratio is None else agents_ratio >= 10) if sync == "FULL" else ""])
    st = mp["storage"]
    ps = peer["storage"] if peer else None
    n = mp["storage_steps"]
    for label, key in ((f"after {n // 2:,} steps (MB)", "half"), (f"after {n:,} steps (MB)", "full")):
        rows.append(["storage", label, fmt(st[key] / 1e6, ".2f"), fmt(ps[key] / 1e6 if ps else None, ".2f"),
                     "", "", "", ""])
    growth = st["full"] / max(1, st["half"])
    pgrowth = ps["full"] / max(1, ps["half"]) if ps else None
    rows.append(["storage", f"growth {n // 2:,} → {n:,} steps (2 = linear, 4 = quadratic)", fmt(growth, ".2f"),
                 fmt(pgrowth, ".2f"), "", "", "linear", verdict(growth < 2.5)])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--quick", "--fast", dest="quick", action="store_true", help="1 conversation cut to 80 turns, 40 steps, 200 for storage.")
    ap.add_argument("--setup-peers", action="store_true", help="Create the peer venv (PyPI) and exit.")
    ap.add_argument("--peer-venv", type=Path, default=DEFAULT_PEER_VENV, help="The peers' own virtual environment.")
    ap.add_argument("--data", type=Path, default=None,
                    help="locomo10.json (default $MINDPALACE_SHARED_DATA/locomo/locomo10.json).")
    ap.add_argument("--no-locomo", action="store_true", help="Skip the LoCoMo part (durable steps and storage only).")
    ap.add_argument("--conversations", type=int, default=None, help="LoCoMo conversations (default 2, ~1,200 turns; quick 1).")
    ap.add_argument("--max-turns", type=int, default=None, help="Turns per conversation, 0 = all (quick 80).")
    ap.add_argument("--max-questions", type=int, default=None, help="Questions per conversation, 0 = all (quick 15).")
    ap.add_argument("--embed", default="use", help="Embedder of both sides (default: mindpalace's default, use).")
    ap.add_argument("--steps", type=int, default=None, help="Durable steps per single-agent workload (default 300).")
    ap.add_argument("--agents", type=int, default=8, help="Concurrent agents on one store.")
    ap.add_argument("--agent-steps", type=int, default=None, help="Steps per concurrent agent (default 100).")
    ap.add_argument("--storage-steps", type=int, default=None, help="Checkpoint steps for the storage rows (default 2,000).")
    ap.add_argument("--locomo-only", action="store_true", help="Only the LoCoMo recall rows (no durable steps, no storage).")
    ap.add_argument("--dir", type=Path, default=None, help="Folder for the databases (default: a temp folder).")
    ap.add_argument("--json", type=Path, default=None, help="Also write every number to this file.")
    ap.add_argument("--peer-side", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.peer_side:
        return peer_main(*args.peer_side)
    if args.setup_peers:
        setup_peers(args.peer_venv)
        return 0
    quick = args.quick
    steps = args.steps or (40 if quick else 300)
    agent_steps = args.agent_steps or (10 if quick else 100)
    storage_steps = args.storage_steps or (200 if quick else 2000)
    shared = Path(os.environ.get("MINDPALACE_SHARED_DATA", REPO.parent / "shared" / "data"))
    data = args.data or shared / "locomo" / "locomo10.json"
    root = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=args.dir))
    try:
        convs = []
        if data.is_file() and not args.no_locomo:
            convs = load_conversations(data, args.conversations or (1 if quick else 2),
                                       80 if args.max_turns is None and quick else (args.max_turns or 0),
                                       15 if args.max_questions is None and quick else (args.max_questions or 0))
        mp: dict[str, Any] = {"agents": args.agents, "storage_steps": storage_steps}
        floor = {"fsync": fsync_per_second(root, steps)}
        if convs:
            log(f"mindpalace: LoCoMo, {len(convs)} conversation(s)")
            mp["locomo"] = mp_locomo(root, convs, args.embed)
        if not args.locomo_only:
            log("mindpalace: durable steps")
            mp["durable"] = {sync: mp_durable(root, sync, steps, args.agents, agent_steps) for sync in SYNC_MODES}
            log("mindpalace: storage")
            mp["storage"] = mp_storage(root, storage_steps)
        spec = {
            "root": str(root / "peer"), "embed": args.embed, "steps": steps, "agents": args.agents,
            "agent_steps": agent_steps, "storage_steps": storage_steps, "locomo_only": args.locomo_only,
            "locomo": [{"id": c.sample_id,
                        "turns": [[t.dia_id, _turn_text(t)] for t in turns],
                        "questions": [[q.question, list(q.evidence)] for q in qs]} for c, turns, qs in convs],
        }
        log(f"peers: {args.peer_venv}")
        peer = run_peers(args.peer_venv / "bin" / "python", spec, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(build_rows(mp, peer, floor), peer, quick, data if convs else None)
    if args.json:
        args.json.write_text(json.dumps({"mindpalace": mp, "peers": peer, "floor": floor}, indent=2), encoding="utf-8")
    return 0


def _turn_text(turn: Any) -> str:
    from mindpalace.eval.locomo import turn_content

    return turn_content(turn, captions=True)


def print_table(rows: list[list[str]], peer: dict[str, Any] | None, quick: bool, data: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    versions = ", ".join(f"{k} {v}" for k, v in peer["versions"].items()) if peer else "peer venv absent: n/a"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() or "?"
    table = Table(title=f"bench_peers — {datetime.now(UTC):%Y-%m-%d} — commit {commit} — {versions}"
                  + (" (quick)" if quick else "") + ("" if data else " — LoCoMo data absent"))
    for col in ("workload", "metric", "mindpalace", "LangGraph", "bm25s", "mindpalace speed-up",
                "target", "met"):
        table.add_column(col, justify="left" if col in ("workload", "metric", "target") else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
