"""The Embedder contract every provider inherits: validation, batching, shapes, normalisation."""

from __future__ import annotations

import numpy as np
import pytest

from mindpalace.errors import InvalidTextError, ProviderResponseError
from mindpalace.providers.embed.base import Embedder


class Recording(Embedder):
    """A provider whose raw output is chosen by the test; records each batch it is given."""

    model_id = "recording-4"

    def __init__(self, batch_size: int = 3, bad: str | None = None) -> None:
        self.batch_size = batch_size
        self.bad = bad
        self.batches: list[tuple[list[str], bool]] = []

    @property
    def dim(self) -> int:
        return 4

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        self.batches.append((list(texts), query))
        out = np.array([[len(t) + 1.0, 2.0, 0.0, 1.0] for t in texts], dtype=np.float64)
        if self.bad == "shape":
            return out[:, :3]
        if self.bad == "rows":
            return out[:-1]
        if self.bad == "nan":
            out[0, 0] = np.nan
        return out


class TestEmbedShapes:
    def test_embed_returns_float32_unit_rows_in_input_order(self) -> None:
        emb = Recording()
        out = emb.embed(["a", "bbbb", ""])
        assert out.shape == (3, 4) and out.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
        assert out[1, 0] > out[0, 0]  # "bbbb" has the larger first component

    def test_empty_list_gives_zero_rows_of_full_width(self) -> None:
        emb = Recording()
        assert emb.embed([]).shape == (0, 4)
        assert emb.batches == []

    def test_embed_query_returns_one_vector_and_marks_query(self) -> None:
        emb = Recording()
        vec = emb.embed_query("hotel budget")
        assert vec.shape == (4,)
        assert emb.batches == [(["hotel budget"], True)]

    def test_bare_string_is_one_text_not_characters(self) -> None:
        assert Recording().embed("abc").shape == (1, 4)  # type: ignore[arg-type]


class TestBatching:
    def test_texts_are_sent_in_batches_of_batch_size(self) -> None:
        emb = Recording(batch_size=3)
        emb.embed([f"t{i}" for i in range(7)])
        assert [len(b) for b, _ in emb.batches] == [3, 3, 1]
        assert all(q is False for _, q in emb.batches)


class TestValidation:
    @pytest.mark.parametrize("bad", [None, 3, b"bytes", "lone \ud800 surrogate", "nul\x00byte"])
    def test_unstorable_text_is_refused_before_the_provider_is_called(self, bad: object) -> None:
        emb = Recording()
        with pytest.raises(InvalidTextError, match=r"texts\[1\]"):
            emb.embed(["fine", bad])  # type: ignore[list-item]
        assert emb.batches == []

    @pytest.mark.parametrize("bad", ["shape", "rows", "nan"])
    def test_malformed_provider_output_is_a_provider_error(self, bad: str) -> None:
        with pytest.raises(ProviderResponseError, match="recording-4"):
            Recording(bad=bad).embed(["x", "y"])
