"""Huge tool outputs (issue 16 item 6): stored whole once, indexed in bounded parts, found by
recall from their tail, and never embedded whole — on both store backends."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mindpalace import Memory
from mindpalace.retrieval.chunking import DEFAULT_CHUNK_TOKENS, _counter
from mindpalace.store.inputs import (
    EMBEDDED_PARTS,
    HEAD_WINDOWS,
    MAX_DOCUMENT_CHARS,
    document_parts,
    part_ref,
)
from mindpalace.testing.workload import TAIL_PHRASE, log_output


class EmbedSpy:
    """Wraps the memory's embedder and keeps the largest input (tokens) and how many texts."""

    def __init__(self, mem: Memory) -> None:
        self.embedder = mem.embedder
        assert self.embedder is not None
        self.inner = self.embedder.embed
        self.max_tokens = 0
        self.texts = 0
        self.embedder.embed = self  # type: ignore[method-assign]

    def __call__(self, texts: list[str]) -> np.ndarray:
        counter = _counter()
        self.max_tokens = max([self.max_tokens, *(len(counter.encode(t)) for t in texts)])
        self.texts += len(texts)
        return self.inner(texts)


def docs_of(mem: Memory, scope: Any) -> list[Any]:
    return list(mem.store.iter_documents(scope))


class TestHugeStepOutput:
    def test_stored_whole_indexed_in_parts_found_from_the_tail(self, memory: Memory) -> None:
        spy = EmbedSpy(memory)
        s = memory.session(f"s-{uuid.uuid4().hex[:8]}", user="u1")
        out = log_output(1_000_000)
        step = s.steps.begin("dump the build log", action="cat build.log")
        s.steps.evaluate(step, "success", tool_outputs=[out])

        name = f"step_{step}.output_1"
        got = s.read_records([f"step_{step}", name]).found
        assert got[name].body == out  # whole, byte for byte
        assert name in got[f"step_{step}"].body  # the cut step record names it
        assert len(got[f"step_{step}"].body) < 30_000

        parts = sorted((d for d in docs_of(memory, s.scope) if d.meta.get("of") == name),
                       key=lambda d: d.meta["part"])
        assert len(parts) == parts[0].meta["parts"] > 50
        assert all(len(d.text) <= MAX_DOCUMENT_CHARS for d in docs_of(memory, s.scope))
        assert all(d.meta["record"] == name for d in parts)  # each part maps back to its record
        assert "".join(d.text for d in parts).endswith(out)

        hits = s.recall(TAIL_PHRASE, k=5)
        assert any(h.meta.get("record") == name and TAIL_PHRASE in h.text for h in hits)
        embed_bound = memory.settings.embed.chunk_tokens or memory.embedder.chunk_tokens or DEFAULT_CHUNK_TOKENS  # type: ignore[union-attr]
        assert 0 < spy.max_tokens <= embed_bound
        # the output record and the cut step record are both long: one window each, whatever
        # their size (the small step records and messages of the session are embedded whole)
        assert spy.texts <= 2 * EMBEDDED_PARTS * HEAD_WINDOWS + 2

    def test_a_small_output_stays_inline(self, memory: Memory) -> None:
        s = memory.session(f"s-{uuid.uuid4().hex[:8]}", user="u1")
        step = s.steps.begin("ls")
        s.steps.evaluate(step, "success", tool_outputs=["main.py config.toml"])
        assert s.read_records([f"step_{step}.output_1"]).missing
        assert "main.py config.toml" in s.read_records([f"step_{step}"]).found[f"step_{step}"].body


class TestHugeMessage:
    def test_tool_message_read_back_whole_and_found_by_its_tail(self, memory: Memory) -> None:
        spy = EmbedSpy(memory)
        s = memory.session(f"s-{uuid.uuid4().hex[:8]}", user="u1")
        out = log_output(600_000)
        s.add_message({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]})
        index = s.add_message({"role": "tool", "tool_call_id": "c1", "content": out})
        assert s.messages.list(from_index=index)[0].message["content"] == out
        hits = s.recall(TAIL_PHRASE, k=5)
        assert any(h.meta.get("of") == str(index) and TAIL_PHRASE in h.text for h in hits)
        assert spy.max_tokens <= (memory.embedder.chunk_tokens or DEFAULT_CHUNK_TOKENS)  # type: ignore[union-attr]


class TestPartsLifecycle:
    def test_shorter_text_and_delete_remove_the_parts(self, memory: Memory) -> None:
        scope = memory.scope(user="u1", session=f"s-{uuid.uuid4().hex[:8]}")
        store = memory.store
        store.index_document(scope, "note", "n", log_output(200_000))
        n_parts = len(docs_of(memory, scope))
        assert n_parts > 10
        assert store.get_documents_by_ref(scope, "note", [part_ref("n", n_parts)])
        store.index_document(scope, "note", "n", log_output(40_000))
        assert 1 < len(docs_of(memory, scope)) < n_parts
        assert not store.get_documents_by_ref(scope, "note", [part_ref("n", n_parts)])
        store.index_document(scope, "note", "other", "short", {"parts": "a caller's own key"})
        store.index_document(scope, "note", "other", "short")  # re-indexing reads no part count
        assert store.delete_documents(scope, "note", ["n"]) == 1
        assert [d.ref for d in docs_of(memory, scope)] == ["other"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n界"), max_size=400), st.integers(min_value=1, max_value=60))
def test_parts_are_bounded_and_concatenate_to_the_text(text: str, bound: int) -> None:
    parts = document_parts("r", text, {"record": "r"}, max_chars=bound)
    assert "".join(t for _, t, _ in parts) == text
    assert all(len(t) <= bound for _, t, _ in parts)
    assert parts[0][0] == "r"
    if len(parts) > 1:
        assert [m["part"] for _, _, m in parts] == list(range(1, len(parts) + 1))
        assert all(m["of"] == "r" and m["record"] == "r" for _, _, m in parts)
        assert all(m.get("keyword_only", False) == (m["part"] > EMBEDDED_PARTS) for _, _, m in parts)
