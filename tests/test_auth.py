"""API keys: issued once, hashed at rest, verified in constant time, revocable, tenant-bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mindpalace import Memory
from mindpalace.auth import ADMIN_SCOPE, ApiKeys, require_tenant
from mindpalace.cli import app
from mindpalace.errors import AuthError, PermissionDeniedError, ValidationError


@pytest.fixture
def keys(memory: Memory) -> ApiKeys:
    return ApiKeys(memory.store)


class TestCreateAndVerify:
    def test_the_secret_verifies_to_its_key(self, keys: ApiKeys) -> None:
        key, secret = keys.create("acme", name="ci")
        got = keys.verify(secret)
        assert got == key and got.tenant == "acme" and got.scopes == ("read", "write")
        assert secret.startswith(f"mp_{key.id}_")

    def test_each_key_is_fresh(self, keys: ApiKeys) -> None:
        (a, sa), (b, sb) = keys.create("acme"), keys.create("acme")
        assert a.id != b.id and sa != sb

    def test_scopes_are_kept_in_canonical_order(self, keys: ApiKeys) -> None:
        key, _ = keys.create("acme", scopes=["write", "read", "write"])
        assert key.scopes == ("read", "write")
        ro, ro_secret = keys.create("acme", scopes=["read"])
        with pytest.raises(PermissionDeniedError, match="needs 'write'"):
            keys.verify(ro_secret).require("write")
        assert keys.verify(ro_secret).require("read") == ro

    @pytest.mark.parametrize("secret", [
        "", "mp_", "nope", "mp_0123456789abcdef_", "mp_0123456789ABCDEF_" + "a" * 43,
        "Bearer mp_0123456789abcdef_" + "a" * 43, "mp_0123456789abcdef_" + "a" * 43 + "\x00",
    ])
    def test_malformed_secrets_are_refused(self, keys: ApiKeys, secret: str) -> None:
        with pytest.raises(AuthError, match="malformed"):
            keys.verify(secret)

    def test_a_wrong_token_for_a_real_id_is_refused(self, keys: ApiKeys) -> None:
        key, secret = keys.create("acme")
        forged = f"mp_{key.id}_" + ("A" if secret[-1] != "A" else "B") * 43
        with pytest.raises(AuthError, match="unknown key"):
            keys.verify(forged)

    def test_an_unknown_id_is_refused(self, keys: ApiKeys) -> None:
        with pytest.raises(AuthError, match="unknown key"):
            keys.verify("mp_0123456789abcdef_" + "a" * 43)

    @pytest.mark.parametrize("tenant", ["", "mindpalace:admin", "a/b", "-x", "x" * 65, "é", "a b"])
    def test_tenant_names_that_could_escape_are_refused(self, keys: ApiKeys, tenant: str) -> None:
        with pytest.raises(ValidationError, match="tenant"):
            keys.create(tenant)
        with pytest.raises(ValidationError):
            require_tenant(tenant)

    @pytest.mark.parametrize("scopes", [[], ["admin"], ["read", "root"]])
    def test_unknown_scopes_are_refused(self, keys: ApiKeys, scopes: list[str]) -> None:
        with pytest.raises(ValidationError, match="scopes"):
            keys.create("acme", scopes=scopes)
        assert keys.list() == []


class TestRevokeAndList:
    def test_a_revoked_key_stops_verifying(self, keys: ApiKeys) -> None:
        key, secret = keys.create("acme")
        assert keys.revoke(key.id) is True
        assert keys.revoke(key.id) is False
        assert keys.revoke("0000000000000000") is False
        with pytest.raises(AuthError, match="revoked"):
            keys.verify(secret)
        assert keys.list()[0].revoked

    def test_list_filters_by_tenant(self, keys: ApiKeys) -> None:
        a, _ = keys.create("acme")
        b, _ = keys.create("globex")
        assert {k.id for k in keys.list()} == {a.id, b.id}
        assert [k.id for k in keys.list("globex")] == [b.id]


class TestAtRest:
    def test_the_secret_never_reaches_the_database_file(self, workspace_dir: Path) -> None:
        with Memory.open(workspace_dir, embed={"provider": "none"}) as mem:
            _, secret = ApiKeys(mem.store).create("acme", name="ci")
        token = secret.split("_", 2)[2].encode()  # the whole token (it may hold "_" itself)
        blob = b"".join(p.read_bytes() for p in workspace_dir.rglob("memory.db*") if p.is_file())
        assert token not in blob and secret.encode() not in blob
        assert b"acme" in blob  # the row is there; only its secret is not

    def test_keys_live_outside_every_tenant(self, memory: Memory, keys: ApiKeys) -> None:
        keys.create("default")
        tenant_view = memory.store.kv_list(memory.scope(), "api_keys")
        assert tenant_view == [] and len(memory.store.kv_list(ADMIN_SCOPE, "api_keys")) == 1


class TestCli:
    def test_create_list_revoke(self, workspace_dir: Path) -> None:
        Memory.open(workspace_dir, embed={"provider": "none"}).close()
        run = CliRunner().invoke
        created = run(app, ["keys", "create", "acme", "-w", str(workspace_dir), "--name", "ci",
                            "--scope", "read", "--json"])
        assert created.exit_code == 0, created.output
        data = json.loads(created.output)
        assert data["scopes"] == ["read"] and data["secret"].startswith("mp_")
        listed = run(app, ["keys", "list", "-w", str(workspace_dir), "--json"])
        rows = json.loads(listed.output)
        assert [r["id"] for r in rows] == [data["id"]] and "secret" not in rows[0]
        assert data["secret"] not in listed.output
        revoked = run(app, ["keys", "revoke", data["id"], "-w", str(workspace_dir)])
        assert revoked.exit_code == 0 and "revoked" in revoked.output
        unknown = run(app, ["keys", "revoke", "ffffffffffffffff", "-w", str(workspace_dir)])
        assert unknown.exit_code != 0
