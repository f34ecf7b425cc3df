"""One dream run of user:u1 in its own process, for the crash and concurrency tests.

    python dream_worker.py WORKSPACE PAUSE_AT WAIT_SECONDS

Prints every stage it reaches (the dream's and the knowledge base's crash points), one per
line; at a stage named in PAUSE_AT (comma-separated) it waits for a line on stdin, so the test
decides — through the pipe, never a sleep — when it goes on or where it is killed. Ends with
``done <status> <cursor>``, or ``busy <message>`` and exit code 3.
"""

from __future__ import annotations

import sys

from mindpalace import Memory
from mindpalace.errors import StoreBusyError
from mindpalace.knowledge import KnowledgeBase
from mindpalace.knowledge.dream import Dream
from mindpalace.knowledge.layout import KnowledgeScope


def main() -> int:
    workspace, pause_at, wait = sys.argv[1], set(sys.argv[2].split(",")), float(sys.argv[3])

    def hook(stage: str) -> None:
        print(stage, flush=True)
        if stage in pause_at:
            sys.stdin.readline()

    with Memory.open(workspace, create=False, embed={"provider": "none"}) as mem:
        s = mem.settings
        kb = KnowledgeBase(mem.workspace.knowledge_dir, mem.store, counter=mem.tokens,
                           settings=s.knowledge, fault=hook)
        dream = Dream(kb, mem.history, mem.store, counter=mem.tokens, settings=s.knowledge,
                      fact_settings=s.facts, on_stage=hook)
        try:
            report = dream.run(KnowledgeScope.user("u1"), wait_seconds=wait)
        except StoreBusyError as exc:
            print(f"busy {exc}", flush=True)
            return 3
        print(f"done {report.status} {report.cursor_after}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
