"""Dream (seed 002) and the L4 archive (seed 003) over real conversations.

Replays the LoCoMo conversations (``locomo/locomo10.json``: one mindpalace user per
conversation, one session per LoCoMo session, every turn a ``user`` message named by its
speaker, at the session's date) and τ-bench airline runs (``tau-bench/gpt-4o-airline.json``:
one user per ``info.task.user_id``, one session per run, OpenAI messages with tool calls). After
each session: ``Session.compact()`` consolidates it into history.jsonl (offline extractive
summaries, ``idle_keep_recent_messages = 0``), ``Session.archive()`` writes it to L4, and
``Memory.dream(user=…)`` runs the dream for that user (the offline curator: ``llm.provider =
"extractive"``) — the periodic dream of a deployment, once per finished session.

Printed:

1. **Dream runs** per dataset: scopes, runs, commits, patches, lines promoted to USER.md /
   MEMORY.md, tokens spent vs the per-run budget, ms per run, the largest L1 vs its limits,
   and commits made by a second pass over unchanged input (I5: must be 0).
2. **LLM path token accounting**: the same history dreamed again in a copy of the workspace
   through the real OpenAI client against the package's local stub server
   (``mindpalace.testing.openai_stub``; it replies ``{"patches": []}`` without usage, so every
   call is charged the locally counted prompt + reply tokens): runs needed to consume the
   history, calls, tokens per run vs the budget, runs the budget stopped. The stub measures the
   cost and the cap, not curation quality.
3. **LoCoMo single-hop answers reachable from the knowledge files alone**: questions of the
   data's single-hop category (``category 4`` — see the data README: 1 multi-hop, 2 temporal,
   3 open-domain, 4 single-hop, 5 adversarial) whose normalised answer (lower case, no
   punctuation or articles) is contained in the normalised text, per speaker named in the
   question. Methods, same run: the dream curator's USER.md + MEMORY.md; "copy the last N
   summaries" (the user's newest N history entries); the newest summaries cut to the
   curator's token size; every summary (the ceiling for anything built from history).
4. **L4 archive**: sessions, exchanges, lines appended, duplicates skipped, a second pass.

    python benchmarks/bench_dream.py --fast
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mindpalace import Memory
from mindpalace.eval.locomo import parse_date
from mindpalace.knowledge.dream import DreamReport
from mindpalace.knowledge.layout import L1, MEMORY, USER, KnowledgeScope
from mindpalace.testing.openai_stub import chat, serve_stub

REPO = Path(__file__).resolve().parents[1]
SINGLE_HOP = 4  # the data README's numbering: 4 = single-hop
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s]")


@dataclass
class DreamStats:
    dataset: str
    scopes: set[str] = field(default_factory=set)
    runs: int = 0
    commits: int = 0
    patches: int = 0
    promoted_user: int = 0
    promoted_memory: int = 0
    tokens_spent: int = 0
    budget: int = 0
    seconds: float = 0.0
    second_pass_commits: int = 0
    l1_lines: int = 0
    l1_tokens: int = 0
    failed: int = 0

    def add(self, r: DreamReport, seconds: float) -> None:
        self.scopes.add(r.scope)
        self.runs += 1
        self.commits += r.commit is not None
        self.patches += len(r.patches)
        self.promoted_user += sum(p.file == USER for p in r.promotions)
        self.promoted_memory += sum(p.file == MEMORY for p in r.promotions)
        self.tokens_spent += r.tokens_spent
        self.budget = r.token_budget
        self.failed += r.status == "failed"
        self.seconds += seconds


@dataclass
class ArchiveStats:
    sessions: int = 0
    exchanges: int = 0
    appended: int = 0
    duplicates: int = 0
    second_pass_appended: int = 0


def normalise(text: str) -> str:
    text = _ARTICLES.sub(" ", _PUNCT.sub(" ", str(text).lower()))
    return " ".join(text.split())


# -- replay ------------------------------------------------------------------------------------
def locomo_sessions(sample: dict[str, Any]) -> list[tuple[int, list[dict[str, Any]], list[Any]]]:
    conv = sample["conversation"]
    numbers = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    out = []
    for n in numbers:
        turns = conv[f"session_{n}"]
        when = parse_date(conv[f"session_{n}_date_time"])
        msgs = [{"role": "user", "name": t["speaker"],
                 "content": t["text"] + (f" [shares a photo: {t['blip_caption']}]" if t.get("blip_caption") else "")}
                for t in turns]
        out.append((n, msgs, [when] * len(msgs)))
    return out


def tau_messages(run: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = []
    for m in run["traj"]:
        msg = {k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
        if msg.get("tool_calls") in ([], None):
            msg.pop("tool_calls", None)
        if msg["role"] == "tool":
            msg.pop("name", None)
        msgs.append(msg)
    return msgs


def finish_session(mem: Memory, session: str, user: str, agent: str, messages: list[dict[str, Any]],
                   stamps: list[Any] | None, st: DreamStats, arch: ArchiveStats) -> None:
    s = mem.session(session, user=user, agent=agent)
    s.messages.add_many(messages, timestamps=stamps)
    s.compact()
    out = s.archive()
    arch.sessions += 1
    arch.exchanges += out.exchanges
    arch.appended += out.appended
    arch.duplicates += out.duplicates
    t0 = time.perf_counter()
    for r in mem.dream(user=user):
        st.add(r, time.perf_counter() - t0)


def l1_size(mem: Memory, scopes: set[str], st: DreamStats) -> None:
    for name in scopes:
        text = mem.knowledge.read(KnowledgeScope.parse(name, mem.tenant), L1) or ""
        st.l1_lines = max(st.l1_lines, len([ln for ln in text.splitlines() if ln.strip()]))
        st.l1_tokens = max(st.l1_tokens, mem.tokens.count(text))


# -- reachability ---------------------------------------------------------------------------------
def speaker_of(question: str, a: str, b: str) -> str:
    def named(who: str) -> bool:
        q = question.lower()
        return bool(re.search(rf"\b{re.escape(who.lower())}\b", q) or re.search(rf"\b{re.escape(who[:3].lower())}\b", q))
    hit_a, hit_b = named(a), named(b)
    return a if hit_a and not hit_b else b if hit_b and not hit_a else "both/neither"


def reachability(mem: Memory, samples: list[dict[str, Any]], last_n: int) -> list[dict[str, Any]]:
    methods = ["dream curator (USER.md + MEMORY.md)", f"last {last_n} summaries",
               "newest summaries, curator's size", "every summary (ceiling)"]
    counts: dict[str, dict[str, list[int]]] = {m: defaultdict(lambda: [0, 0]) for m in methods}
    tokens: dict[str, list[int]] = {m: [] for m in methods}
    entries = mem.history.read()
    for sample in samples:
        user = sample["sample_id"]
        a, b = sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"]
        scope = KnowledgeScope.user(user, mem.tenant)
        curated = "\n".join(mem.knowledge.read(scope, f) or "" for f in (USER, MEMORY))
        mine = [e.content for e in entries if e.scope.user == user]
        budget = mem.tokens.count(curated)
        same_size: list[str] = []
        for text in reversed(mine):
            if mem.tokens.count("\n".join([text, *same_size])) > budget:
                break
            same_size.insert(0, text)
        texts = {methods[0]: curated, methods[1]: "\n".join(mine[-last_n:]),
                 methods[2]: "\n".join(same_size), methods[3]: "\n".join(mine)}
        norms = {m: normalise(t) for m, t in texts.items()}
        for m, t in texts.items():
            tokens[m].append(mem.tokens.count(t))
        for qa in sample["qa"]:
            if qa.get("category") != SINGLE_HOP or qa.get("answer") in (None, ""):
                continue
            who = speaker_of(qa["question"], a, b)
            role = "speaker A" if who == a else "speaker B" if who == b else "both/neither"
            answer = normalise(qa["answer"])
            for m in methods:
                for key in (role, "all"):
                    counts[m][key][1] += 1
                    counts[m][key][0] += bool(answer) and answer in norms[m]
    rows = []
    for m in methods:
        row: dict[str, Any] = {"method": m, "mean_tokens": round(sum(tokens[m]) / max(1, len(tokens[m])))}
        for key in ("speaker A", "speaker B", "both/neither", "all"):
            hit, total = counts[m][key]
            row[key] = {"reached": hit, "questions": total}
        rows.append(row)
    return rows


# -- the LLM path's token accounting ------------------------------------------------------------
def llm_accounting(ws: Path, copy_to: Path, budget: int) -> dict[str, Any]:
    """Dream the same history again, in a fresh workspace holding a copy of history.jsonl, with
    the OpenAI client against the local stub server; every scope is dreamed until its cursor
    reaches the end (a run the budget stopped is followed by another)."""
    copy_to.mkdir(parents=True)
    shutil.copytree(ws / "history", copy_to / "history")
    with serve_stub() as stub:
        stub.script(chat('{"patches": []}', usage=None))
        with Memory.open(copy_to, embed={"provider": "none"}, knowledge={"dream_token_budget": budget},
                         llm={"provider": "openai", "base_url": stub.url, "api_key": "stub", "max_retries": 0}) as mem:
            runs = calls = stopped = failed = 0
            per_run: list[int] = []
            for scope in mem.dreamer.scopes(mem.tenant):
                for _ in range(1_000):
                    r = mem.dreamer.run(scope)
                    if r.status == "unchanged":
                        break
                    runs += 1
                    calls += r.llm_calls
                    stopped += r.budget_stopped
                    failed += r.status in ("failed", "stopped")
                    per_run.append(r.tokens_spent)
                    if r.status in ("failed", "stopped"):
                        break
    return {"runs": runs, "llm_calls": calls, "budget": budget, "stopped_by_budget": stopped,
            "failed_or_stopped_empty": failed, "mean_tokens_per_run": round(sum(per_run) / max(1, len(per_run))),
            "max_tokens_per_run": max(per_run, default=0), "over_budget_runs": sum(t > budget for t in per_run)}


# -- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("MINDPALACE_SHARED_DATA", REPO.parent / "shared" / "data")))
    ap.add_argument("--locomo", type=int, default=None, help="LoCoMo conversations (default all 10)")
    ap.add_argument("--tau", type=int, default=None, help="τ-bench runs (default all 200)")
    ap.add_argument("--last-n", type=int, default=5, help="N of the 'copy the last N summaries' baseline")
    ap.add_argument("--budget", type=int, default=None, help="knowledge.dream_token_budget (default: the setting's)")
    ap.add_argument("--tight-budget", type=int, default=2_000,
                    help="a second, tight budget for the LLM-path accounting (the cap at work)")
    ap.add_argument("--fast", action="store_true", help="2 LoCoMo conversations, 20 τ-bench runs")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.fast:
        args.locomo, args.tau = args.locomo or 2, args.tau or 20
    locomo_file, tau_file = args.data / "locomo" / "locomo10.json", args.data / "tau-bench" / "gpt-4o-airline.json"
    if not locomo_file.exists() or not tau_file.exists():
        print(f"evaluation data not found under {args.data}", file=sys.stderr)
        return 2
    samples = json.loads(locomo_file.read_text(encoding="utf-8"))[: args.locomo]
    runs = json.loads(tau_file.read_text(encoding="utf-8"))[: args.tau]
    knowledge = {} if args.budget is None else {"dream_token_budget": args.budget}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mindpalace-dream-") as tmp:
        ws = Path(tmp) / "ws"
        stats = {"LoCoMo": DreamStats("LoCoMo"), "τ-bench": DreamStats("τ-bench")}
        archive = ArchiveStats()
        with Memory.open(ws, embed={"provider": "none"}, session={"idle_keep_recent_messages": 0},
                         knowledge=knowledge) as mem:
            budget = mem.settings.knowledge.dream_token_budget
            for sample in samples:
                for n, msgs, stamps in locomo_sessions(sample):
                    finish_session(mem, f"session_{n}", sample["sample_id"], "locomo", msgs, stamps,
                                   stats["LoCoMo"], archive)
            for run in runs:
                user = str(run["info"]["task"]["user_id"])
                finish_session(mem, f"task{run['task_id']}-trial{run['trial']}", user, "airline",
                               tau_messages(run), None, stats["τ-bench"], archive)
            for st in stats.values():  # I5: a second pass over unchanged input commits nothing
                for name in st.scopes:
                    scope = KnowledgeScope.parse(name, mem.tenant)
                    st.second_pass_commits += mem.dreamer.run(scope).commit is not None
                l1_size(mem, st.scopes, st)
            archive.second_pass_appended = sum(o.appended for o in mem.archive_idle())
            l1_limits = (mem.settings.knowledge.l1_max_lines, mem.settings.knowledge.l1_max_tokens)
            reach = reachability(mem, samples, args.last_n)
        accounting = [llm_accounting(ws, Path(tmp) / f"llm-{b}", b) for b in dict.fromkeys([budget, args.tight_budget])]
    seconds = time.perf_counter() - started
    rows = {"dream": [{**asdict(st), "scopes": len(st.scopes), "ms_per_run": round(1000 * st.seconds / max(1, st.runs), 1)}
                      for st in stats.values()],
            "llm_accounting": accounting, "reachability": reach, "archive": asdict(archive),
            "l1_limits": {"lines": l1_limits[0], "tokens": l1_limits[1]},
            "settings": {"locomo": len(samples), "tau": len(runs), "last_n": args.last_n, "budget": budget,
                         "fast": args.fast}, "seconds": round(seconds, 1)}
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


def report(rows: dict[str, Any]) -> None:
    console = Console(width=200)
    s = rows["settings"]
    t = Table(title=f"Dream runs (offline curator; {s['locomo']} LoCoMo conversations, {s['tau']} τ-bench runs; "
                    "one dream per finished session)")
    for col in ("dataset", "scopes", "runs", "commits", "patches", "→ USER.md", "→ MEMORY.md",
                "tokens / budget per run", "ms / run", "largest L1 (lines, tokens) / limit",
                "2nd pass commits", "failed"):
        t.add_column(col, justify="right" if col != "dataset" else "left")
    lim = rows["l1_limits"]
    for r in rows["dream"]:
        t.add_row(r["dataset"], str(r["scopes"]), str(r["runs"]), str(r["commits"]), str(r["patches"]),
                  str(r["promoted_user"]), str(r["promoted_memory"]),
                  f"{r['tokens_spent'] // max(1, r['runs'])} / {r['budget']}", str(r["ms_per_run"]),
                  f"{r['l1_lines']}, {r['l1_tokens']} / {lim['lines']}, {lim['tokens']}",
                  str(r["second_pass_commits"]), str(r["failed"]))
    console.print(t)
    t = Table(title="LLM path token accounting (same history, real OpenAI client → local stub server, "
                    "empty patch replies; cost and cap only, not quality)")
    for col in ("budget / run", "runs to consume the history", "LLM calls", "mean tokens / run",
                "max tokens / run", "runs stopped by the budget", "runs over budget"):
        t.add_column(col, justify="right")
    for a in rows["llm_accounting"]:
        t.add_row(str(a["budget"]), str(a["runs"]), str(a["llm_calls"]), str(a["mean_tokens_per_run"]),
                  str(a["max_tokens_per_run"]), str(a["stopped_by_budget"]), str(a["over_budget_runs"]))
    console.print(t)
    t = Table(title=f"LoCoMo single-hop answers (category 4) reachable from the text alone "
                    f"(normalised answer contained; {s['locomo']} conversations)")
    for col in ("method", "mean tokens / conversation", "speaker A", "speaker B", "both / neither", "all"):
        t.add_column(col, justify="right" if col != "method" else "left")
    for r in rows["reachability"]:
        def cell(key: str, row: dict[str, Any] = r) -> str:
            c = row[key]
            return f"{c['reached']}/{c['questions']} ({100 * c['reached'] / max(1, c['questions']):.1f}%)"
        t.add_row(r["method"], str(r["mean_tokens"]), cell("speaker A"), cell("speaker B"), cell("both/neither"), cell("all"))
    console.print(t)
    ar = rows["archive"]
    t = Table(title="L4 archive")
    for col in ("sessions", "exchanges", "appended", "duplicates skipped", "2nd pass appended"):
        t.add_column(col, justify="right")
    t.add_row(str(ar["sessions"]), str(ar["exchanges"]), str(ar["appended"]), str(ar["duplicates"]),
              str(ar["second_pass_appended"]))
    console.print(t)
    console.print(f"{rows['seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
