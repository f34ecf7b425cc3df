"""A huge tool output (tens of MB) against a small one, in the same run: write, recall after it, memory, disk.

Each case runs in a fresh subprocess (so peak RSS is its own) on a fresh workspace with the
default embedder: a session with `--context` small messages (recall warmed, vectors synced),
then ONE tool output recorded through the public API — ``steps.evaluate(tool_outputs=[…])``
(kept whole in record ``step_N.output_1``) or ``add_message({"role": "tool", …})`` — then
``Session.recall`` of a phrase that occurs only in the output's last line.

Printed per case: output size, write seconds, the first recall after it (what the issue's
"recall afterwards took 102 s" measured) and the p50 of 5 more, the first recall after
reopening the workspace (the in-process keyword index built from scratch), whether the tail phrase was
found by recall (top 5) and by the store's keyword index alone (with its time), database growth (``page_count × page_size``, WAL included) and peak RSS (before the reopen,
which loads the embedder a second time), the output's raw UTF-8 size and its size compressed
as the store compresses a blob, and the growth's share of the two FTS5 indexes (``dbstat``);
"growth − index vs compressed" = (growth − both indexes) / compressed size. The added
latency = first recall after the huge output − first recall after the small one (target
issue 16: under 1 s for 50 MB).

    python benchmarks/bench_payloads.py                 # 50 MB vs 1 KB, step output and tool message
    python benchmarks/bench_payloads.py --fast          # 5 MB, step output only
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mindpalace.testing.workload import TAIL_PHRASE, log_output

INDEX_PREFIXES = {"word index": "docs_fts", "trigram index": "docs_tri"}
"""dbstat object-name prefixes of the FTS5 indexes (their shadow tables)."""

STORE_CHUNK_CHARS = 65_536
STORE_ZLIB_LEVEL = 1
"""The store's blob codec (mindpalace.store.blobs): zlib level 1 per 64 Ki-character chunk;
repeated here so the bench also runs against a checkout without blobs (the baseline)."""


def compressed_bytes(text: str) -> int:
    """Bytes of `text` compressed as the store compresses a blob (each chunk kept raw when
    zlib would not save space)."""
    total = 0
    for start in range(0, len(text), STORE_CHUNK_CHARS):
        raw = text[start:start + STORE_CHUNK_CHARS].encode("utf-8")
        total += min(len(raw), len(zlib.compress(raw, STORE_ZLIB_LEVEL)))
    return total


def object_bytes(path: Path) -> dict[str, int]:
    """Bytes per group of database objects (``dbstat``): each FTS5 index, the rest."""
    conn = sqlite3.connect(path)
    try:
        out = dict.fromkeys([*INDEX_PREFIXES, "rows and blobs"], 0)
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            group = next((g for g, p in INDEX_PREFIXES.items() if name.startswith(p)), "rows and blobs")
            out[group] += int(size)
        return out
    finally:
        conn.close()


def db_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_count").fetchone()[0]) * int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def run_case(chars: int, path: str, embed: str, context: int) -> dict[str, Any]:
    """One case in this process; returns its numbers."""
    from mindpalace import Memory

    with tempfile.TemporaryDirectory() as tmp, Memory.open(tmp, embed={"provider": embed}) as mem:
        s = mem.session("payload", user="bench", agent="a0")
        s.messages.add_many([{"role": "user", "content": f"note {i}: the build of module m{i} passed"}
                             for i in range(context)])
        s.recall("warm up", k=5)  # loads the model, embeds the context
        before = db_bytes(Path(tmp) / "memory.db")
        objects_before = object_bytes(Path(tmp) / "memory.db")
        text = log_output(chars)
        start = time.perf_counter()
        if path == "step":
            step = s.steps.begin("dump the build log", action="cat build.log")
            s.steps.evaluate(step, "success", tool_outputs=[text])
        else:
            s.add_message({"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]})
            s.add_message({"role": "tool", "tool_call_id": "c1", "content": text})
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        hits = s.recall(TAIL_PHRASE, k=5)
        first_s = time.perf_counter() - start
        found = any(TAIL_PHRASE in h.text for h in hits)
        start = time.perf_counter()
        keyword = mem.store.keyword_search(s.scope, TAIL_PHRASE, k=5)
        keyword_s = time.perf_counter() - start
        in_index = any(TAIL_PHRASE in h.doc.text for h in keyword)
        more = []
        for q in ("build log status", "module m3 passed", TAIL_PHRASE, "items sha", "report ends"):
            start = time.perf_counter()
            s.recall(q, k=5)
            more.append(time.perf_counter() - start)
        grown = db_bytes(Path(tmp) / "memory.db") - before
        objects = {k: v - objects_before[k] for k, v in object_bytes(Path(tmp) / "memory.db").items()}
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before a 2nd model
        with Memory.open(tmp, embed={"provider": embed}) as again:  # a restarted agent
            reopened = again.session("payload", user="bench", agent="a0")
            reopened.recall("warm up", k=5)  # loads the model and the vectors, as above
            again.store._bm25 = None  # the warm-up's keyword search built it: start cold
            start = time.perf_counter()
            reopened.recall(TAIL_PHRASE, k=5)
            reopen_s = time.perf_counter() - start
    return {
        "reopen_recall_s": reopen_s,
        "path": path, "chars": len(text), "write_s": write_s, "recall_after_s": first_s,
        "recall_p50_s": statistics.median(more), "found_tail": found,
        "keyword_tail": in_index, "keyword_s": keyword_s, "db_growth_bytes": grown,
        "peak_rss_bytes": peak, "raw_bytes": len(text.encode("utf-8")),
        "compressed_bytes": compressed_bytes(text), "growth_by_object": objects,
    }


def spawn(chars: int, path: str, embed: str, context: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--case", str(chars), path, "--embed", embed,
                          "--context", str(context)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"case {path} {chars} chars failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--mb", type=float, default=None, help="Size of the huge output (MB of characters; default 50, fast 5).")
    ap.add_argument("--small-chars", type=int, default=1_000, help="Size of the baseline output (characters).")
    ap.add_argument("--embed", default="use", help="Embedder (default: mindpalace's default, use).")
    ap.add_argument("--context", type=int, default=200, help="Small messages in the session before the output.")
    ap.add_argument("--fast", action="store_true", help="5 MB, step outputs only (no tool-message rows).")
    ap.add_argument("--json", type=Path, default=None, help="Also write the rows to this file.")
    ap.add_argument("--case", nargs=2, metavar=("CHARS", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(int(args.case[0]), args.case[1], args.embed, args.context)))
        return 0
    rows = []
    for path in ("step",) if args.fast else ("step", "message"):
        small = spawn(args.small_chars, path, args.embed, args.context)
        mb = args.mb if args.mb is not None else (5.0 if args.fast else 50.0)
        big = spawn(int(mb * 1_000_000), path, args.embed, args.context)
        big["added_latency_s"] = big["recall_after_s"] - small["recall_after_s"]
        rows += [small, big]
    print_table(rows, args)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parents[1],
                            capture_output=True, text=True).stdout.strip() or "?"
    table = Table(title=f"bench_payloads — {datetime.now(UTC):%Y-%m-%d} — commit {commit} — embed {args.embed}, "
                        f"{args.context} context messages; baseline = the small output, same run")
    for col in ("recorded as", "output", "write (s)", "first recall after (s)", "recall p50 (s)",
                "added latency vs small (s)", "first recall after reopen (s)", "tail in recall top 5",
                "tail in keyword index (s)", "raw / compressed output (MB)", "DB growth (MB)",
                "of it: word / trigram index (MB)", "growth − index vs compressed", "peak RSS (MB)"):
        table.add_column(col, justify="left" if col == "recorded as" else "right")
    for r in rows:
        added = r.get("added_latency_s")
        word, tri = r["growth_by_object"]["word index"], r["growth_by_object"]["trigram index"]
        table.add_row(
            "step tool output" if r["path"] == "step" else "tool message",
            f"{r['chars'] / 1e6:.3f} MB" if r["chars"] >= 100_000 else f"{r['chars']:,} chars",
            f"{r['write_s']:.2f}", f"{r['recall_after_s']:.3f}", f"{r['recall_p50_s']:.3f}",
            "baseline" if added is None else f"{added:+.3f} ({'met' if added < 1 else 'MISSED'} < 1 s)",
            f"{r['reopen_recall_s']:.3f}",
            "yes" if r["found_tail"] else "NO",
            f"{'yes' if r['keyword_tail'] else 'NO'} ({r['keyword_s']:.3f})",
            f"{r['raw_bytes'] / 1e6:.2f} / {r['compressed_bytes'] / 1e6:.2f}",
            f"{r['db_growth_bytes'] / 1e6:.1f}",
            f"{word / 1e6:.1f} / {tri / 1e6:.1f}",
            f"{(r['db_growth_bytes'] - word - tri) / r['compressed_bytes']:.2f}×",
            f"{r['peak_rss_bytes'] / 1e6:.0f}",
        )
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
