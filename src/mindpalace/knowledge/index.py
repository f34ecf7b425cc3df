"""Recall documents of the knowledge files: one search document per section of a committed file.

Documents have kind ``knowledge``, ref ``<file>#<n>`` (the n-th section, split at markdown
headings) and live in the scope's store scope (:attr:`KnowledgeScope.store_scope`), so
``Session.recall`` and the recalled-memory block find L2 facts and L3 procedures by meaning and
keyword (seed 003's L2/L3 "read on demand", made searchable). Only committed content is indexed:
a refused hand edit never reaches recall. Which blob each file was indexed from is kept in the
store (kv ``knowledge_index``), so a crash between a commit and its indexing is repaired by the
next :meth:`KnowledgeIndex.refresh` (idempotent).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from mindpalace.knowledge.layout import CURSOR_FILE, INJECTED_FILES, KnowledgeScope, layer_of
from mindpalace.store import Store

if TYPE_CHECKING:
    from mindpalace.knowledge.gitstore import GitStore

KIND: Final = "knowledge"
"""Document kind (tier) of knowledge sections."""
STATE_NS: Final = "knowledge_index"
MAX_SECTION_CHARS: Final = 4_000  # a longer section is split at paragraph breaks
_HEADING = re.compile(r"(?m)^(?=#{1,6} )")


def sections(text: str) -> list[str]:
    """`text` split at markdown headings (a long section further at blank lines), non-blank."""
    out: list[str] = []
    for part in _HEADING.split(text):
        if not part.strip():
            continue
        if len(part) <= MAX_SECTION_CHARS:
            out.append(part.strip())
            continue
        chunk = ""
        for para in re.split(r"\n\s*\n", part):
            if chunk and len(chunk) + len(para) > MAX_SECTION_CHARS:
                out.append(chunk.strip())
                chunk = ""
            chunk += para + "\n\n"
        if chunk.strip():
            out.append(chunk.strip())
    return out


def file_of_ref(ref: str) -> str:
    """The file a document ref names (``L3/deploy.md#2`` → ``L3/deploy.md``)."""
    return ref.rsplit("#", 1)[0]


class KnowledgeIndex:
    """Keeps the ``knowledge`` search documents equal to the committed files.

    Args:
        store: where documents and the per-file index state are written.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def refresh(self, scope: KnowledgeScope, git: GitStore) -> list[str]:
        """Re-index every file of `scope` whose committed blob differs from the one indexed
        (and drop the documents of deleted files); returns the files re-indexed."""
        where = scope.store_scope
        blobs = {k: v for k, v in git.folder_blobs(scope.folder).items() if k != CURSOR_FILE}
        state = {key: value for _, key, value in self.store.kv_list(where, STATE_NS)}
        stale = sorted(f for f in set(blobs) | set(state)
                       if not isinstance(state.get(f), dict) or state[f].get("blob") != blobs.get(f))
        if not stale:
            return []
        texts = git.read_folder(scope.folder)
        with self.store.transaction():
            for file in stale:
                old = state.get(file)
                old_refs = old.get("refs", []) if isinstance(old, dict) else []
                if old_refs:
                    self.store.delete_documents(where, KIND, [str(r) for r in old_refs])
                if file not in blobs:
                    self.store.kv_delete(where, STATE_NS, file)
                    continue
                text = texts[file].decode("utf-8", errors="replace")
                refs = []
                layer = layer_of(file).value
                for n, section in enumerate(sections(text), start=1):
                    ref = f"{file}#{n}"
                    self.store.index_document(where, KIND, ref, f"{file}: {section}", {
                        "file": file, "layer": layer, "scope": str(scope),
                        "injected": file in INJECTED_FILES})
                    refs.append(ref)
                self.store.kv_put(where, STATE_NS, file, {"blob": blobs[file], "refs": refs})
        return stale
