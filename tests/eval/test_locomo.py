"""LoCoMo eval: loading rules, scoring math on a hand-made dataset, BM25, and a real run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mindpalace import Memory
from mindpalace.errors import ValidationError
from mindpalace.eval.locomo import (
    BM25,
    Question,
    load_locomo,
    parse_date,
    run_locomo,
    score_ranking,
    split_evidence,
    summarize,
)
from mindpalace.scope import ANY

TINY = [{
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey kitten named Pixel."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely! What does Pixel eat?"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Mostly salmon, she is picky.",
             "img_url": ["x"], "blip_caption": "a kitten eating from a bowl"},
        ],
        "session_2_date_time": "10:00 am on 9 June, 2023",
        "session_3_date_time": "11:00 am on 9 July, 2023",  # a date key without a session
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "I started rock climbing at the gym."},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "Climbing sounds scary but fun."},
        ],
    },
    "qa": [
        {"question": "What is the name of Ann's kitten?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
        {"question": "What does the kitten eat?", "answer": "salmon", "evidence": ["D1:2; D1:3"], "category": 1},
        {"question": "What sport did Bob start?", "answer": "climbing", "evidence": ["D2:1", "D9:9"], "category": 2},
        {"question": "Unanswerable?", "answer": "n/a", "evidence": [], "category": 5},
        {"question": "Only a broken id?", "answer": "n/a", "evidence": ["D7:7"], "category": 3},
    ],
}]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY), encoding="utf-8")
    return path


class TestLoading:
    def test_splits_evidence_and_skips_unresolvable(self, tiny: Path) -> None:
        (conv,) = load_locomo(tiny)
        assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
        assert [q.evidence for q in conv.questions] == [("D1:1",), ("D1:2", "D1:3"), ("D2:1",)]
        assert conv.skipped_ids == 2 and conv.skipped_questions == 2
        assert conv.turns[3].date == parse_date("10:00 am on 9 June, 2023")

    def test_split_evidence_handles_separators(self) -> None:
        assert split_evidence(["D8:6; D9:17", "D1:2,D1:3", "D1:2  D4:4"]) == ["D8:6", "D9:17", "D1:2", "D1:3", "D4:4"]

    def test_missing_file_says_how_to_get_it(self, tmp_path: Path) -> None:
        with pytest.raises(ValidationError, match=r"locomo10\.json"):
            load_locomo(tmp_path / "nope.json")

    def test_bad_date_is_named(self) -> None:
        with pytest.raises(ValidationError, match="2023-05-08"):
            parse_date("2023-05-08")


class TestScoring:
    def test_recall_all_and_reciprocal_rank_by_hand(self) -> None:
        q = Question("q", ("a", "b", "c"), 1)
        s = score_ranking("conv-x", q, ["x", "a", "a", "y", "b", "z"], [1, 2, 5, 10])
        # duplicates collapse: x a y b z
        assert s.recall == {1: 0.0, 2: pytest.approx(1 / 3), 5: pytest.approx(2 / 3), 10: pytest.approx(2 / 3)}
        assert s.recall_all == {1: 0.0, 2: 0.0, 5: 0.0, 10: 0.0}
        assert s.reciprocal_rank == 0.5
        full = score_ranking("conv-x", Question("q", ("a",), 4), ["a"], [1, 2])
        assert full.recall_all == {1: 1.0, 2: 1.0} and full.reciprocal_rank == 1.0

    def test_rank_beyond_the_largest_k_does_not_count(self) -> None:
        s = score_ranking("c", Question("q", ("z",), 4), ["a", "b", "z"], [1, 2])
        assert s.reciprocal_rank == 0.0 and s.recall[2] == 0.0

    def test_summary_averages_in_percent(self) -> None:
        a = score_ranking("c", Question("q", ("a", "b"), 1), ["a"], [1])
        b = score_ranking("c", Question("q", ("x",), 1), ["x"], [1])
        summ = summarize([a, b], [1])
        assert summ.recall[1] == pytest.approx(75.0) and summ.recall_all[1] == pytest.approx(50.0)
        assert summ.mrr == pytest.approx(1.0)


def test_bm25_matches_the_formula_by_hand() -> None:
    docs = ["cat sat", "cat cat dog", "bird"]
    scores = BM25(docs).scores("cat")
    n, df, avg = 3, 2, (2 + 3 + 1) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))

    def term(tf: int, length: int) -> float:
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avg))

    assert scores == pytest.approx([term(1, 2), term(2, 3), 0.0], rel=1e-5)
    assert BM25(docs).scores("the of").tolist() == [0.0, 0.0, 0.0]  # stop words only


def test_tiny_run_ingests_like_an_agent_and_scores(tiny: Path, tmp_path: Path) -> None:
    report = run_locomo(tiny, ks=[1, 5], embedder="hashing", workspace=tmp_path / "ws")
    assert report.questions == 3 and report.skipped_questions == 2
    names = [m.name for m in report.methods]
    assert names == ["mindpalace recall", "dense only (hashing-256)", "BM25 only (same store)",
                     "BM25 baseline (data README)"]
    product = report.methods[0]
    assert product.overall.recall[5] == pytest.approx(100.0)
    assert product.by_category.keys() == {"multi-hop", "temporal", "single-hop"}
    with Memory.open(tmp_path / "ws") as mem:
        scope = mem.scope(user="conv-x", agent="locomo").with_(session=ANY)
        docs = list(mem.store.iter_documents(scope))
        assert {d.kind for d in docs} == {"message"} and len(docs) == 5
        assert docs[2].meta["name"] == "Ann" and docs[2].meta["timestamp"].startswith("2023-05-08T13:56")
        assert "kitten eating" in docs[2].text  # the photo caption the agent saw
        questions = [qa["question"] for qa in TINY[0]["qa"]]
        assert not any(q in d.text for q in questions for d in docs)  # nothing from the QA


@pytest.mark.integration
def test_one_real_conversation_beats_bm25(shared_data: Path) -> None:
    report = run_locomo(shared_data / "locomo" / "locomo10.json", conversations=["conv-26"], embedder="none")
    product, bm25 = report.methods[0], report.methods[-1]
    assert report.questions == 197
    assert product.overall.recall[10] > bm25.overall.recall[10] + 5
    assert product.overall.recall[10] > 60


class TestCliFactOverrides:
    """``mindpalace eval locomo --facts JSON``: the product run's [facts] overrides."""

    def run(self, tiny: Path, tmp_path: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
        from typer.testing import CliRunner

        from mindpalace.cli import app

        out = tmp_path / "report.json"
        result = CliRunner().invoke(app, [
            "eval", "locomo", "--data", str(tiny), "--embedder", "hashing", "--no-baselines",
            "--json", str(out), *extra,
        ])
        report = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
        return result.exit_code, result.output, report

    def test_overrides_reach_the_product_run(self, tiny: Path, tmp_path: Path) -> None:
        code, _, report = self.run(tiny, tmp_path, "--facts", '{"vector_weight": 0.25, "neighbor_weights": []}')
        assert code == 0
        (product,) = report["methods"]  # type: ignore[misc]
        assert "vector ×0.25" in product["settings"] and "neighbours []" in product["settings"]
        code, _, report = self.run(tiny, tmp_path)
        assert code == 0 and "vector ×0.6" in report["methods"][0]["settings"]  # type: ignore[index]

    @pytest.mark.parametrize("bad", ["{vector_weight: 1}", "[1, 2]"])
    def test_bad_json_is_a_usage_error_naming_the_option(self, tiny: Path, tmp_path: Path, bad: str) -> None:
        code, output, report = self.run(tiny, tmp_path, "--facts", bad)
        assert code == 2 and "--facts" in output and report == {}

    def test_unknown_setting_is_refused_before_anything_runs(self, tiny: Path, tmp_path: Path) -> None:
        from typer.testing import CliRunner

        from mindpalace.cli import app
        from mindpalace.errors import ConfigError

        result = CliRunner().invoke(app, [
            "eval", "locomo", "--data", str(tiny), "--embedder", "hashing", "--facts", '{"nope": 1}',
        ])
        assert isinstance(result.exception, ConfigError) and "facts.nope" in str(result.exception)

    def test_embed_overrides_reach_the_store_and_the_report(self, tiny: Path, tmp_path: Path) -> None:
        code, _, report = self.run(tiny, tmp_path, "--embed", '{"context_turns": 1}')
        assert code == 0 and report["embedder"] == "hashing-256+context1q"
        (tmp_path / "report.json").unlink()
        code, output, report = self.run(tiny, tmp_path, "--embed", "[1]")
        assert code == 2 and "--embed" in output and report == {}
