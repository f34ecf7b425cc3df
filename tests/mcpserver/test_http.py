"""The MCP server over streamable HTTP: a real ``mindpalace mcp --transport http`` process on
an ephemeral loopback port, reached with the SDK's streamable HTTP client — API keys, tenant
scoping on every tool (I10), idempotency across a restart."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.auth import ApiKeys
from mindpalace.cli import app
from mindpalace.errors import ConfigError, ValidationError
from mindpalace.mcpserver import HttpOptions

from .helpers import call, http_client, http_server, names, refused
from .scenarios import bad_input_is_a_tool_error, every_tool_works, idempotency_key_replays

SCOPE = {"user_id": "u1", "agent_id": "planner", "session_id": "trip-42"}  # both tenants use it


@dataclass(frozen=True)
class Keys:
    acme: str
    globex: str
    acme_read_only: str


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-http") / "ws"


@pytest.fixture(scope="module")
def keys(ws: Path) -> Keys:
    with Memory.open(ws) as mem:
        api = ApiKeys(mem.store)
        return Keys(api.create("acme", name="planner")[1], api.create("globex")[1],
                    api.create("acme", scopes=["read"])[1])


@pytest.fixture(scope="module")
def url(ws: Path, keys: Keys) -> Iterator[str]:
    with http_server(ws) as address:
        yield address


def post(url: str, secret: str | None) -> int:
    """The HTTP status of a bare tools/list POST."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}
    if secret is not None:
        headers["Authorization"] = f"Bearer {secret}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_every_tool_and_bad_input_over_http(url: str, keys: Keys) -> None:
    async def main() -> None:
        async with http_client(url, keys.acme) as c:
            await every_tool_works(c, user_id="u-tools", session_id="tools")
            await bad_input_is_a_tool_error(c, user_id="u-tools", session_id="bad")

    anyio.run(main)


def test_both_protocol_eras_are_served(url: str, keys: Keys) -> None:
    async def main() -> None:
        for mode in ("auto", "legacy"):
            async with http_client(url, keys.acme, mode=mode) as c:
                assert (c.protocol_version >= "2026") == (mode == "auto"), c.protocol_version
                await call(c, "checkpoint", artifacts={"mode": mode}, user_id="u-era")
                assert (await call(c, "task_status", user_id="u-era"))["artifacts"] == {"mode": mode}

    anyio.run(main)


def test_a_request_without_a_live_key_is_refused(url: str, keys: Keys) -> None:
    assert post(url, None) == 401
    assert post(url, "mp_0123456789abcdef_" + "x" * 43) == 401  # well-formed, unknown
    assert post(url, "not a key") == 401
    assert post(url, keys.acme) == 200


def test_body_and_text_limits_agree_with_rest(url: str, keys: Keys) -> None:
    """New-user finding: MCP took a 4 MiB body (the SDK's default) where REST answers 413 over
    ``server.max_body_bytes`` (1 MiB), and refused a 150,000-character fact REST stores."""
    from mindpalace.mcpserver.tools import MAX_TEXT_CHARS as MCP_TEXT
    from mindpalace.rest.models import MAX_TEXT_CHARS as REST_TEXT

    assert MCP_TEXT == REST_TEXT
    # a declared 1.5 MB body: the server answers before reading it (sending it all would meet a
    # closed connection)
    where = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    try:
        conn.putrequest("POST", where.path)
        for name, value in {"Content-Type": "application/json", "Content-Length": "1500000",
                            "Accept": "application/json, text/event-stream",
                            "MCP-Protocol-Version": "2025-11-25",
                            "Authorization": f"Bearer {keys.acme}"}.items():
            conn.putheader(name, value)
        conn.endheaders()
        assert conn.getresponse().status == 413
    finally:
        conn.close()

    async def main() -> None:
        async with http_client(url, keys.acme) as c:
            kept = await call(c, "remember", key="user:essay", content="y" * 150_000, user_id="u-limits")
            assert len(kept["fact"]["content"]) == 150_000

    anyio.run(main)


def test_a_read_only_key_reads_and_cannot_write(url: str, keys: Keys) -> None:
    async def main() -> None:
        async with http_client(url, keys.acme_read_only) as c:
            assert isinstance((await call(c, "recall", query="anything", **SCOPE))["results"], list)
            for tool, args in (("remember", {"key": "user:x", "content": "y"}),
                               ("forget", {"key": "user:x"}), ("checkpoint", {}),
                               ("record_step", {"goal": "g"}),
                               ("set_constraint", {"name": "n", "value": 1})):
                assert "needs 'write'" in await refused(c, tool, **args, **SCOPE)
            await call(c, "task_status", **SCOPE)

    anyio.run(main)


def test_no_tenant_reads_or_changes_another_tenants_memory(url: str, keys: Keys, ws: Path) -> None:
    secret = "acme-only-secret-zebra"

    async def main() -> None:
        async with http_client(url, keys.acme) as a:
            await call(a, "remember", key="user:code", content=secret, importance=0.9, **SCOPE)
            await call(a, "record_step", goal=f"note {secret}", evaluation="success", **SCOPE)
            await call(a, "set_constraint", name="budget", value=2000, **SCOPE)
            await call(a, "checkpoint", step=1, artifacts={"code": secret}, **SCOPE)
            await call(a, "remember", key="user:lang", content="Go", importance=0.9,
                       idempotency_key="shared-key", **SCOPE)
            before = await call(a, "task_status", **SCOPE)

        async with http_client(url, keys.globex) as b:  # same user / agent / session ids
            hits = (await call(b, "recall", query=secret, limit=50, **SCOPE))["results"]
            assert all(secret not in h["memory"] for h in hits)
            read = await call(b, "read_records", names=["step_1", "fact:user:code", "message:1",
                                                        "history:1", "step_1@trip-42"], **SCOPE)
            assert read["records"] == []
            built = await call(b, "get_context", query=secret, **SCOPE)
            assert secret not in json.dumps(built) and "budget" not in json.dumps(built["messages"])
            status = await call(b, "task_status", **SCOPE)
            assert not status["exists"] and status["constraints"] == {} and status["artifacts"] == {}
            assert (await call(b, "forget", key="user:code", **SCOPE))["forgotten"] is False
            # writes land in globex only, and a key of acme's means nothing here
            assert (await call(b, "set_constraint", name="budget", value=1, **SCOPE))["constraints"] == {"budget": 1}
            assert (await call(b, "record_step", goal="g", **SCOPE))["step"] == 1
            await call(b, "checkpoint", artifacts={"code": "globex"}, **SCOPE)
            assert not (await call(b, "remember", key="user:lang", content="Go", importance=0.9,
                                   idempotency_key="shared-key", **SCOPE))["replayed"]
            # a tenant cannot be named as an argument
            smuggled = await b.call_tool("recall", {"query": secret, "tenant": "acme", **SCOPE})
            assert secret not in json.dumps(smuggled.structured_content or {})

        async with http_client(url, keys.acme) as a:  # acme's memory is as it was
            after = await call(a, "task_status", **SCOPE)
            assert after == before
            hits = (await call(a, "recall", query=secret, **SCOPE))["results"]
            assert "fact:user:code" in names(hits, "id")

    anyio.run(main)
    with Memory.open(ws, create=False) as mem:  # and the store agrees: no acme row under globex
        g = mem.for_tenant("globex").session("trip-42", user="u1", agent="planner")
        assert g.facts.get("user:code") is None and g.constraints.all() == {"budget": 1}


def test_idempotency_key_replays_across_a_server_restart(ws: Path, keys: Keys, url: str) -> None:
    scope = {"user_id": "u-idem", "session_id": "idem"}

    async def first_run(address: str) -> dict[str, object]:
        async with http_client(address, keys.acme) as c:
            return await idempotency_key_replays(c, **scope)

    async def second_run(address: str) -> dict[str, object]:
        async with http_client(address, keys.acme) as c:
            return await call(c, "remember", key="user:pet", content="a cat named Miso",
                              importance=0.9, idempotency_key="pet-1", **scope)

    with http_server(ws) as address:
        first = anyio.run(first_run, address)
    with http_server(ws) as address:  # a new process on a new port: the ledger is in the store
        again = anyio.run(second_run, address)
    assert again["replayed"] and again["fact"] == first["fact"]
    with Memory.open(ws, create=False) as mem:
        assert len(mem.for_tenant("acme").session("idem", user="u-idem").facts.history("user:pet")) == 1


def test_no_auth_only_on_loopback(ws: Path) -> None:
    with pytest.raises(ConfigError, match="loopback"):
        HttpOptions(host="0.0.0.0", port=0, auth=False).check()
    HttpOptions(host="::1", port=0, auth=False).check()
    result = CliRunner().invoke(app, ["mcp", "-w", str(ws), "--transport", "http",
                                      "--host", "0.0.0.0", "--no-auth"])
    assert isinstance(result.exception, ConfigError)


def test_no_auth_on_loopback_serves_the_servers_tenant(ws: Path, keys: Keys) -> None:
    async def main(address: str) -> None:
        async with http_client(address) as c:
            await call(c, "remember", key="user:os", content="plan9", importance=0.9, **SCOPE)

    with http_server(ws, "--no-auth", "--tenant", "local") as address:
        anyio.run(main, address)
    with Memory.open(ws, create=False) as mem:
        assert mem.for_tenant("local").session("x", user="u1", agent="planner").facts.get("user:os")
        assert mem.for_tenant("acme").session("x", user="u1", agent="planner").facts.get("user:os") is None


@pytest.mark.parametrize("session", ["a/b", "a\nb", ".."])
def test_a_default_session_id_no_entry_point_could_reach_is_refused_before_serving(ws: Path, session: str) -> None:
    # the server checked its default scope but not the session id rule, so it served and then
    # failed every tool call that left session_id out
    result = CliRunner().invoke(app, ["mcp", "-w", str(ws), "--transport", "http", "--port", "0",
                                      "--no-auth", "-s", session])
    assert isinstance(result.exception, ValidationError), result.output
    assert "session id" in str(result.exception)
