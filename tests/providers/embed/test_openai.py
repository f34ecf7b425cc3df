"""The OpenAI-compatible embeddings client against a real local HTTP server (not a mock)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from mindpalace.errors import ProviderError, ProviderResponseError, ProviderTimeoutError
from mindpalace.providers.embed.openai import OpenAIEmbedder

DIM = 6


def canned_vector(text: str) -> list[float]:
    """A deterministic, distinguishable vector per text (not normalised: the client must)."""
    return [float(len(text)), float(sum(map(ord, text)) % 97), 1.0, 2.0, 3.0, 4.0]


class EmbeddingServer:
    """A stdlib HTTP server speaking POST /v1/embeddings; `script` queues one behaviour per
    request (``ok`` once the queue is empty)."""

    def __init__(self) -> None:
        self.script: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()  # a "hang" request waits on this, never on a clock
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "body": body,
                                       "auth": self.headers.get("Authorization")})
                mode = owner.script.pop(0) if owner.script else "ok"
                if mode == "hang":
                    owner.release.wait(10)
                    return
                texts = body["input"]
                if mode == "500":
                    return self._send(500, b'{"error": {"message": "overloaded"}}')
                if mode == "401":
                    return self._send(401, b'{"error": {"message": "bad key"}}')
                if mode == "html":
                    return self._send(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                rows = [{"object": "embedding", "index": i, "embedding": canned_vector(t)}
                        for i, t in enumerate(texts)]
                if mode == "short":
                    rows = rows[:-1]
                rows.reverse()  # servers may return rows out of order; `index` decides
                payload = {"object": "list", "data": rows, "model": body["model"],
                           "usage": {"prompt_tokens": 1, "total_tokens": 1}}
                self._send(200, json.dumps(payload).encode())

            def _send(self, status: int, data: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    srv = EmbeddingServer()
    thread = threading.Thread(target=srv.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.httpd.shutdown()
        srv.httpd.server_close()


def client(server: EmbeddingServer, **kw: Any) -> OpenAIEmbedder:
    opts: dict[str, Any] = {"model": "local-embed", "base_url": server.url, "api_key": "k-123",
                            "backoff_initial_seconds": 0, "backoff_max_seconds": 0,
                            "max_retries": 2, "timeout_seconds": 5, "batch_size": 2}
    opts.update(kw)
    return OpenAIEmbedder(**opts)


def expected(texts: list[str]) -> np.ndarray:
    m = np.array([canned_vector(t) for t in texts], dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


class TestOpenAIEmbedder:
    def test_embeds_in_batches_and_orders_rows_by_index(self, server: EmbeddingServer) -> None:
        texts = ["alpha", "beta", "预算", "delta", "e"]
        emb = client(server, dim=DIM)
        np.testing.assert_allclose(emb.embed(texts), expected(texts), rtol=1e-6)
        assert [r["body"]["input"] for r in server.requests] == [texts[:2], texts[2:4], texts[4:]]
        first = server.requests[0]
        assert first["path"] == "/v1/embeddings" and first["auth"] == "Bearer k-123"
        assert first["body"]["model"] == "local-embed"
        assert first["body"]["encoding_format"] == "float"
        assert emb.model_id == "openai:local-embed"

    def test_unknown_width_is_probed_once(self, server: EmbeddingServer) -> None:
        emb = client(server)
        assert emb.dim == DIM and emb.dim == DIM
        assert len(server.requests) == 1

    def test_server_errors_are_retried_then_succeed(self, server: EmbeddingServer) -> None:
        server.script = ["500", "html"]
        out = client(server, dim=DIM).embed_query("hotel")
        np.testing.assert_allclose(out, expected(["hotel"])[0], rtol=1e-6)
        assert len(server.requests) == 3

    def test_html_error_page_after_all_retries_is_a_response_error(
        self, server: EmbeddingServer
    ) -> None:
        server.script = ["html"] * 3
        with pytest.raises(ProviderResponseError, match="not an embeddings JSON body"):
            client(server, dim=DIM).embed(["x"])
        assert len(server.requests) == 3  # 1 attempt + max_retries=2, bounded

    def test_wrong_number_of_vectors_is_a_response_error(self, server: EmbeddingServer) -> None:
        server.script = ["short"] * 3
        with pytest.raises(ProviderResponseError, match="asked for 2 embeddings, got 1"):
            client(server, dim=DIM).embed(["a", "b"])

    def test_auth_failure_fails_fast_without_retries(self, server: EmbeddingServer) -> None:
        server.script = ["401"]
        with pytest.raises(ProviderError, match=r"HTTP 401.*MINDPALACE_EMBED__API_KEY") as info:
            client(server, dim=DIM).embed(["x"])
        assert not isinstance(info.value, ProviderResponseError)
        assert len(server.requests) == 1

    def test_timeout_is_retried_then_reported(self, server: EmbeddingServer) -> None:
        server.script = ["hang", "hang"]
        emb = client(server, dim=DIM, timeout_seconds=0.2, max_retries=1)
        with pytest.raises(ProviderTimeoutError, match="2 attempts"):
            emb.embed(["x"])
        assert len(server.requests) == 2

    def test_width_mismatch_with_declared_dim_is_a_response_error(
        self, server: EmbeddingServer
    ) -> None:
        with pytest.raises(ProviderResponseError, match=r"expected \(1, 9\)"):
            client(server, dim=9).embed(["x"])
