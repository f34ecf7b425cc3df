"""The inspector's pages: one function per page, each read-only facade calls → one template."""

from __future__ import annotations

from collections import defaultdict
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from mindpalace.errors import KnowledgeError, NotFoundError, ValidationError
from mindpalace.knowledge import KnowledgeScope, Patch
from mindpalace.lineage import hit_subjects, why_of
from mindpalace.memory import Memory, Session
from mindpalace.rest.inspector import render
from mindpalace.rest.inspector.auth import COOKIE, UiCaller, UiMemory, can_write
from mindpalace.scope import ANY, Scope
from mindpalace.session.messages import STREAM
from mindpalace.tasks.eventstore import STREAM_PREFIX
from mindpalace.timeutil import to_iso

router = APIRouter(prefix="/ui", include_in_schema=False)

env = Environment(loader=PackageLoader("mindpalace.rest.inspector", "templates"),
                  autoescape=select_autoescape(default=True, default_for_string=True))
env.filters["markdown"] = render.markdown
env.filters["iso"] = to_iso

Text = Annotated[str, Query(max_length=200)]
_HTMX = files("mindpalace.rest.inspector").joinpath("static/htmx.min.js").read_bytes()


def page(request: Request, template: str, status: int = 200, **data: Any) -> HTMLResponse:
    html = env.get_template(template).render(request=request, auth=request.app.state.auth, **data)
    return HTMLResponse(html, status_code=status)


def _session(mem: Memory, session: str, user: str, agent: str) -> Session:
    """The session a page shows; NotFoundError (404) when nothing is stored in its scope (a
    typo, a missing ``user=``), as ``GET /v1/sessions/{s}`` answers."""
    if not session:
        raise ValidationError("session: give a session id")
    s = mem.session(session, user=user, agent=agent)
    if not s.exists():
        raise NotFoundError("session", session, s.scope)
    return s


def _qs(s: Session) -> str:
    return urlencode({"user": str(s.scope.user), "agent": str(s.scope.agent)})


def same_origin(request: Request) -> None:
    """Refuse a cross-site form post (CSRF): the browser's Origin (or Referer) must name this
    server. Raises ValidationError (422, nothing written) otherwise."""
    sent = request.headers.get("origin") or request.headers.get("referer")
    if sent is None:
        return  # not a browser form (curl, the test client): the key decides
    if urlsplit(sent).netloc != request.headers.get("host", ""):
        raise ValidationError(f"cross-site form post refused (Origin {sent[:100]!r})")


# -- static, login ---------------------------------------------------------------------------
@router.get("/static/htmx.min.js")
def htmx() -> Response:
    """htmx 2 (BSD-0), vendored in the package: no CDN."""
    return Response(_HTMX, media_type="text/javascript",
                    headers={"Cache-Control": "public, max-age=86400"})


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, reason: Text = "") -> HTMLResponse:
    return page(request, "login.html", status=401 if reason else 200, reason=reason)


@router.post("/login")
def login(request: Request, key: Annotated[str, Form(max_length=300)]) -> Response:
    """Check the key like ``/v1`` does; keep it as an HttpOnly, SameSite=Strict cookie."""
    from mindpalace.errors import AuthError

    same_origin(request)
    if request.app.state.auth:
        try:
            request.app.state.pool.keys.verify(key)
        except AuthError:
            return page(request, "login.html", status=401, reason="refused")
    out = RedirectResponse("/ui", status_code=303)
    out.set_cookie(COOKIE, key, httponly=True, samesite="strict", path="/ui",
                   secure=request.url.scheme == "https")
    return out


# -- sessions --------------------------------------------------------------------------------
@router.get("", response_class=HTMLResponse)
def sessions(request: Request, mem: UiMemory) -> HTMLResponse:
    """Every session of the tenant with messages or tasks."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = defaultdict(lambda: {"messages": 0, "tasks": 0})
    for scope, stream, version in mem.store.list_streams(Scope(mem.tenant, ANY, ANY, ANY)):
        key = (str(scope.user), str(scope.agent), str(scope.session))
        if stream == STREAM:
            rows[key]["messages"] = version
        elif stream.startswith(STREAM_PREFIX):
            rows[key]["tasks"] += 1
    items = [{"user": u, "agent": a, "session": s, **v} for (u, a, s), v in sorted(rows.items()) if s]
    return page(request, "sessions.html", sessions=items, tenant=mem.tenant)


@router.get("/session", response_class=HTMLResponse)
def session(request: Request, mem: UiMemory, id: Text, user: Text = "", agent: Text = "") -> HTMLResponse:
    """Step tiers with a token bar against the budget, the memory index, records, tasks,
    prompt tokens per step and compactions over time."""
    s = _session(mem, id, user, agent)
    steps = s.steps
    state = steps.state
    counter = mem.tokens
    budget = mem.settings.steps.budget_tokens
    recent = state.recent_tokens(counter)
    st = s.status(live_messages=5)
    tasks = s.tasks.list()
    prompt_points, compactions, reported = _charts(s, tasks)
    prompt_budget = reported if reported is not None else float(st.budget_tokens)
    return page(
        request, "session.html", s=s, qs=_qs(s), state=state, st=st,
        counters=steps.counters, summary_lines=steps.summary_lines, index=steps.index(),
        records=steps.records.list(limit=200), tasks=tasks,
        recent_bar=render.Bar(recent, budget),
        prompt_bar=render.Bar(st.prompt_tokens, st.budget_tokens),
        prompt_chart=render.line_chart(prompt_points, limit=prompt_budget,
                                       title="prompt tokens per step", x_label="step",
                                       y_label="tokens") if prompt_points else None,
        compaction_chart=render.step_chart(compactions, title="step-tier compactions over time")
        if compactions else None,
        compaction_times=compactions)


def _charts(s: Session, tasks: list[tuple[str, int]]) -> tuple[list[tuple[float, float]], list[tuple[str, int]], float | None]:
    """(step index, prompt tokens) of finished steps that report them, with the budget they
    report (``output.budget_tokens``); (time, running count) of the step tiers' compactions
    (each writes a pre-summarization snapshot record)."""
    points: list[tuple[float, float]] = []
    budgets: list[int] = []
    for task_id, _v in tasks:
        for e in s.tasks(task_id).history():
            out = e.data.get("output") if isinstance(e.data, dict) else None
            if e.type == "step_finished" and isinstance(out, dict) and isinstance(out.get("prompt_tokens"), int):
                points.append((float(e.data.get("index", len(points))), float(out["prompt_tokens"])))
                if isinstance(out.get("budget_tokens"), int):
                    budgets.append(out["budget_tokens"])
    snaps = sorted(r.created_at for r in s.steps.records.list(type="snapshot") if r.created_at is not None)
    budget = float(max(budgets)) if budgets else None
    return sorted(points), [(to_iso(t), i + 1) for i, t in enumerate(snaps)], budget


@router.get("/record", response_class=HTMLResponse)
def record(request: Request, mem: UiMemory, id: Text, name: Annotated[str, Query(max_length=300)],
           user: Text = "", agent: Text = "") -> HTMLResponse:
    """One record (or reference: message:N, history:C, fact:K): front matter + markdown body."""
    s = _session(mem, id, user, agent)
    found = s.read_records([name]).found.get(name)
    if found is None:
        raise NotFoundError("record", name, s.scope)
    front, body = render.split_front_matter(found.body)
    meta = {"name": found.name, "type": found.type, "step": found.step_id,
            "description": found.description,
            "created": None if found.created_at is None else to_iso(found.created_at),
            **{f"meta.{k}": v for k, v in (found.meta or {}).items()}, **(front or {})}
    chain = s.lineage.trace(name)
    return page(request, "record.html", s=s, qs=_qs(s), rec=found, meta=meta, body=body, chain=chain)


@router.get("/prompt", response_class=HTMLResponse)
def prompt(request: Request, mem: UiMemory, id: Text, user: Text = "", agent: Text = "",
           step: Annotated[int | None, Query(ge=1)] = None,
           budget: Annotated[int | None, Query(ge=64, le=2_000_000)] = None) -> HTMLResponse:
    """The prompt as the stored state gives it (``Session.context``: pure, nothing written)
    with its block table; with `step`, that step's record beside it."""
    s = _session(mem, id, user, agent)
    built = s.context(budget)
    step_record = prepared = None
    if step is not None:
        step_record = s.read_records([f"step_{step}"]).found.get(f"step_{step}")
        prepared = s.lineage.prompt_at(step)
    prompted = sorted({e.step for e in s.lineage.prompts() if e.step is not None})
    return page(request, "prompt.html", s=s, qs=_qs(s), built=built, rep=built.report,
                step=step, step_record=step_record, prepared=prepared, prompted=prompted,
                why_of=why_of, bar=render.Bar(built.report.total_tokens, built.report.budget_tokens))


@router.get("/recall", response_class=HTMLResponse)
def recall(request: Request, mem: UiMemory, id: Text, user: Text = "", agent: Text = "",
           q: Annotated[str, Query(max_length=2000)] = "",
           k: Annotated[int, Query(ge=1, le=50)] = 10) -> HTMLResponse:
    """Recall search with why each hit matched; htmx swaps only the results."""
    s = _session(mem, id, user, agent)
    hits = s.search(q, k) if q.strip() else []  # looking is not recalling: no lineage
    events = s.lineage.events(sessions="user") if hits else []
    lineage = [[e for e in events if any(e.concerns(x) for x in hit_subjects(h.tier, h.ref, h.fact))]
               for h in hits]
    partial = request.headers.get("hx-request") == "true"
    return page(request, "recall_hits.html" if partial else "recall.html", s=s, qs=_qs(s), q=q,
                hits=list(zip(hits, lineage, strict=True)))


@router.get("/task", response_class=HTMLResponse)
def task(request: Request, mem: UiMemory, id: Text, task: Text, user: Text = "",
         agent: Text = "") -> HTMLResponse:
    """A task's events, ledger and constraints."""
    s = _session(mem, id, user, agent)
    t = s.tasks(task)
    events = t.history()
    return page(request, "task.html", s=s, qs=_qs(s), task=t, state=t.state(), events=events,
                ledger=t.ledger_entries(), constraints=t.constraints.all())


# -- knowledge -------------------------------------------------------------------------------
def _kscope(mem: Memory, scope: str) -> KnowledgeScope:
    ks = KnowledgeScope.parse(scope, mem.tenant)
    if ks.tenant != mem.tenant:
        raise NotFoundError("knowledge scope", scope, mem.scope())
    return ks


@router.get("/knowledge", response_class=HTMLResponse)
def knowledge(request: Request, mem: UiMemory) -> HTMLResponse:
    """Every knowledge scope of the tenant with its files."""
    kb = mem.knowledge
    scopes = [s for s in kb.scopes() if s.tenant == mem.tenant]
    listing = [(s, sorted(f for f in kb.files(s) if not f.startswith("."))) for s in scopes]
    return page(request, "knowledge.html", listing=listing, log=kb.log(limit=30) if scopes else [])


@router.get("/knowledge/file", response_class=HTMLResponse)
def knowledge_file(request: Request, mem: UiMemory, who: UiCaller, scope: Text,
                   file: Annotated[str, Query(max_length=300)], saved: Text = "",
                   error: Annotated[str, Query(max_length=2000)] = "") -> HTMLResponse:
    """A knowledge file rendered, its git history (the commits that touched its scope) and
    each dream commit's diff."""
    kb = mem.knowledge
    ks = _kscope(mem, scope)
    text = kb.read(ks, file)
    if text is None:
        raise NotFoundError("knowledge file", file, ks.store_scope)
    front, body = render.split_front_matter(text)
    commits = [c for c in kb.log(ks, limit=50) if not c.files or any(f.endswith(file) for f in c.files)]
    diffs = {c.sha: kb.diff(c.sha, ks) for c in commits if c.author == "dream"}
    return page(request, "knowledge_file.html", scope=ks, scope_name=scope, file=file, text=text,
                front=front, body=body, commits=commits, diffs=diffs, can_write=can_write(who),
                saved=saved, error=error)


@router.post("/knowledge/file")
def edit_knowledge(
    request: Request, mem: UiMemory, who: UiCaller, scope: Annotated[str, Form(max_length=200)],
    file: Annotated[str, Form(max_length=300)], text: Annotated[str, Form(max_length=20_000)],
    anchor: Annotated[str, Form(max_length=20_000)] = "", reason: Annotated[str, Form(max_length=500)] = "",
    source: Annotated[str, Form(max_length=300)] = "",
) -> Response:
    """Replace `anchor` (exactly once in the file) by `text`, or append `text` when `anchor`
    is empty: one patch, one commit authored by the key's name. Needs a ``write`` key (or
    auth off) and a same-origin form: a page of another site cannot post here (with
    ``--no-auth`` there is no cookie to protect the form)."""
    same_origin(request)
    who.require("write")
    ks = _kscope(mem, scope)
    author = who.key.name if who.key is not None and who.key.name else "inspector"
    try:
        patch = (Patch.replace(file, anchor, text, reason=reason, source=source or None) if anchor
                 else Patch.insert(file, text, reason=reason, source=source or None))
        commit = mem.knowledge.apply(ks, [patch], author=author,
                                     message=f"inspector edit of {file}" + (f": {reason}" if reason else ""))
        params = {"scope": scope, "file": file, "saved": commit.short if commit else "unchanged"}
    except KnowledgeError as exc:  # axioms and anchors are the author's to fix: show them
        params = {"scope": scope, "file": file, "error": str(exc)[:1900]}
    return RedirectResponse("/ui/knowledge/file?" + urlencode(params), status_code=303)
