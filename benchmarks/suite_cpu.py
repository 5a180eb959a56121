r"""The test suite's CPU seconds per test and per file, and their total: where CI's time goes.

Runs pytest with ``--cpu-report`` (``tests/cpu_report.py``: user + system CPU seconds of each test's own process
and its subprocesses, so Snakemake and its jobs count, independent of what else the machine runs) and prints
Markdown tables: the files by CPU seconds, the slowest tests, and the total beside the session's wall time.
``--vs OLD.csv`` adds the figures of an earlier report (e.g. from the parent commit) and their ratio, so a
regression shows as a number in review. ``--read CSV`` only prints an existing report.

Usage (repository root)::

    .venv/bin/python benchmarks/suite_cpu.py --out results/benchmarks/suite_cpu.csv            # the README's suite
    .venv/bin/python benchmarks/suite_cpu.py --out /tmp/unit.csv -- -m "not workflow"          # the unit loop
    .venv/bin/python benchmarks/suite_cpu.py --read new.csv --vs old.csv                       # compare two

Name the machine kind beside any figure you quote (``lscpu``: the Intel Xeon kind with AVX-512 is 2-2.6 times
faster than the AMD EPYC kind).
"""

from __future__ import annotations

import argparse
import csv
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path


def read(path: Path) -> list[dict]:
    """The rows of a ``--cpu-report`` CSV, with the numbers as floats."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("cpu_s", "cpu_s_setup", "cpu_s_call", "cpu_s_teardown", "wall_s"):
            r[k] = float(r[k])
    return rows


def by_file(rows: list[dict]) -> dict[str, dict]:
    """File → {"cpu_s", "wall_s", "tests"} summed over its tests."""
    out: dict[str, dict] = defaultdict(lambda: {"cpu_s": 0.0, "wall_s": 0.0, "tests": 0})
    for r in rows:
        f = out[r["file"]]
        f["cpu_s"] += r["cpu_s"]
        f["wall_s"] += r["wall_s"]
        f["tests"] += 1
    return dict(out)


def cpu_name() -> str:
    """The processor's model name (``lscpu``'s), or the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def report(rows: list[dict], old: list[dict] | None, top: int) -> str:
    """Markdown: total, the files by CPU seconds (with the old figures and ratio when given), the slowest tests."""
    files, old_files = by_file(rows), by_file(old) if old else {}
    total = sum(r["cpu_s"] for r in rows)
    lines = [f"**{len(rows)} tests, {total:,.0f} CPU-s ({total / 60:.1f} CPU-minutes)**"
             + (f" against {sum(r['cpu_s'] for r in old):,.0f} CPU-s before" if old else ""), "",
             "| file | tests | CPU-s | wall-s (sum of its tests) |" + (" CPU-s before | ratio |" if old else ""),
             "|---|---:|---:|---:|" + ("---:|---:|" if old else "")]
    for name, f in sorted(files.items(), key=lambda kv: -kv[1]["cpu_s"]):
        line = f"| `{name}` | {f['tests']} | {f['cpu_s']:,.1f} | {f['wall_s']:,.1f} |"
        if old:
            before = old_files.get(name, {}).get("cpu_s")
            line += (f" {before:,.1f} | {f['cpu_s'] / before:.2f} |" if before else " — | — |")
        lines.append(line)
    for name in sorted(set(old_files) - set(files)):
        lines.append(f"| `{name}` (gone) | 0 | 0 | 0 | {old_files[name]['cpu_s']:,.1f} | 0 |")
    lines += ["", f"The {top} tests with the most CPU seconds:", "", "| test | CPU-s | wall-s | outcome |",
              "|---|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"| `{r['nodeid']}` | {r['cpu_s']:,.1f} | {r['wall_s']:,.1f} | {r['outcome']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("results/benchmarks/suite_cpu.csv"),
                        help="where the run writes its report (default: %(default)s)")
    parser.add_argument("--read", type=Path, help="print this existing report instead of running pytest")
    parser.add_argument("--vs", type=Path, help="an earlier report to compare with")
    parser.add_argument("--top", type=int, default=25, help="how many tests to list (default: %(default)s)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (e.g. -m 'not workflow')")
    args = parser.parse_args(argv)
    path, wall = args.read, None
    if path is None:
        path = args.out
        t0 = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "pytest", "--cpu-report", str(path), *args.pytest_args]).returncode
        wall = time.monotonic() - t0
        if not path.is_file():
            print(f"pytest wrote no report (exit {rc})", file=sys.stderr)
            return rc or 1
    print(f"Machine: {cpu_name()}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores"
          + (f"; pytest took {wall / 60:.1f} minutes wall" if wall is not None else f"; report {path}"))
    print()
    print(report(read(path), read(args.vs) if args.vs else None, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
