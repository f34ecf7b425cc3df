"""The public surface: `mindpalace.__all__` lists exactly the public names, sorted, lazily loaded."""

from __future__ import annotations

import subprocess
import sys

import mindpalace
from mindpalace import errors


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in dir(mindpalace) if not n.startswith("_") or n == "__version__"}
    modules = {n for n in public if type(getattr(mindpalace, n)).__name__ == "module"}
    assert set(mindpalace.__all__) == public - modules


def test_every_exported_name_resolves() -> None:
    for name in mindpalace.__all__:
        assert getattr(mindpalace, name) is not None, name


def test_all_is_sorted() -> None:
    assert mindpalace.__all__ == sorted(mindpalace.__all__)


def test_every_error_is_exported_and_inside_the_one_tree() -> None:
    error_types = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    for exc in error_types:
        assert issubclass(exc, errors.MindPalaceError)
        assert exc.__name__ in mindpalace.__all__


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        mindpalace.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_import_loads_no_submodule() -> None:
    code = ("import sys, mindpalace; "
            "print(sorted(m for m in sys.modules if m.startswith('mindpalace.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
