"""Benchmarks stay runnable: the `python -m benchmarks` runner and tiny runs of bench_store / bench_tokens."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


class TestRunner:
    def test_lists_benchmarks_and_rejects_unknown_names(self) -> None:
        out = subprocess.run([sys.executable, "-m", "benchmarks", "no-such-bench"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2
        assert "unknown benchmark(s) no-such-bench" in out.stderr
        assert "store" in out.stderr and "tokens" in out.stderr


class TestBenchStore:
    def test_tiny_run_measures_both_sides_for_every_workload(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        load("bench_store").main(["--synchronous", "OFF", "--single", "50", "--batched", "200",
                                  "--batch", "100", "--repeats", "1", "--json", str(out)])
        rows = json.loads(out.read_text())
        assert [(r["mode"], r["events"]) for r in rows] == [("single", 50), ("batched ×100", 200)]
        assert all(r["mindpalace_per_s"] > 0 and r["raw_per_s"] > 0 for r in rows)


class TestBenchTokens:
    def test_generated_fallback_text_keeps_the_estimate_above_exact(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        code = load("bench_tokens").main([
            "--data", str(tmp_path / "none"), "--seeds", str(tmp_path / "none"), "--mb", "0.02",
            "--repeats", "1", "--json", str(out)])
        rows = json.loads(out.read_text())
        assert code == 0 and len(rows) == 6
        assert all(r["lines_below_exact"] == 0 and r["estimate_error"] >= 0 for r in rows)


class TestBenchFaults:
    def test_fast_run_kills_from_outside_and_loses_nothing(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_faults").main(["--fast", "--json", str(out)]) == 0
        demo, writer, concurrent = json.loads(out.read_text())
        assert demo["kills"] >= 2 and writer["kills"] >= 2 and concurrent["acked"] > 0
        for row in (demo, writer):
            assert (row["lost"], row["repeated_effects"], row["resurrected"], row["state_differs"]) == (0, 0, 0, 0)
        for row in (demo, writer, concurrent):
            assert (row["raw_exceptions"], row["integrity_failures"], row["history_damaged"]) == (0, 0, 0)
        assert (concurrent["lost"], concurrent["resurrected"], concurrent["repeated_effects"],
                concurrent["duplicate_ids"], concurrent["pairing_violations"],
                concurrent["lock_errors"]) == (0, 0, 0, 0, 0, 0)
class TestBenchPromptRecall:
    def test_fast_run_scores_every_method_under_its_budget(self, tmp_path: Path, shared_data: Path) -> None:
        data = shared_data
        out, scores, dump = tmp_path / "rows.json", tmp_path / "scores.json", tmp_path / "dump.json"
        code = load("bench_prompt_recall").main(["--fast", "--data", str(data), "--json", str(out),
                                                 "--scores", str(scores), "--dump", str(dump)])
        rows = json.loads(out.read_text())["rows"]
        assert code == 0
        methods = {r["method"] for r in rows if r["split"] == "all"}
        assert methods == {"mindpalace prepare", "newest messages", "BM25 turns", "recall packed",
                           "whole conversation"}
        assert all(r["mean_tokens"] <= 2_000 for r in rows if r["budget"])
        ours = next(r for r in rows if r["method"] == "mindpalace prepare" and r["split"] == "all")
        newest = next(r for r in rows if r["method"] == "newest messages" and r["split"] == "all")
        assert ours["evidence"] > newest["evidence"]
        merged = load("bench_prompt_recall").main(["--merge", str(scores)])
        assert merged == 0
        # --dump: every prompt of every method, with the gold turns it holds and prepare's rows
        prompts = json.loads(dump.read_text())
        assert {p["method"] for p in prompts} == methods - {"whole conversation"}
        assert len(prompts) == 4 * 12
        for p in prompts:
            assert len(p["held"]) == len(p["evidence"]) and p["tokens"] <= 2_000
        built = [p for p in prompts if p["method"] == "mindpalace prepare"]
        assert all(sum(tokens for _, tokens in p["blocks"]) == p["tokens"] for p in built)
        assert any(p["recalled"] for p in built)


class TestPromptFraming:
    def test_tiny_run_splits_each_prompt_into_parts_that_add_up_to_it(self, tmp_path: Path, shared_data: Path) -> None:
        out = tmp_path / "parts.json"
        code = load("prompt_framing").main(["--data", str(shared_data), "--conversations", "conv-26",
                                            "--questions", "3", "--budgets", "1000", "--embed", "hashing",
                                            "--json", str(out)])
        parts = json.loads(out.read_text())["1000"]
        assert code == 0
        assert 900 < sum(parts.values()) <= 1_000  # the prompt, under its budget, nothing left out
        for framing in ("memory call", "archived pointer", "headers", "envelopes", "day lines", "message dates"):
            assert parts[framing] > 0, framing
        assert parts["quoted"] > 500 and parts["conversation"] > 0


    def test_each_framing_line_is_counted_in_its_part(self) -> None:
        from mindpalace.tokens import get_counter

        framing = load("prompt_framing")
        counter = get_counter()
        memory = "\n".join([
            '<memory source="archived summary">Not shown (read_files): messages 1-9 · history:1.</memory>',
            "Recalled memory (quoted, UTC; read_files(ref)):",
            '<memory source="conversation" speakers="Ann (user)">[8 May 2023 message:3–4]',
            "Ann: I went there yesterday. [yesterday = 7 May 2023]",
            "Ann: It rained.</memory>",
            "Sent (UTC):",
            "message:10: 9 May 2023, 10:00",
            "message:11: 10 May 2023, 10:00",
        ])
        messages = [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "mp-memory-1", "type": "function", "function": {"name": "memory", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "mp-memory-1", "content": memory},
            {"role": "user", "content": "Where did Ann go?"},
        ]
        parts = framing.parts_of(messages, counter)
        assert sum(parts.values()) == counter.count_messages(messages)
        assert parts["day lines"] == counter.count("[8 May 2023 message:3–4]") + 1
        assert parts["date notes"] == counter.count(" [yesterday = 7 May 2023]")
        assert parts["message dates"] == sum(counter.count(x) + 1 for x in (
            "Sent (UTC):", "message:10: 9 May 2023, 10:00", "message:11: 10 May 2023, 10:00"))
        assert parts["conversation"] == counter.count_message(messages[2])
        assert parts["headers"] > 0 and parts["archived pointer"] > 0 and parts["envelopes"] > 0
        assert parts["quoted"] > counter.count("Ann: It rained.")


class TestBenchDream:
    def test_tiny_run_dreams_idempotently_under_budget_beside_its_baselines(self, tmp_path: Path, shared_data: Path) -> None:
        out = tmp_path / "rows.json"
        code = load("bench_dream").main(["--data", str(shared_data), "--locomo", "1", "--tau", "3",
                                         "--tight-budget", "1500", "--json", str(out)])
        rows = json.loads(out.read_text())
        assert code == 0
        assert [r["dataset"] for r in rows["dream"]] == ["LoCoMo", "τ-bench"]
        assert all(r["runs"] > 0 and r["second_pass_commits"] == 0 and r["failed"] == 0 for r in rows["dream"])
        assert all(a["over_budget_runs"] == 0 for a in rows["llm_accounting"])
        assert rows["archive"]["second_pass_appended"] == 0 and rows["archive"]["appended"] > 0
        methods = [r["method"] for r in rows["reachability"]]
        assert methods[0].startswith("dream curator") and len(methods) == 4
        ceiling = rows["reachability"][-1]["all"]
        assert all(r["all"]["reached"] <= ceiling["reached"] for r in rows["reachability"][1:])


class TestBenchIndexes:
    def test_tiny_run_measures_incremental_beside_full_rebuild_and_ann_recall(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_indexes").main(["--tiny", "--dir", str(tmp_path), "--json", str(out)]) == 0
        (row,) = json.loads(out.read_text())
        assert row["n"] == 2_000 and row["build_kw"] > 0 and row["build_vec"] > 0
        for key in ("read", "incr", "full"):
            assert 0 < row[key][0] <= row[key][1]
        assert 0.0 <= row["ann"]["recall"] <= 1.0 and row["ann"]["build_s"] > 0 and row["rss"] > 0


class TestBenchKnowledge:
    def test_tiny_run_measures_both_sides_of_every_row(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_knowledge").main(["--repeats", "1", "--json", str(out)]) == 0
        rows = json.loads(out.read_text())
        assert len(rows) == 4 and all(r["mindpalace_ms"] > 0 and r["baseline_ms"] > 0 for r in rows)
        assert "block" in rows[2]["what"] and "0 tokens" not in rows[2]["what"]


class TestBenchBackends:
    def test_tiny_run_measures_both_backends_and_every_worker_count(self, tmp_path: Path) -> None:
        import pytest

        from mindpalace.testing import postgres

        url, why = postgres.database_url()
        if url is None:
            if postgres.required():
                pytest.fail(f"PostgreSQL is required here but {why}")
            pytest.skip(f"POSTGRESQL HALF SKIPPED: {why}")
        out = tmp_path / "rows.json"
        assert load("bench_backends").main([
            "--url", url, "--appends", "20", "--facts", "300", "--queries", "5", "--builds", "2",
            "--workers", "1", "2", "--turns", "2", "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        assert [r["backend"] for r in data["backends"]] == ["sqlite", "sqlite FULL", "postgres"]
        assert all(r["appends_per_s"] > 0 for r in data["backends"])
        assert all(r["recall_p95_ms"] > 0 and r["context_p95_ms"] > 0
                   for r in data["backends"] if "recall_p95_ms" in r)
        assert [(r["workers"], r["turns"]) for r in data["scaling"]] == [(1, 2), (2, 4)]
        assert all(r["turns_per_s"] > 0 for r in data["scaling"])


class TestBenchAgent:
    def test_tiny_run_measures_the_agent_beside_both_plain_loops(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_agent").main(["--turns", "6", "--repeat-every", "3", "--budget", "3000",
                                         "--json", str(out)]) == 0
        agent, full, window = json.loads(out.read_text())
        assert [r["loop"] for r in (agent, full, window)] == ["mindpalace", "full history", "window 20"]
        assert all(r["requests"] == 12 for r in (agent, full, window))
        assert agent["over_budget"] == 0 and agent["peak_prompt_tokens"] <= 3000
        assert agent["duplicates"] == 0 and full["duplicates"] == window["duplicates"] == 1
        assert full["peak_prompt_tokens"] > 3000  # the budget binds: the baseline goes over it


class TestBenchLineage:
    def test_tiny_run_measures_lineage_on_and_off(self, tmp_path: Path, shared_data: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_lineage").main(["--data", str(shared_data), "--runs", "1", "--sizes", "300",
                                           "--queries", "4", "--json", str(out)]) == 0
        rows = json.loads(out.read_text())
        steps = rows["steps"]
        assert steps["on"]["lineage_events"] > 0 == steps["off"]["lineage_events"]
        assert steps["on"]["prompts"] == steps["off"]["prompts"] > 0
        assert steps["on"]["over_budget"] == steps["off"]["over_budget"] == 0
        assert rows["recall"]["on@300"]["recall_p50_ms"] > 0 and rows["recall"]["off@300"]["recall_p50_ms"] > 0


class TestBenchDurable:
    def test_fast_run_prints_every_workload_against_the_fsync_baseline(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_durable").main(["--seconds", "0.05", "--agents", "1", "2",
                                           "--synchronous", "NORMAL", "--json", str(out)]) == 0
        rows = json.loads(out.read_text())
        assert [r["workload"] for r in rows] == [
            "bare fsync loop (baseline)", "checkpoint per step, fresh WAL (file growing)",
            "checkpoint per step", "start + finish step", "ledger tool call + checkpoint",
            "ledger tool call, run(checkpoint=…)", "1 concurrent agents (checkpoint)",
            "2 concurrent agents (checkpoint)"]
        assert all(r["steps"] > 0 and r["x_bare_fsync"] > 0 for r in rows)
        assert all(r["commits"] >= 1 for r in rows[1:])  # the store's group-commit counter


class TestBenchPeers:
    def test_quick_run_measures_mindpalace_and_says_na_without_the_peer_venv(
        self, tmp_path: Path, shared_data: Path
    ) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_peers").main([
            "--quick", "--peer-venv", str(tmp_path / "no-venv"), "--data", str(shared_data / "locomo" / "locomo10.json"),
            "--embed", "hashing", "--max-turns", "30", "--max-questions", "3", "--steps", "5", "--agents", "2",
            "--agent-steps", "3", "--storage-steps", "400", "--dir", str(tmp_path), "--json", str(out)]) == 0
        data = json.loads(out.read_text())
        assert data["peers"] is None  # nothing installed during the test suite
        mp = data["mindpalace"]
        assert mp["locomo"]["n"] == 3 and mp["locomo"]["p95_ms"] > 0
        # each query's time without its query embedding is part of its whole time
        assert 0 < mp["locomo"]["search_p95_ms"] <= mp["locomo"]["p95_ms"]
        for sync in ("FULL", "NORMAL"):
            assert all(mp["durable"][sync][k] > 0 for k in ("checkpoint", "tool_call", "tool_step", "start_finish", "agents"))
        assert 0 < mp["storage"]["half"] <= mp["storage"]["full"]
        assert data["floor"]["fsync"] > 0

    def test_locomo_only_skips_the_durable_and_storage_workloads(
        self, tmp_path: Path, shared_data: Path
    ) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_peers").main([
            "--quick", "--locomo-only", "--peer-venv", str(tmp_path / "no-venv"),
            "--data", str(shared_data / "locomo" / "locomo10.json"), "--embed", "hashing",
            "--max-turns", "30", "--max-questions", "3", "--dir", str(tmp_path), "--json", str(out)]) == 0
        mp = json.loads(out.read_text())["mindpalace"]
        assert mp["locomo"]["search_n"] == 3
        assert "durable" not in mp and "storage" not in mp


class TestBenchPayloads:
    def test_small_run_keeps_the_tail_findable_in_the_same_run_as_its_baseline(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_payloads").main(["--mb", "0.3", "--fast", "--embed", "hashing", "--context", "20",
                                            "--json", str(out)]) == 0
        small, big = json.loads(out.read_text())
        assert small["chars"] < 2_000 < 300_000 <= big["chars"]
        assert small["keyword_tail"] and big["keyword_tail"]
        assert big["db_growth_bytes"] > small["db_growth_bytes"] and "added_latency_s" in big



class TestBenchRecall:
    def test_tiny_run_measures_read_only_mixed_and_peak_rss(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_recall").main([
            "--sizes", "300", "--queries", "8", "--mixed-queries", "4", "--json", str(out),
            "--bm25s-python", str(tmp_path / "no-such-python")]) == 0
        (row,) = json.loads(out.read_text())
        assert row["facts"] == 300 and row["recall_p95_ms"] > 0
        for kind in ("remember", "add_message", "step"):
            assert row[f"{kind}_recall_p95_ms"] > 0 and row[f"{kind}_write_p50_ms"] > 0
            assert row[f"{kind}_recall_n"] == 4  # every mixed query is timed
            assert 0 < row[f"{kind}_recall_cpu_p50_ms"] <= row[f"{kind}_recall_cpu_p95_ms"]
        assert 0 < row["recall_cpu_p50_ms"] <= row["recall_cpu_p95_ms"]
        assert row["recall_n"] == 8
        assert row["rss_mindpalace_mb"] > 0 and row["rss_bm25s_mb"] is None  # bm25s: n/a

    def test_mixed_queries_ask_about_facts_no_other_query_asked(self) -> None:
        """A repeated query is served from the document memos: the mixed rows must not reuse
        the read-only queries (they did, and looked as cheap as read-only ones only while the
        memos were large enough to hold those queries' documents)."""
        import argparse

        import numpy as np

        bench = load("bench_recall")
        rng = np.random.default_rng(0)
        read_only = rng.choice(1_000, 200, replace=False)
        args = argparse.Namespace(mixed_queries=50)
        picks = bench.mixed_picks(1_000, read_only, args, rng)
        assert picks.shape == (150,) and len(set(picks.tolist())) == 150
        assert not set(picks.tolist()) & set(read_only.tolist())
        tiny = bench.mixed_picks(20, read_only[:0], argparse.Namespace(mixed_queries=10), rng)
        assert tiny.shape == (30,) and set(tiny.tolist()) <= set(range(20))  # repeats: too few facts


class TestBenchIngest:
    def test_tiny_run_measures_whole_beside_chunked_on_the_same_texts(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_ingest").main(["--chars", "6000", "--embedder", "hashing", "--chunk-tokens", "64",
                                          "--json", str(out)]) == 0
        whole, chunked = json.loads(out.read_text())["rows"]
        assert (whole["mode"], chunked["mode"]) == ("whole", "chunked 64 tokens")
        assert whole["chars"] == chunked["chars"] >= 6000 and whole["messages"] == chunked["messages"]
        assert whole["vectors"] == whole["messages"] < chunked["vectors"]  # long replies split
        assert whole["ratio_wall"] == 1.0 and chunked["total_wall_s"] > 0 and 0 < chunked["embed_share"] <= 1

    def test_context_turns_embeds_with_the_preceding_turn(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_ingest").main(["--chars", "3000", "--embedder", "hashing", "--context-turns", "1",
                                          "--json", str(out)]) == 0
        rows = json.loads(out.read_text())["rows"]
        assert {r["embedder"] for r in rows} == {"hashing-256+context1q"}
        with pytest.raises(SystemExit):  # argparse refuses it before anything is ingested
            load("bench_ingest").main(["--chars", "3000", "--context-turns", "9"])


class TestRankingsLocomo:
    def test_a_second_run_is_identical_and_a_changed_dump_is_not(self, tmp_path: Path, shared_data: Path) -> None:
        rankings = load("rankings_locomo")
        args = ["--data", str(shared_data / "locomo" / "locomo10.json"), "--conversations", "1",
                "--max-turns", "40", "--max-questions", "4", "--embed", "hashing"]
        first, second = tmp_path / "a.json", tmp_path / "b.json"
        assert rankings.main([*args, "--out", str(first)]) == 0
        dump = json.loads(first.read_text())
        (rows,) = dump.values()
        assert len(rows) == 4 and all(0 < len(r["hits"]) <= 10 for r in rows)
        assert rankings.main([*args, "--out", str(second), "--against", str(first)]) == 0
        rows[0]["hits"][0]["score"] = repr(float(rows[0]["hits"][0]["score"]) + 1e-12)
        first.write_text(json.dumps(dump))
        assert rankings.main([*args, "--out", str(second), "--against", str(first)]) == 1


class TestBenchKnowledgeUpdate:
    def test_tiny_run_reports_every_seed_and_method_of_the_varied_set(self, tmp_path: Path) -> None:
        out = tmp_path / "ku.json"
        args = ["--conversations", "2", "--embedder", "hashing", "--generator", "varied", "--seeds", "1,2",
                "--chars", "3000", "--json", str(out)]
        assert load("bench_knowledge_update").main(args) == 0
        data = json.loads(out.read_text())
        assert data["generator"] == "varied" and set(data["seeds"]) == {"1", "2"}
        for rep in data["seeds"].values():
            assert rep["cases"] == 8 and [m["name"].split(" (")[0] for m in rep["methods"]] == [
                "mindpalace recall", "dense only", "BM25 only"]
            assert all(0 <= m["correction_first"] <= 100 for m in rep["methods"])


class TestBenchBm25Topk:
    def test_tiny_run_reads_by_impact_with_the_dense_answers(self, tmp_path: Path) -> None:
        out = tmp_path / "rows.json"
        assert load("bench_bm25_topk").main(["--tiny", "--json", str(out)]) == 0
        (row,) = json.loads(out.read_text())
        assert row["mismatches"] == 0 and row["fell_back"] < row["queries"]
        assert 0 < row["scored_p50"] < row["facts"]


class TestTrainRerank:
    def _groups(self, train: ModuleType) -> list[Any]:
        """Questions whose relevant candidate is the one with the highest `idf_coverage`, while
        the fused order puts it third: the feature alone separates them."""
        from mindpalace.retrieval.rerank import FEATURES

        rng = np.random.default_rng(0)
        col, rank = FEATURES.index("idf_coverage"), FEATURES.index("final_norm")
        groups = []
        for i in range(12):
            rows = rng.uniform(0, 0.5, (6, len(FEATURES)))
            rows[:, rank] = 1.0 / np.arange(1, 7)
            rows[2, col] = 1.0
            labels = np.zeros(6)
            labels[2] = 1.0
            groups.append(train.Group(rows, labels, 1, "conv-26" if i % 2 else "conv-30"))
        return groups

    def test_tiny_set_trains_the_separating_feature_and_writes_loadable_weights(self, tmp_path: Path) -> None:
        from mindpalace.retrieval.rerank import FEATURES, ranker_from_json

        train = load("train_rerank")
        groups = self._groups(train)
        assert train.recall_at(groups, None, 6) == {5: 100.0, 10: 100.0}
        assert train.recall_at(groups, None, 6, ks=(1,)) == {1: 0.0}  # the fused order: third
        cache = tmp_path / "rows.npz"
        train.save(groups, cache)
        outs = [tmp_path / "a.json", tmp_path / "b.json"]
        for out in outs:
            assert train.main(["--cache", str(cache), "--depth", "6", "--out", str(out)]) == 0
        assert outs[0].read_bytes() == outs[1].read_bytes()  # deterministic
        ranker = ranker_from_json(json.loads(outs[0].read_text()))
        assert ranker.depth == 6 and ranker.weights[FEATURES.index("idf_coverage")] > 0
        assert train.recall_at(groups, ranker.weights, 6, ks=(1,)) == {1: 100.0}

    def test_collected_groups_survive_the_cache(self, tmp_path: Path) -> None:
        train = load("train_rerank")
        groups = self._groups(train)
        train.save(groups, tmp_path / "rows.npz")
        back = train.load(tmp_path / "rows.npz")
        assert [g.conversation for g in back] == [g.conversation for g in groups]
        assert all(np.array_equal(a.rows, b.rows) and np.array_equal(a.labels, b.labels) for a, b in zip(back, groups, strict=True))
