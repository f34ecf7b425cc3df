"""``python -m mindpalace`` — the same as the ``mindpalace`` console script."""

from mindpalace.cli import main

main()
