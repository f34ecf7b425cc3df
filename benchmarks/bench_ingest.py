"""Ingestion time per 100k characters, long messages embedded whole vs in chunks, same run.

A corpus of session messages is written through the public API (``session.messages.add_many``)
into a fresh workspace and its vectors synced (``Memory.sync_embeddings``), once with every
document embedded whole (``embed.chunk_tokens`` = 10⁹, what the product did before chunking)
and once with the default windows (``embed.chunk_tokens = 0`` → the embedder's own window;
``--chunk-tokens N`` for others). Both modes run in the same process, alternating, on the same
texts; wall and CPU seconds (all threads) are reported per 100k characters, split into writing
(store + keyword index) and embedding, with the share of embedding and the ratio to whole. The
machine's cores are shared: compare the ratios, not the seconds.

Corpora: ``chat`` (default) — the synthetic knowledge-update conversations, short user messages
and long (≈ 120–260 word) assistant replies; ``swe`` — SWE-agent trajectory messages
(``$MINDPALACE_SHARED_DATA/swe-agent``: long tool outputs and replies).

    python benchmarks/bench_ingest.py                       # chat, 100k chars, use
    python benchmarks/bench_ingest.py --corpus swe --embedder e5 --repeat 2
    python benchmarks/bench_ingest.py --context-turns 1     # contextual embedding's cost
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.eval.knowledge_update import generate
from mindpalace.retrieval.chunking import chunk_text

WHOLE = 10**9  # chunk_tokens larger than any message: every document is one window
SHARED_DATA = Path(os.environ.get("MINDPALACE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str


def chat_corpus(chars: int, seed: int = 7) -> list[Message]:
    """Knowledge-update conversations (short user turns, long assistant replies), ≈ `chars`."""
    out: list[Message] = []
    total = 0
    conversations = 10
    while total < chars:
        out, total = [], 0
        for conv in generate(seed, conversations):
            for m in conv.messages:
                if total >= chars:
                    break
                out.append(Message(m.role, m.text))
                total += len(m.text)
        conversations *= 2
    return out


def swe_corpus(chars: int, folder: Path = SHARED_DATA / "swe-agent") -> list[Message]:
    """SWE-agent trajectory messages (user/assistant, system prompts skipped), ≈ `chars`.

    Raises:
        SystemExit: the folder has no ``*.traj`` files.
    """
    files = sorted(glob.glob(str(folder / "*.traj")))
    if not files:
        raise SystemExit(f"no SWE-agent trajectories in {folder}")
    out: list[Message] = []
    total = 0
    for f in files:
        for m in json.loads(Path(f).read_text(encoding="utf-8")).get("history", []):
            content, role = m.get("content"), m.get("role")
            if role not in ("user", "assistant") or not isinstance(content, str) or not content:
                continue
            if total >= chars:
                return out
            out.append(Message(role, content))
            total += len(content)
    return out


def ingest_once(
    messages: list[Message], embedder: str, chunk_tokens: int, batch: int = 50, context_turns: int = 0
) -> dict[str, Any]:
    """Write `messages` into a fresh workspace and sync their vectors; returns seconds and counts."""
    chars = sum(len(m.content) for m in messages)
    embed: dict[str, Any] = {"provider": embedder, "chunk_tokens": chunk_tokens, "context_turns": context_turns}
    if chunk_tokens:  # the default overlap (32) must stay below half a small window
        embed["chunk_overlap_tokens"] = min(32, (chunk_tokens - 1) // 2)
    with tempfile.TemporaryDirectory(prefix="mindpalace-bench-ingest-") as tmp, Memory.open(
        Path(tmp) / "ws", embed=embed
    ) as memory:
        emb = memory.embedder
        assert emb is not None, "bench_ingest needs an embedder"
        emb.embed(["warm up"])  # model and tokenizer loads are not ingestion
        chunk_text("warm up " * 64, 16, 2)
        session = memory.session("s1", user="bench")
        w0, c0 = time.perf_counter(), time.process_time()
        for i in range(0, len(messages), batch):
            session.messages.add_many([{"role": m.role, "content": m.content} for m in messages[i : i + batch]])
        w1, c1 = time.perf_counter(), time.process_time()
        memory.sync_embeddings()
        w2, c2 = time.perf_counter(), time.process_time()
        window = emb.chunk_tokens if chunk_tokens == 0 else chunk_tokens
        overlap = min(memory.settings.embed.chunk_overlap_tokens, max(0, (window - 1) // 2))
        vectors = sum(len(chunk_text(f"{m.role}: {m.content}", window, overlap)) for m in messages)
        scale = 1e5 / chars
        return {
            "embedder": emb.model_id,
            "mode": "whole" if chunk_tokens == WHOLE else f"chunked {window} tokens",
            "messages": len(messages),
            "chars": chars,
            "vectors": vectors,  # embedding windows
            "write_wall_s": (w1 - w0) * scale,
            "embed_wall_s": (w2 - w1) * scale,
            "total_wall_s": (w2 - w0) * scale,
            "embed_cpu_s": (c2 - c1) * scale,
            "total_cpu_s": (c2 - c0) * scale,
            "embed_share": (w2 - w1) / max(w2 - w0, 1e-9),
        }


def run(
    corpus: str, chars: int, embedders: list[str], chunk_tokens: int, repeat: int, context_turns: int = 0
) -> list[dict[str, Any]]:
    """Rows per (embedder, mode): the best of `repeat` alternating runs (least disturbed by load)."""
    messages = chat_corpus(chars) if corpus == "chat" else swe_corpus(chars)
    rows: list[dict[str, Any]] = []
    for embedder in embedders:
        best: dict[int, dict[str, Any]] = {}
        for _ in range(repeat):
            for size in (WHOLE, chunk_tokens):
                r = ingest_once(messages, embedder, size, context_turns=context_turns)
                if size not in best or r["total_wall_s"] < best[size]["total_wall_s"]:
                    best[size] = r
        whole = best[WHOLE]
        for size in (WHOLE, chunk_tokens):
            r = dict(best[size])
            r["ratio_wall"] = r["total_wall_s"] / max(whole["total_wall_s"], 1e-12)
            r["ratio_cpu"] = r["total_cpu_s"] / max(whole["total_cpu_s"], 1e-12)
            rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=("chat", "swe"), default="chat")
    parser.add_argument("--chars", type=int, default=100_000, help="Characters of messages to ingest.")
    parser.add_argument("--embedder", action="append", default=None,
                        help="use | e5 | wordllama | hashing (repeatable; default use)")
    parser.add_argument("--chunk-tokens", type=int, default=0,
                        help="Window of the chunked mode (0 = the embedder's own).")
    parser.add_argument("--repeat", type=int, default=1, help="Alternating runs per mode (best kept).")
    parser.add_argument("--context-turns", type=int, default=0,
                        help="embed.context_turns of both modes (preceding turns embedded with a message).")
    parser.add_argument("--json", type=Path, default=None, help="Write the rows here.")
    args = parser.parse_args(argv)
    if args.chars <= 0 or args.repeat <= 0 or args.chunk_tokens < 0 or not 0 <= args.context_turns <= 8:
        parser.error("--chars and --repeat must be positive, --chunk-tokens >= 0, --context-turns 0 … 8")
    rows = run(args.corpus, args.chars, args.embedder or ["use"], args.chunk_tokens, args.repeat,
               args.context_turns)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = Table(title=f"ingestion per 100k characters — {args.corpus} corpus, {rows[0]['chars']:,} chars, "
                  f"{rows[0]['messages']} messages, {when} (shared cores: compare ratios)")
    for col in ("embedder", "mode", "vectors", "write s", "embed s", "total s", "CPU s",
                "embedding share", "× whole (wall)", "× whole (CPU)"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["embedder"], r["mode"], str(r["vectors"]),
                      f"{r['write_wall_s']:.2f}", f"{r['embed_wall_s']:.2f}", f"{r['total_wall_s']:.2f}",
                      f"{r['total_cpu_s']:.2f}", f"{100 * r['embed_share']:.0f}%",
                      f"{r['ratio_wall']:.2f}", f"{r['ratio_cpu']:.2f}")
    Console(width=200).print(table)
    if args.json:
        args.json.write_text(json.dumps({"measured_at": when, "corpus": args.corpus, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
