"""The optional WordLlama static embedder (weights bundled in the wheel, loaded offline)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mindpalace.errors import ProviderError
from mindpalace.providers.embed.wordllama import WordLlamaEmbedder


class TestWordLlamaEmbedder:
    def test_missing_package_names_the_extra_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "wordllama", None)  # makes `import wordllama` fail
        with pytest.raises(ProviderError, match=r"pip install 'mindpalace\[wordllama\]'"):
            WordLlamaEmbedder()

    def test_loads_bundled_weights_without_downloading(self, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("wordllama")
        import requests

        def no_network(*args: object, **kwargs: object) -> None:
            raise AssertionError("wordllama tried to download")

        monkeypatch.setattr(requests, "get", no_network)
        emb = WordLlamaEmbedder()
        vecs = emb.embed(["hotel budget", ""])
        assert vecs.shape == (2, 256) and emb.model_id == "wordllama-l2-supercat-256"
        assert np.isclose(float(np.linalg.norm(vecs[0])), 1.0, atol=1e-5)

    def test_relevant_passage_ranks_first(self) -> None:
        pytest.importorskip("wordllama")
        emb = WordLlamaEmbedder()
        q = emb.embed_query("how much can we spend on the hotel each night")
        docs = emb.embed(["The hotel budget is 2000 CNY per night.", "Senso-ji opens at 6:00."])
        assert float(docs[0] @ q) > float(docs[1] @ q)
