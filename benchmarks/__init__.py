"""Benchmarks: one ``bench_<name>.py`` module per scenario; ``python -m benchmarks`` runs them."""
