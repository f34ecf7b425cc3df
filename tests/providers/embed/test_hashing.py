"""The deterministic hashing embedder used by unit tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from mindpalace.providers.embed.hashing import HashingEmbedder


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


class TestHashingEmbedder:
    def test_model_id_names_width_and_seed(self) -> None:
        assert HashingEmbedder(256).model_id == "hashing-256"
        assert HashingEmbedder(64, seed=7).model_id == "hashing-64-s7"

    def test_same_text_gives_the_same_vector_in_another_process(self) -> None:
        text = "Book the Senso-ji ticket for 2025-05-20, 预算 2000 CNY"
        here = HashingEmbedder(64).embed([text])[0]
        code = (
            "import json; from mindpalace.providers.embed.hashing import HashingEmbedder; "
            f"print(json.dumps(HashingEmbedder(64).embed([{text!r}])[0].tolist()))"
        )
        env = {**os.environ, "PYTHONHASHSEED": "12345"}  # Python's str hash must not matter
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True)
        np.testing.assert_array_equal(here, np.array(json.loads(out.stdout), dtype=np.float32))

    def test_shared_words_are_closer_than_unrelated_text(self) -> None:
        emb = HashingEmbedder(256)
        a, b, c = emb.embed(["hotel budget per night", "the hotel budgets", "git rebase conflict"])
        assert cos(a, b) > cos(a, c) + 0.2

    def test_chinese_text_matches_chinese_text(self) -> None:
        emb = HashingEmbedder(256)
        a, b, c = emb.embed(["每晚酒店预算两千元", "酒店预算", "weather in Paris"])
        assert cos(a, b) > 0.3 and cos(a, b) > cos(a, c)

    def test_seed_changes_the_vectors(self) -> None:
        v0 = HashingEmbedder(64).embed(["same text"])[0]
        v1 = HashingEmbedder(64, seed=1).embed(["same text"])[0]
        assert not np.allclose(v0, v1)

    def test_featureless_text_is_a_zero_row_not_nan(self) -> None:
        out = HashingEmbedder(32).embed(["", "!!!"])
        assert np.isfinite(out).all() and not out.any()
