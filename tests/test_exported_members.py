"""The public surface: `mindpalace.__all__` lists exactly the public names, sorted."""

from __future__ import annotations

import mindpalace
from mindpalace import errors


def test_all_lists_exactly_the_public_names() -> None:
    public = {n for n in vars(mindpalace) if not n.startswith("_") or n == "__version__"}
    modules = {n for n, v in vars(mindpalace).items() if type(v).__name__ == "module"}
    assert set(mindpalace.__all__) == public - modules


def test_all_is_sorted() -> None:
    assert mindpalace.__all__ == sorted(mindpalace.__all__)


def test_every_error_is_exported_and_inside_the_one_tree() -> None:
    error_types = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    for exc in error_types:
        assert issubclass(exc, errors.MindPalaceError)
        assert exc.__name__ in mindpalace.__all__
