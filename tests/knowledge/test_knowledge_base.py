"""KnowledgeBase: every change a git commit; each axiom refused on every write path (API, hand
edit, restore); restore moves files and dream cursor together; hand edits committed and recalled."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mindpalace import Memory, Session
from mindpalace.errors import AxiomViolation, EffectNotApplied, KnowledgeError
from mindpalace.knowledge import KnowledgeScope, Patch
from mindpalace.store import Record


def git(repo: Path, *args: str) -> str:
    """The real git CLI reading what dulwich wrote."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def subjects(mem: Memory) -> list[str]:
    return git(mem.workspace.knowledge_dir, "log", "--format=%an|%s").splitlines()


def clean(mem: Memory) -> bool:
    return git(mem.workspace.knowledge_dir, "status", "--porcelain") == ""


def completed_call(s: Session, tool: str = "ls", **args: object) -> str:
    """A completed tool call in the session's ledger; returns its source reference."""
    s.tool_call(tool, dict(args) or {"path": "/srv/app"}).run(lambda **kw: {"ok": True})
    entry = [e for e in s.tasks.ledger.entries(s.id) if e.tool == tool][-1]
    return f"ledger:{s.id}/{entry.key}"


@pytest.fixture
def s(memory: Memory, uid: str) -> Session:
    return memory.session(f"s-{uid}", user=f"u-{uid}", agent="planner")


def folder(mem: Memory, scope: KnowledgeScope) -> Path:
    return mem.workspace.knowledge_dir / scope.folder


# -- every change is a commit ------------------------------------------------------------------

def test_an_api_change_is_one_commit_with_author_and_message(memory: Memory, s: Session) -> None:
    c = s.knowledge.apply([Patch.insert("USER.md", "- prefers window seats")], message="the user said so")
    assert c is not None and c.author == "api" and c.files == ("USER.md",)
    assert subjects(memory)[0] == "api|the user said so"
    assert "USER.md: insert '- prefers window seats'" in git(memory.workspace.knowledge_dir, "log", "-1", "--format=%B")
    assert (folder(memory, s.knowledge.scope()) / "USER.md").read_text() == "- prefers window seats\n"
    assert clean(memory)


def test_a_no_op_returns_none_and_commits_nothing(memory: Memory, s: Session) -> None:
    p = [Patch.insert("USER.md", "- vegetarian")]
    assert s.knowledge.apply(p, message="first") is not None
    before = subjects(memory)
    assert s.knowledge.apply(p, message="again") is None
    assert subjects(memory) == before


# -- axiom a: no execution, no memory ------------------------------------------------------------

def test_l2_and_l3_writes_need_a_completed_call_of_this_scope(memory: Memory, s: Session, uid: str) -> None:
    with pytest.raises(AxiomViolation, match=r"no-execution-no-memory.*must name the source"):
        s.knowledge.apply([Patch.insert("L2_facts.md", "- repo at /srv/app")], message="x")
    with pytest.raises(AxiomViolation, match="no such tool call"):
        s.knowledge.apply([Patch.insert("L2_facts.md", "- repo at /srv/app", source="ledger:t/ls:abc")], message="x")

    def refused(**kw: object) -> None:
        raise EffectNotApplied("denied")

    with pytest.raises(EffectNotApplied):
        s.tool_call("deploy", {"env": "prod"}).run(refused)
    failed = f"ledger:{s.id}/{s.tasks.ledger.entries(s.id)[-1].key}"
    with pytest.raises(AxiomViolation, match="is failed, not completed"):
        s.knowledge.apply([Patch.insert("L3/deploy.md", "# Deploy", source=failed)], message="x")
    other = memory.session(f"o-{uid}", user=f"other-{uid}", agent="planner")
    foreign = completed_call(other)
    with pytest.raises(AxiomViolation, match="no such tool call"):  # another user's call (I10)
        s.knowledge.apply([Patch.insert("L2_facts.md", "- x", source=foreign)], message="x")
    assert s.knowledge.read("L2_facts.md") is None and s.knowledge.read("L3/deploy.md") is None
    ok = s.knowledge.apply([Patch.insert("L2_facts.md", "- repo at /srv/app", source=completed_call(s))],
                           message="verified by ls")
    assert ok is not None
    text = s.knowledge.read("L2_facts.md") or ""
    assert text.startswith("- repo at /srv/app [source: ledger:")  # quoted with its source
    assert "Verified-by: ledger:" in git(memory.workspace.knowledge_dir, "log", "-1", "--format=%B")


def test_a_record_verifies_a_procedure(memory: Memory, s: Session) -> None:
    memory.store.put_record(Record(s.scope, "step_3", "step", "deployed with the flag on"))
    c = s.knowledge.apply([Patch.insert("L3/deploy.md", "# Deploy\nPitfall: set the flag", source="record:step_3")],
                          message="learned")
    assert c is not None
    with pytest.raises(AxiomViolation, match="no record named"):
        s.knowledge.apply([Patch.insert("L3/deploy.md", "more", source="record:step_99")], message="x")


# -- axiom b: never silently deleted -------------------------------------------------------------

def test_a_removal_is_a_git_visible_change_with_its_reason(memory: Memory, s: Session) -> None:
    s.knowledge.apply([Patch.insert("MEMORY.md", "- uses postgres\n- uses redis")], message="facts")
    with pytest.raises(AxiomViolation, match="whole file is an overwrite"):
        s.knowledge.apply([Patch.replace("MEMORY.md", "- uses postgres\n- uses redis\n", "- nothing")],
                          message="rewrite")
    s.knowledge.apply([Patch.remove("MEMORY.md", "- uses redis", reason="redis was dropped in v2")],
                      message="cleanup")
    body = git(memory.workspace.knowledge_dir, "log", "-1", "-p", "--format=%B")
    assert "reason: redis was dropped in v2" in body and "-- uses redis" in body


# -- axiom c: no volatile state in L1/L2 ---------------------------------------------------------

@pytest.mark.parametrize(("text", "named"), [
    ("- last deploy 2024-05-01T10:00:00Z", "'2024-05-01T10:00:00Z'"), ("- worker pid 4242", "'pid 4242'"),
    ("- scratch in /tmp/job-7", "'/tmp/job-7'"), ("- session id: 9f8e7d", "'session id: 9f8e7d'")])
def test_volatile_state_in_l2_is_refused_naming_it(memory: Memory, s: Session, text: str, named: str) -> None:
    src = completed_call(s)
    head = subjects(memory)
    with pytest.raises(AxiomViolation, match="no-volatile-state") as info:
        s.knowledge.apply([Patch.insert("L2_facts.md", text, source=src)], message="x")
    assert named in str(info.value)
    assert subjects(memory) == head and s.knowledge.read("L2_facts.md") is None


def test_volatile_state_in_l1_is_refused(s: Session) -> None:
    with pytest.raises(AxiomViolation, match="UUID"):
        s.knowledge.apply([Patch.insert("L1_index.md", "job 123e4567-e89b-12d3-a456-426614174000 → L3/job.md")],
                          message="x")


# -- axiom d: L1 limits on every path ------------------------------------------------------------

def l1_lines(n: int) -> str:
    return "".join(f"topic{i} → L3/t{i}.md\n" for i in range(n))


def test_an_api_write_over_the_l1_limit_is_refused_with_numbers(memory: Memory, s: Session) -> None:
    s.knowledge.apply([Patch.insert("L1_index.md", l1_lines(30))], message="thirty pointers")
    with pytest.raises(AxiomViolation, match=r"31 lines .* limits are 30 lines"):
        s.knowledge.apply([Patch.insert("L1_index.md", "one more → L3/more.md")], message="x")
    assert len((s.knowledge.read("L1_index.md") or "").splitlines()) == 30


def test_a_hand_edit_over_the_l1_limit_is_reported_not_committed_not_injected(memory: Memory, s: Session) -> None:
    s.knowledge.apply([Patch.insert("L1_index.md", l1_lines(3))], message="index")
    path = folder(memory, s.knowledge.scope()) / "L1_index.md"
    path.write_text(l1_lines(40))
    head = subjects(memory)
    [report] = [r for r in s.knowledge.sync() if r.scope == s.knowledge.scope()]
    assert report.committed is None
    [refused] = report.refused
    assert refused.file == "L1_index.md" and "40 lines" in refused.problem
    assert subjects(memory) == head                       # the last good version stays in git
    assert path.read_text() == l1_lines(40)               # the person's text is not destroyed
    built = s.context(8_000, system_prompt="sys")
    text = "\n".join(str(m.get("content")) for m in built.messages)
    assert "topic2 → L3/t2.md" in text and "topic39" not in text   # the prompt shows the good one
    with pytest.raises(KnowledgeError, match="hand edit that was not committed"):
        s.knowledge.apply([Patch.insert("L1_index.md", "x → L3/x.md")], message="x")
    prepared = s.prepare(8_000, system_prompt="sys")
    assert any("L1_index.md: hand edit refused" in line for line in prepared.report.knowledge)


def test_a_hand_edit_with_volatile_state_in_l2_is_refused(memory: Memory, s: Session) -> None:
    d = folder(memory, s.knowledge.scope())
    d.mkdir(parents=True, exist_ok=True)
    (d / "L2_facts.md").write_text("- build dir /tmp/build-42\n")
    [report] = [r for r in s.knowledge.sync() if r.scope == s.knowledge.scope()]
    assert report.committed is None and "temporary path '/tmp/build-42'" in report.refused[0].problem
    assert s.recall("build dir") == [] or all(h.tier != "knowledge" for h in s.recall("build dir"))


def test_a_restore_over_a_lowered_l1_limit_is_refused(workspace_dir: Path, uid: str) -> None:
    scope = KnowledgeScope.user(f"u-{uid}")
    with Memory.open(workspace_dir, embed={"provider": "none"}) as mem:
        first = mem.knowledge.apply(scope, [Patch.insert("L1_index.md", l1_lines(20))], author="api", message="20")
        mem.knowledge.apply(scope, [Patch.remove("L1_index.md", l1_lines(20)[len(l1_lines(5)):], reason="trim")],
                            author="api", message="5")
    assert first is not None
    with Memory.open(workspace_dir, embed={"provider": "none"}, knowledge={"l1_max_lines": 10}) as mem:
        head = subjects(mem)
        with pytest.raises(AxiomViolation, match=r"20 lines .* limits are 10 lines"):
            mem.knowledge.restore(scope, first.sha)
        assert subjects(mem) == head and len((mem.knowledge.read(scope, "L1_index.md") or "").splitlines()) == 5


# -- hand edits ----------------------------------------------------------------------------------

def test_a_hand_edit_is_committed_indexed_and_recalled(memory: Memory, s: Session) -> None:
    s.knowledge.apply([Patch.insert("USER.md", "- likes tea")], message="seed")
    d = folder(memory, s.knowledge.scope())
    (d / "L2_facts.md").write_text("- the orders database is postgres on port 6543\n")
    (d / "notes.txt").write_text("not knowledge")
    (d / ".USER.md.swp").write_text("editor junk")
    assert [e.file for e in s.knowledge.base.pending(s.knowledge.scope())] == ["L2_facts.md", "notes.txt"]
    built = s.prepare(8_000, system_prompt="sys")
    assert any("committed hand edit" in line for line in built.report.knowledge)
    assert subjects(memory)[0].startswith("hand-edit|hand edit of L2_facts.md")
    assert git(memory.workspace.knowledge_dir, "status", "--porcelain").strip().endswith("notes.txt")
    hits = s.recall("which port does the orders database use")
    assert hits and hits[0].tier == "knowledge" and "6543" in hits[0].text
    assert s.knowledge.sync()[0].committed is None  # idempotent


def test_a_hand_deleted_file_is_committed_as_such(memory: Memory, s: Session) -> None:
    s.knowledge.apply([Patch.insert("MEMORY.md", "- project uses rust")], message="seed")
    (folder(memory, s.knowledge.scope()) / "MEMORY.md").unlink()
    report = s.knowledge.base.sync(s.knowledge.scope())
    assert report is not None and report.committed is not None
    assert "MEMORY.md: deleted by hand; removed: '- project uses rust'" in report.committed.message
    assert s.recall("rust") == [] or all(h.tier != "knowledge" for h in s.recall("rust"))


def test_context_is_pure_prepare_commits(memory: Memory, s: Session) -> None:
    s.knowledge.apply([Patch.insert("USER.md", "- likes tea")], message="seed")
    (folder(memory, s.knowledge.scope()) / "USER.md").write_text("- likes coffee\n")
    head = subjects(memory)
    built = s.context(8_000, system_prompt="sys")
    assert subjects(memory) == head
    assert "likes tea" in str(built.messages) and "coffee" not in str(built.messages)
    s.prepare(8_000, system_prompt="sys")
    assert subjects(memory)[0].startswith("hand-edit|")
    assert "likes coffee" in str(s.context(8_000, system_prompt="sys").messages)


def test_symlinks_out_of_the_knowledge_folder_are_refused(memory: Memory, s: Session, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("- root password hunter2\n")
    d = folder(memory, s.knowledge.scope())
    d.mkdir(parents=True, exist_ok=True)
    (d / "L2_facts.md").symlink_to(secret)
    report = s.knowledge.base.sync(s.knowledge.scope())
    assert report is not None and report.committed is None
    assert "symbolic link" in report.refused[0].problem
    linked = KnowledgeScope.user("linked", memory.tenant)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (memory.workspace.knowledge_dir / linked.folder).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, memory.workspace.knowledge_dir / linked.folder)
    with pytest.raises(KnowledgeError, match="symbolic link"):
        memory.knowledge.apply(linked, [Patch.insert("USER.md", "x")], author="api", message="x")
    assert list(target.iterdir()) == []


# -- restore: files and dream cursor together -----------------------------------------------------

def test_restore_moves_files_and_dream_cursor_back_in_one_commit(memory: Memory, s: Session) -> None:
    kb, scope = memory.knowledge, s.knowledge.scope()
    first = kb.apply(scope, [Patch.insert("USER.md", "- likes tea")], author="dream", message="run 1",
                     dream_cursor=4)
    kb.apply(scope, [Patch.insert("USER.md", "- likes jazz"), Patch.insert("MEMORY.md", "- project X")],
             author="dream", message="run 2", dream_cursor=9)
    assert kb.read_cursor(scope) == 9
    assert first is not None
    restored = kb.restore(scope, first.sha, reason="run 2 was wrong")
    assert restored is not None and restored.author == "api"
    assert kb.read_cursor(scope) == 4
    assert kb.files(scope) == {".dream_cursor": "4\n", "USER.md": "- likes tea\n"}
    d = folder(memory, scope)
    assert (d / ".dream_cursor").read_text() == "4\n" and not (d / "MEMORY.md").exists()
    shown = git(memory.workspace.knowledge_dir, "show", "--stat", "--format=%B", "HEAD")
    assert ".dream_cursor" in shown and "USER.md" in shown and "MEMORY.md" in shown
    assert "run 2 was wrong" in shown and clean(memory)
    assert kb.restore(scope, "HEAD") is None
    with pytest.raises(KnowledgeError, match="not a commit"):
        kb.restore(scope, "deadbeef00")
    with pytest.raises(KnowledgeError, match="behind the committed cursor"):
        kb.apply(scope, [], author="dream", message="x", dream_cursor=2)


def test_knowledge_references_read_back_whole_and_only_the_sessions_own(memory: Memory, s: Session, uid: str) -> None:
    s.knowledge.apply([Patch.insert("L3/deploy.md", "# Deploy\nPitfall: flag", source=completed_call(s))],
                      message="learned")
    s.knowledge.apply([Patch.insert("SOUL.md", "calm")], whose="agent", message="persona")
    got = s.read_records(["knowledge:user/L3/deploy.md", "knowledge:agent/SOUL.md", "knowledge:user/../x.md",
                          "knowledge:user/L2_facts.md"])
    assert got.found["knowledge:user/L3/deploy.md"].body.startswith("# Deploy\nPitfall: flag [source: ledger:")
    assert got.found["knowledge:agent/SOUL.md"].body == "calm\n"
    assert got.missing == ["knowledge:user/../x.md", "knowledge:user/L2_facts.md"]
    other = memory.session(f"x-{uid}", user=f"other-{uid}", agent="planner")
    assert other.read_records(["knowledge:user/L3/deploy.md"]).missing == ["knowledge:user/L3/deploy.md"]


def test_preview_is_the_diff_apply_would_commit_and_writes_nothing(memory: Memory, s: Session) -> None:
    kb, scope = memory.knowledge, s.knowledge.scope()
    kb.apply(scope, [Patch.insert("USER.md", "- likes tea")], author="api", message="seed")
    head = subjects(memory)
    diff = kb.preview(scope, [Patch.replace("USER.md", "tea", "green tea")], dream_cursor=5)
    assert "-- likes tea" in diff and "+- likes green tea" in diff and "+5" in diff
    assert subjects(memory) == head and kb.read_cursor(scope) == 0
    assert kb.preview(scope, [Patch.insert("USER.md", "- likes tea")]) == ""
    with pytest.raises(AxiomViolation, match="must name the source"):
        kb.preview(scope, [Patch.insert("L2_facts.md", "- x")])


def test_any_sequence_of_writes_keeps_l1_in_limits_and_disk_equal_to_git(tmp_path: Path) -> None:
    """API inserts and removals, restores and hand edits in any order: every commit keeps L1
    within its limits (d, on every path) and the files on disk are the last commit."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    ops = st.lists(st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 6)),
        st.tuples(st.just("remove"), st.integers(0, 20)),
        st.tuples(st.just("restore"), st.integers(1, 5)),
        st.tuples(st.just("hand"), st.integers(0, 12)),
    ), max_size=10)
    mem = Memory.open(tmp_path / "ws", embed={"provider": "none"}, knowledge={"l1_max_lines": 8})
    counter = iter(range(10**6))

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops)
    def run(sequence: list[tuple[str, int]]) -> None:
        scope = KnowledgeScope.user(f"p{next(counter)}")
        kb, d = mem.knowledge, mem.workspace.knowledge_dir / scope.folder
        for op, n in sequence:
            try:
                if op == "insert":
                    kb.apply(scope, [Patch.insert("L1_index.md", "".join(
                        f"k{next(counter)} → L3/x.md\n" for _ in range(n + 1)))], author="api", message="add")
                elif op == "remove":
                    lines = (kb.read(scope, "L1_index.md") or "").splitlines()
                    if lines:
                        kb.apply(scope, [Patch.remove("L1_index.md", lines[n % len(lines)], reason="r")],
                                 author="api", message="rm")
                elif op == "restore":
                    log = kb.log(scope)
                    if len(log) > n:
                        kb.restore(scope, log[n].sha)
                else:
                    d.mkdir(parents=True, exist_ok=True)
                    (d / "L1_index.md").write_text("".join(f"h{i} → L3/h.md\n" for i in range(n)))
                    kb.sync(scope)
                    if n > 8:  # refused: put the committed version back, as a person would
                        (d / "L1_index.md").write_text(kb.read(scope, "L1_index.md") or "")
                        if kb.read(scope, "L1_index.md") is None:
                            (d / "L1_index.md").unlink()
            except AxiomViolation as exc:
                assert exc.axiom == "l1-limits"
            committed = kb.read(scope, "L1_index.md") or ""
            assert len([ln for ln in committed.splitlines() if ln.strip()]) <= 8
            on_disk = (d / "L1_index.md").read_text() if (d / "L1_index.md").exists() else ""
            assert on_disk == committed and kb.pending(scope) == []

    try:
        run()
    finally:
        mem.close()


def test_a_damaged_repository_is_a_store_error_not_a_raw_git_one(memory: Memory, s: Session) -> None:
    from mindpalace.errors import StoreError

    s.knowledge.apply([Patch.insert("USER.md", "- likes tea")], message="seed")
    objects = memory.workspace.knowledge_dir / ".git" / "objects"
    for path in objects.rglob("*"):
        if path.is_file():
            path.unlink()
    with pytest.raises(StoreError, match="git operation failed"):
        s.knowledge.apply([Patch.insert("USER.md", "- likes jazz")], message="x")


def test_reading_never_creates_the_repository_a_write_does(memory: Memory, s: Session) -> None:
    import shutil

    shutil.rmtree(memory.workspace.knowledge_dir)
    fresh = Memory(memory.workspace, memory.store)  # a new handle: nothing cached
    session = fresh.session(s.id, user=str(s.scope.user), agent=str(s.scope.agent))
    built = session.context(4_000, system_prompt="sys")
    assert built.report.total_tokens <= 4_000 and session.knowledge.read("USER.md") is None
    assert not memory.workspace.knowledge_dir.exists()
    assert session.knowledge.apply([Patch.insert("USER.md", "- likes tea")], message="seed") is not None
    assert subjects(fresh)[-1] == "mindpalace|init knowledge repository"


@pytest.mark.parametrize("patches", [Patch.insert("USER.md", "- likes tea"), "USER.md", None, 3])
def test_patches_that_are_not_a_list_of_patches_are_a_knowledge_error(
    memory: Memory, s: Session, patches: object
) -> None:
    # new-user finding: apply(Patch.insert(...)) without the list raised a raw TypeError
    # ('Patch' object is not iterable); a string was read as a list of characters
    scope = s.knowledge.scope("user")
    for call in (lambda: s.knowledge.apply(patches, message="m"),  # type: ignore[arg-type]
                 lambda: memory.knowledge.preview(scope, patches)):  # type: ignore[arg-type]
        with pytest.raises(KnowledgeError, match="a list of Patch"):
            call()
    assert memory.knowledge.files(scope) == {}
