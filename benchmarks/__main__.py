"""Run benchmark modules and keep their output: ``python -m benchmarks [names] [--fast]``.

Each ``benchmarks/bench_<name>.py`` runs in its own process (as ``python benchmarks/bench_<name>.py
[--fast]``, so a crash or a slow module cannot take the others down); its printed table and, when
the module accepts ``--json``, its rows go to ``bench-results/<name>.json`` with the date, the
arguments, the exit code and the wall time.

    python -m benchmarks                 # every benchmark, full size
    python -m benchmarks tokens store --fast
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def available() -> list[str]:
    """Names of the benchmark modules (``bench_tokens.py`` → ``tokens``), sorted."""
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def accepts_json(script: Path) -> bool:
    return "--json" in script.read_text(encoding="utf-8")


def run(name: str, fast: bool, out_dir: Path) -> dict[str, object]:
    script = HERE / f"bench_{name}.py"
    args = [sys.executable, str(script), *(["--fast"] if fast else [])]
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = Path(tmp) / "rows.json"
        if accepts_json(script):
            args += ["--json", str(rows_file)]
        started = datetime.now(UTC)
        t0 = time.perf_counter()
        proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
        seconds = time.perf_counter() - t0
        rows = json.loads(rows_file.read_text(encoding="utf-8")) if rows_file.exists() else None
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-4000:] if proc.returncode else "")
    result: dict[str, object] = {
        "name": name, "started": started.isoformat(), "seconds": round(seconds, 2),
        "fast": fast, "args": args[1:], "returncode": proc.returncode, "table": proc.stdout,
        "rows": rows,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    return result


def main(argv: list[str] | None = None) -> int:
    names = available()
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default all): {', '.join(names)}")
    ap.add_argument("--fast", action="store_true", help="pass --fast to every benchmark (CI size)")
    ap.add_argument("--out", type=Path, default=REPO / "bench-results", help="where JSON results go")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.names) - set(names))
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(names)}")
    failed = [r["name"] for r in (run(n, args.fast, args.out) for n in args.names or names)
              if r["returncode"] != 0]
    if failed:
        print(f"benchmarks with a non-zero exit: {', '.join(map(str, failed))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
