"""`mindpalace serve`: loopback by default, auth unless loopback AND --no-auth, a real process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.auth import ApiKeys
from mindpalace.cli import app
from mindpalace.errors import ConfigError
from mindpalace.rest.server import check_auth, is_loopback


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.4", False), ("example.com", False), ("", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_no_auth_is_refused_off_loopback() -> None:
    with pytest.raises(ConfigError, match="--no-auth"):
        check_auth("0.0.0.0", auth=False)
    check_auth("0.0.0.0", auth=True)
    check_auth("127.0.0.1", auth=False)


def test_the_cli_refuses_no_auth_on_a_public_host_before_listening(tmp_path: Path) -> None:
    Memory.open(tmp_path / "ws", embed={"provider": "none"}).close()
    result = CliRunner().invoke(app, ["serve", "-w", str(tmp_path / "ws"), "--host", "0.0.0.0",
                                      "--no-auth"])
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)
    assert "loopback" in str(result.exception)


def test_serve_refuses_a_folder_that_is_not_a_workspace(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "-w", str(tmp_path / "nope")])
    assert result.exit_code != 0 and "not a mindpalace workspace" in str(result.exception)


def test_a_real_server_process_needs_a_key(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        _, secret = ApiKeys(mem.store).create("acme")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mindpalace.cli", "serve", "-w", str(ws), "--port", "0"],
        stderr=subprocess.PIPE, text=True, env={"MINDPALACE_EMBED__PROVIDER": "none",
                                                "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stderr is not None
        url = None
        for line in proc.stderr:  # uvicorn announces the bound port once it listens
            found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the server never said where it listens"
        with httpx.Client(base_url=url) as http:
            assert http.get("/health").json() == {"status": "ok"}
            refused = http.get("/v1/sessions")
            assert refused.status_code == 401 and refused.json()["error"] == "AuthError"
            ok = http.get("/v1/sessions", headers={"Authorization": f"Bearer {secret}"})
            assert ok.status_code == 200 and ok.json() == {"items": [], "next_cursor": None}
            schema = http.get("/openapi.json").json()
            assert "/v1/sessions/{session_id}/turn" in schema["paths"]
            assert json.dumps(schema)  # serialisable
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
