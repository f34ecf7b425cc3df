"""The README's Python examples run as written (docs stay true, STYLE.md §8)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_readme_has_python_examples() -> None:
    assert len(python_blocks()) >= 2


def test_the_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINDPALACE_EMBED__PROVIDER", "hashing")  # no model load in a unit test
    namespace: dict[str, object] = {}
    try:
        for block in python_blocks():
            exec(compile(block, str(README), "exec"), namespace)
    finally:
        mem = namespace.get("mem")
        if mem is not None:
            mem.close()  # type: ignore[attr-defined]
    assert (tmp_path / "ws" / "memory.db").exists()
