"""The inspector over HTTP (in-process ASGI client): the same keys and tenants as /v1, read-only
unless the key may write, hostile stored text escaped, looking never writes lineage, and the
server-side SVG charts and markdown front matter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mindpalace import Memory
from mindpalace.auth import ApiKeys
from mindpalace.knowledge import KnowledgeScope, Patch
from mindpalace.rest.app import create_app
from mindpalace.rest.inspector import render

HOSTILE = "---\ntitle: <b>bold</b>\nsource: ticket 7\n---\n# Plan\n<script>window.x=1</script>\n[x](javascript:alert(1))"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    with Memory.open(root, embed={"provider": "none"}) as mem:
        a = mem.for_tenant("acme").session("s-acme", user="ann")
        a.add_message({"role": "user", "content": "acme secret: the vault code is 4711"})
        a.steps.records.put_info("plan", HOSTILE, description="a <i>plan</i>")
        mem.for_tenant("acme").knowledge.apply(
            KnowledgeScope.user("ann", "acme"), [Patch.insert("USER.md", "# USER\n\n- likes tea")],
            author="api", message="seed")
        mem.for_tenant("other").session("s-other", user="bob").add_message(
            {"role": "user", "content": "other tenant text"})
    return root


@pytest.fixture
def keys(ws: Path) -> dict[str, str]:
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        k = ApiKeys(mem.store)
        return {"read": k.create("acme", name="viewer", scopes=["read"])[1],
                "write": k.create("acme", name="editor", scopes=["read", "write"])[1],
                "other": k.create("other", name="o", scopes=["read"])[1]}


@pytest.fixture
def client(ws: Path) -> Iterator[TestClient]:
    with TestClient(create_app(ws, auth=True), follow_redirects=False) as c:
        yield c


def login(c: TestClient, key: str) -> None:
    r = c.post("/ui/login", data={"key": key})
    assert r.status_code == 303
    assert "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()


def test_no_key_goes_to_login_and_a_bad_key_is_refused(client: TestClient) -> None:
    r = client.get("/ui")
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    assert client.post("/ui/login", data={"key": "mp_0000000000000000_nope"}).status_code == 401
    r = client.get("/ui", headers={"Authorization": "Bearer mp_0000000000000000_nope"})
    assert r.headers["location"] == "/ui/login?reason=refused"


def test_a_key_sees_only_its_tenant(client: TestClient, keys: dict[str, str]) -> None:
    login(client, keys["other"])
    page = client.get("/ui").text
    assert "s-other" in page and "s-acme" not in page
    r = client.get("/ui/session", params={"id": "s-acme", "user": "ann"})  # acme's id, other's tenant
    assert r.status_code == 404 and "vault code" not in r.text  # unknown in this tenant, as on /v1
    r = client.get("/ui/record", params={"id": "s-acme", "user": "ann", "name": "plan"})
    assert r.status_code == 404
    assert "likes tea" not in client.get("/ui/knowledge").text
    r = client.get("/ui/knowledge/file", params={"scope": "user:ann", "file": "USER.md"})
    assert r.status_code == 404


def test_bearer_header_works_like_the_cookie(client: TestClient, keys: dict[str, str]) -> None:
    r = client.get("/ui", headers={"Authorization": f"Bearer {keys['read']}"})
    assert r.status_code == 200 and "s-acme" in r.text


def test_hostile_text_is_escaped_and_front_matter_is_a_table(client: TestClient, keys: dict[str, str]) -> None:
    login(client, keys["read"])
    html = client.get("/ui/record", params={"id": "s-acme", "user": "ann", "name": "plan"}).text
    assert "<script>window.x=1</script>" not in html and "&lt;script&gt;window.x=1&lt;/script&gt;" in html
    assert 'href="javascript:' not in html
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html  # front matter value
    assert "<th>source</th><td>ticket 7</td>" in html and "<h1>Plan</h1>" in html
    assert "a &lt;i&gt;plan&lt;/i&gt;" in html


def test_a_read_key_cannot_edit_knowledge_and_a_write_key_commits_as_itself(
    client: TestClient, keys: dict[str, str], ws: Path,
) -> None:
    form = {"scope": "user:ann", "file": "USER.md", "text": "- likes green tea", "anchor": "- likes tea"}
    login(client, keys["read"])
    page = client.get("/ui/knowledge/file", params={"scope": "user:ann", "file": "USER.md"}).text
    assert "edit-form" not in page and "Read-only" in page
    assert client.post("/ui/knowledge/file", data=form).status_code == 403
    login(client, keys["write"])
    r = client.post("/ui/knowledge/file", data=form)
    assert r.status_code == 303 and "saved=" in r.headers["location"]
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        kb = mem.for_tenant("acme").knowledge
        scope = KnowledgeScope.user("ann", "acme")
        assert "- likes green tea" in (kb.read(scope, "USER.md") or "")
        assert kb.log(scope)[0].author == "editor"
    r = client.post("/ui/knowledge/file", data={**form, "anchor": "not in the file", "text": "- x"})
    assert "error=" in r.headers["location"]  # the anchor error is shown, nothing committed
    assert "not in the file" in client.get(r.headers["location"]).text


def test_looking_writes_no_lineage(client: TestClient, keys: dict[str, str], ws: Path) -> None:
    login(client, keys["read"])
    before = _lineage_count(ws)
    r = client.get("/ui/recall", params={"id": "s-acme", "user": "ann", "q": "vault code"})
    assert r.status_code == 200 and "vault code" in r.text and "terms" in r.text  # why it matched
    client.get("/ui/prompt", params={"id": "s-acme", "user": "ann"})
    assert _lineage_count(ws) == before


def _lineage_count(ws: Path) -> int:
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        return len(mem.for_tenant("acme").session("s-acme", user="ann").lineage.events())


def test_htmx_is_served_from_the_package(client: TestClient) -> None:
    r = client.get("/ui/static/htmx.min.js")
    assert r.status_code == 200 and r.text.startswith("var htmx=") and "javascript" in r.headers["content-type"]


def test_charts_are_svg_with_the_budget_line_and_escaped_text() -> None:
    svg = str(render.line_chart([(1, 100), (2, 900)], limit=800, title="<t>", x_label="step",
                                y_label="tokens"))
    assert svg.startswith("<svg") and "&lt;t&gt;" in svg and "<t>" not in svg
    assert 'class="limit"' in svg and svg.count('class="point over"') == 1
    bar = render.Bar(500, 400)
    assert bar.over and bar.percent == 100.0


def test_a_cross_site_form_post_is_refused_even_without_auth(ws: Path) -> None:
    with TestClient(create_app(ws, auth=False, tenant="acme"), follow_redirects=False) as c:
        form = {"scope": "user:ann", "file": "USER.md", "text": "- pwned"}
        r = c.post("/ui/knowledge/file", data=form, headers={"Origin": "http://evil.example"})
        assert r.status_code == 422 and "cross-site" in r.text
        r = c.post("/ui/knowledge/file", data=form, headers={"Origin": "http://testserver"})
        assert r.status_code == 303
    with Memory.open(ws, embed={"provider": "none"}) as mem:
        log = mem.for_tenant("acme").knowledge.log(KnowledgeScope.user("ann", "acme"))
        assert [c.author for c in log] == ["inspector", "api"]  # only the same-origin post


def test_a_page_of_an_unknown_session_is_a_404_naming_it(client: TestClient, keys: dict[str, str]) -> None:
    # new-user finding: /ui/session?id=<typo> (or a missing &user=) showed an empty session with
    # 200, while /v1/sessions/<typo> is a 404 and /ui/task of an unknown task too
    login(client, keys["read"])
    for page in ("/ui/session", "/ui/prompt", "/ui/recall"):
        r = client.get(page, params={"id": "s-acme", "q": "vault"})  # no user=ann: another scope
        assert r.status_code == 404 and "s-acme" in r.text and "vault code" not in r.text, page
    assert client.get("/ui/session", params={"id": "s-acme", "user": "ann"}).status_code == 200
