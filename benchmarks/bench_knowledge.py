"""What the knowledge files cost per write and per turn, against baselines measured in the same run.

Rows (median milliseconds over the repeats, in one fresh workspace):

* ``commit one patch`` — ``KnowledgeBase.apply`` of one insert into USER.md (validation, hand-edit
  scan, dulwich commit, journal, file rename, git index, recall re-index) vs the baseline
  ``git add`` + ``git commit`` of the same change with the git CLI (no checks, no index);
* ``sync, nothing changed`` — the hand-edit scan ``Session.prepare`` runs every turn, vs
  ``git status --porcelain`` on the same folder;
* ``context build`` — ``Session.context`` with the knowledge block (SOUL, USER, MEMORY, L0, L1 of
  the agent and the user; ~1.2K tokens) vs the same session with ``knowledge.prompt_share = 0``;
* ``prepare`` — ``Session.prepare`` (sync + build) with knowledge vs a session without user and
  agent (no knowledge scope at all).

    python benchmarks/bench_knowledge.py --fast     # 5 repeats, seconds
    python benchmarks/bench_knowledge.py            # 40 repeats
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.knowledge import Patch

SOUL = "You are a calm, precise travel planner. You say what you do not know. " * 6
RULES = "- only verified facts go to L2/L3\n- never store timestamps or session ids\n" * 3
USER = "".join(f"- preference {i}: window seats, vegetarian meals, quiet hotels\n" for i in range(20))
MEMORY = "".join(f"- decision {i}: Kyoto trip in spring, budget 8000 CNY per person\n" for i in range(20))
L1 = "".join(f"topic {i}, keywords → L3/topic_{i}.md\n" for i in range(25))


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def run(repeats: int) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory.open(Path(tmp) / "ws", embed={"provider": "none"})
        s = mem.session("bench", user="ann", agent="planner")
        s.knowledge.apply([Patch.insert("SOUL.md", SOUL), Patch.insert("L0_rules.md", RULES),
                           Patch.insert("L1_index.md", L1)], whose="agent", message="seed")
        s.knowledge.apply([Patch.insert("USER.md", USER), Patch.insert("MEMORY.md", MEMORY)], message="seed")
        for i in range(20):
            s.add_message({"role": "user", "content": f"question {i} about the Kyoto temples"})
            s.add_message({"role": "assistant", "content": f"answer {i}: Kinkaku-ji opens at nine"})
        bare = mem.session("bare")
        for i in range(20):
            bare.add_message({"role": "user", "content": f"question {i} about the Kyoto temples"})
            bare.add_message({"role": "assistant", "content": f"answer {i}: Kinkaku-ji opens at nine"})
        counter = iter(range(10**6))
        kb, scope = mem.knowledge, s.knowledge.scope()

        def commit() -> None:
            kb.apply(scope, [Patch.insert("USER.md", f"- note {next(counter)}")], author="api", message="bench")

        repo = Path(tmp) / "git-baseline"
        repo.mkdir()
        git(repo, "init", "-q")
        git(repo, "config", "user.email", "b@x")
        git(repo, "config", "user.name", "b")
        target = repo / "USER.md"
        target.write_text(USER)

        def git_commit() -> None:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(f"- note {next(counter)}\n")
            git(repo, "add", "USER.md")
            git(repo, "commit", "-q", "-m", "bench")

        rows = [("commit one patch", median_ms(commit, repeats), "git add + commit (CLI)", median_ms(git_commit, repeats)),
                ("sync, nothing changed", median_ms(lambda: kb.sync(scope), repeats),
                 "git status --porcelain", median_ms(lambda: git(mem.workspace.knowledge_dir, "status", "--porcelain"), repeats))]
        with_block = median_ms(lambda: s.context(8_000, system_prompt="sys"), repeats)
        tokens = dict(s.context(8_000, system_prompt="sys").report.blocks).get("knowledge", 0)
        mem.settings.knowledge.prompt_share = 0.0
        off = mem.session("bench", user="ann", agent="planner")
        rows.append((f"context build (block {tokens} tokens)", with_block, "knowledge.prompt_share = 0",
                     median_ms(lambda: off.context(8_000, system_prompt="sys"), repeats)))
        mem.settings.knowledge.prompt_share = 0.15
        on = mem.session("bench", user="ann", agent="planner")
        rows.append(("prepare (sync + build)", median_ms(lambda: on.prepare(8_000, system_prompt="sys"), repeats),
                     "a session with no knowledge scope", median_ms(lambda: bare.prepare(8_000, system_prompt="sys"), repeats)))
        mem.close()
    return [{"what": w, "mindpalace_ms": round(a, 2), "baseline": b, "baseline_ms": round(bm, 2)}
            for w, a, b, bm in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fast", action="store_true", help="5 repeats instead of 40.")
    ap.add_argument("--repeats", type=int, default=None, help="Repeats per row (median reported).")
    ap.add_argument("--json", type=Path, default=None, help="Also write the rows as JSON here.")
    args = ap.parse_args(argv)
    repeats = args.repeats or (5 if args.fast else 40)
    rows = run(repeats)
    table = Table(title=f"knowledge: cost per write and per turn (median of {repeats}, ms)")
    for col in ("what", "mindpalace ms", "baseline", "baseline ms"):
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["what"]), f"{r['mindpalace_ms']:.2f}", str(r["baseline"]), f"{r['baseline_ms']:.2f}")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
