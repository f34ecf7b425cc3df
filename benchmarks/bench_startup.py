"""Start-up time: the bare interpreter vs ``import mindpalace``, the facade import and
``mindpalace --help``, each in a fresh process.

Every case is run ``--runs`` times (20; ``--fast``: 5) in a new subprocess, after one untimed
warm-up run (file cache, ``.pyc`` files); the runs of all cases are interleaved in a seeded
random order, so drift of the machine spreads over every case alike. Reported: the median wall
time (and the min) per case and its ratio to the bare interpreter (``python -c pass``) measured
in the same run.

* ``python -c pass`` — the baseline.
* ``import mindpalace`` — the package is lazy (PEP 562): names load on first use. Target: at most
  8× the bare interpreter (a hook or CLI call that shells out pays only for what it touches).
* ``from mindpalace import Memory`` — the facade and everything it wires (store, numpy …).
* ``mindpalace --help`` — the console script (``python -m mindpalace.cli`` when the script is not
  installed): typer, rich and the CLI modules, never the library.

    python benchmarks/bench_startup.py --fast
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 8.0  # `import mindpalace` may take at most this many times the bare interpreter
BASELINE = "python -c pass"


def cases() -> dict[str, list[str]]:
    """Command lines by case name (the first is the baseline)."""
    py = sys.executable
    script = Path(py).with_name("mindpalace")
    cli = [str(script)] if script.exists() else [py, "-m", "mindpalace.cli"]
    return {
        BASELINE: [py, "-c", "pass"],
        "import mindpalace": [py, "-c", "import mindpalace"],
        "from mindpalace import Memory": [py, "-c", "from mindpalace import Memory"],
        "mindpalace --help": [*cli, "--help"],
    }


def run_once(argv: list[str]) -> float:
    """Wall seconds of one fresh process; raises when it fails."""
    env = {**os.environ, "COLUMNS": "100"}
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def measure(commands: dict[str, list[str]], runs: int, seed: int) -> dict[str, list[float]]:
    """`runs` timings per case, interleaved in a seeded random order after one warm-up each."""
    for argv in commands.values():
        run_once(argv)
    order = [name for name in commands for _ in range(runs)]
    random.Random(seed).shuffle(order)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for name in order:
        times[name].append(run_once(commands[name]))
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="fresh processes per case (median)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the interleaved run order")
    ap.add_argument("--fast", action="store_true", help="5 runs per case")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.fast:
        args.runs = 5

    commands = cases()
    times = measure(commands, args.runs, args.seed)
    base = statistics.median(times[BASELINE])
    rows: list[dict[str, Any]] = []
    for name, argv_ in commands.items():
        median = statistics.median(times[name])
        rows.append({
            "case": name, "command": " ".join(Path(argv_[0]).name if i == 0 else a
                                              for i, a in enumerate(argv_)),
            "runs": len(times[name]), "median_ms": round(1000 * median, 1),
            "min_ms": round(1000 * min(times[name]), 1), "ratio": round(median / base, 2),
        })
    table = Table(title=f"bench_startup: median wall time of {args.runs} fresh processes per "
                        f"case (seed {args.seed}); ratio to the bare interpreter; target: "
                        f"import mindpalace ≤ {TARGET_RATIO:g}×")
    for col in ("case", "command", "median ms", "min ms", "× bare python"):
        table.add_column(col, justify="left" if col in ("case", "command") else "right")
    for r in rows:
        table.add_row(r["case"], r["command"], f"{r['median_ms']:.1f}", f"{r['min_ms']:.1f}",
                      f"{r['ratio']:.2f}")
    Console(width=160).print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    ratio = next(r["ratio"] for r in rows if r["case"] == "import mindpalace")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
