"""Import rules of the open + recall path: a process that opens an existing memory, writes a
fact and a message and recalls loads no LLM client, tokenizer, CLI, scheduler, git or YAML library — they
cost resident memory (the peak RSS of a recall process, issue 16) and start-up time, and
belong to the commands that use them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NOT_ON_THE_PATH = (
    "openai", "tiktoken", "httpx", "rich", "typer", "apscheduler", "dulwich", "yaml", "hnswlib",
    "mindpalace.cli", "mindpalace.rest", "mindpalace.mcpserver", "mindpalace.worker",
    "mindpalace.providers.llm.openai", "mindpalace.knowledge.schedule",
)

PROBE = """
import json, sys
from mindpalace import Memory

with Memory.open(sys.argv[1], embed={"provider": "hashing", "dimensions": 32}) as memory:
    session = memory.session("s1", user="u1", agent="a1")
    session.remember("user:city", "The user lives in Lisbon", importance=0.9)
    session.add_message({"role": "user", "content": "I moved to Lisbon last spring"})
    hits = session.recall("where does the user live", k=3)
    assert hits, "recall found nothing"
sys.stderr.write(json.dumps(sorted(sys.modules)))
"""


def _loaded(prefixes: tuple[str, ...], modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_open_remember_and_recall_import_no_heavy_module(tmp_path: Path) -> None:
    from mindpalace import Memory

    Memory.open(tmp_path / "ws").close()  # creating a workspace initialises its git repository
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "ws")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert "mindpalace.memory" in modules and "numpy" in modules  # the probe did run the path
    assert _loaded(NOT_ON_THE_PATH, modules) == []


def test_the_rule_sees_a_heavy_import() -> None:
    assert _loaded(("yaml",), {"yaml.loader", "mindpalace.memory"}) == ["yaml.loader"]
    assert _loaded(("yaml",), {"yamlish"}) == []
