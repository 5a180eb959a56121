r"""CPU seconds per Snakemake job, per rule, and what each job imported: where a workflow run's CPU goes.

Snakemake's own ``benchmark:`` files sample a job's processes every few seconds and miss what ends between two
samples (a 3 s table job may read 0 CPU-s). This script instead runs a Snakemake command with a ``sitecustomize``
module on ``PYTHONPATH`` that, when each Python process of the run exits, appends one JSON line: its rule (from the
``snakemake`` object Snakemake gives a ``script:``), its own user + system CPU seconds and those of the children it
waited for (:func:`resource.getrusage`), and which heavy libraries it had imported. The Snakemake process itself
(planning, scheduling) is one more line. Then it prints, per rule, the jobs, their CPU seconds, and the libraries
its jobs imported, with the total beside ``/usr/bin/time``-style totals of the whole run.

Usage (repository root; the command after ``--`` is run as is, e.g. the CI rehearsal)::

    python benchmarks/job_cpu.py --out results/benchmarks/job_cpu.jsonl -- \
        .venv/bin/snakemake --cores 2 all --configfile config/rehearsal.yaml ...
    python benchmarks/job_cpu.py --read results/benchmarks/job_cpu.jsonl [--top 30]

CPU seconds are the process's own (``RUSAGE_SELF``) plus its waited-for children (``RUSAGE_CHILDREN``): the same
quantity as ``tests/cpu_report.py``'s per-test column. A process killed by a signal writes no line.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Libraries whose import costs a job start seconds (measured in benchmarks/job_startup.py); reported per rule.
HEAVY = ("torch", "torchvision", "pandas", "cvxpy", "matplotlib", "scipy", "statsmodels", "sympy", "art", "PIL",
         "sklearn", "numba", "snakemake", "yaml", "jsonschema")

SITECUSTOMIZE = '''
import atexit, json, os, resource, sys, time
_START = time.time()
def _fedshift_job_cpu():
    try:
        main = sys.modules.get("__main__")
        sm = getattr(main, "snakemake", None)
        rule = getattr(sm, "rule", None)
        if rule is None:
            rule = "snakemake" if any(a.endswith("snakemake") for a in sys.argv[:2]) else "other:" + " ".join(
                os.path.basename(a) for a in sys.argv[:2])
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        line = {"rule": rule, "pid": os.getpid(), "wall_s": round(time.time() - _START, 3),
                "self_cpu_s": round(s.ru_utime + s.ru_stime, 3), "children_cpu_s": round(c.ru_utime + c.ru_stime, 3),
                "self_sys_s": round(s.ru_stime, 3), "sys_s": round(s.ru_stime + c.ru_stime, 3),
                "max_rss_mb": round(s.ru_maxrss / 1024, 1),
                "imported": sorted(m for m in %(heavy)r if m in sys.modules)}
        with open(%(out)r, "a") as f:
            f.write(json.dumps(line) + "\\n")
    except Exception:
        pass
atexit.register(_fedshift_job_cpu)
'''


def record(command: list[str], out: Path) -> dict[str, float]:
    """Run ``command`` with the per-process recorder; return its wall seconds and the run's CPU seconds.

    Parameters
    ----------
    command : list of str
        The Snakemake command line (or any command that starts Python processes).
    out : Path
        JSON-lines file the processes append to (emptied first).

    Returns
    -------
    dict
        ``wall_s``, and ``cpu_s``: user + system CPU seconds of the command and everything it waited for.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("")
    with tempfile.TemporaryDirectory(prefix="job-cpu-") as tmp:
        (Path(tmp) / "sitecustomize.py").write_text(SITECUSTOMIZE % {"heavy": HEAVY, "out": str(out.resolve())})
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH")) if p)}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(command, env=env)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"job_cpu: the command failed ({proc.returncode}): {' '.join(command)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def by_rule(lines: list[dict]) -> list[dict]:
    """Per rule: jobs, CPU seconds (own + waited-for children), system seconds, and the libraries its jobs imported.

    A job's Snakemake ``script:`` process is one line; the Snakemake process (planning and scheduling) is the
    ``snakemake`` row (its children, the jobs, are not counted twice: only its own CPU is). Rules of the
    ``paper_experiment_*`` family are listed each; sorted by CPU seconds, largest first.
    """
    rows: dict[str, dict] = collections.defaultdict(lambda: {"jobs": 0, "cpu_s": 0.0, "sys_s": 0.0, "imported": set()})
    for line in lines:
        r = rows[line["rule"]]
        own_only = line["rule"] == "snakemake"
        r["jobs"] += 1
        r["cpu_s"] += line["self_cpu_s"] + (0.0 if own_only else line["children_cpu_s"])
        r["sys_s"] += line.get("self_sys_s", line["sys_s"]) if own_only else line["sys_s"]
        r["imported"] |= set(line["imported"])
    return sorted(({"rule": k, **v, "imported": sorted(v["imported"])} for k, v in rows.items()),
                  key=lambda r: -r["cpu_s"])


def table(lines: list[dict], top: int) -> str:
    """Markdown: the ``top`` rules by CPU seconds, then the rest summed, then the total."""
    rows = by_rule(lines)
    out = ["| rule | jobs | CPU-s | of which system | imported |", "|---|---:|---:|---:|---|"]
    for r in rows[:top]:
        out.append(f"| `{r['rule']}` | {r['jobs']} | {r['cpu_s']:.1f} | {r['sys_s']:.1f} | "
                   f"{', '.join(r['imported'])} |")
    rest = rows[top:]
    if rest:
        out.append(f"| {len(rest)} other rules | {sum(r['jobs'] for r in rest)} | "
                   f"{sum(r['cpu_s'] for r in rest):.1f} | {sum(r['sys_s'] for r in rest):.1f} | |")
    out.append(f"| **all** | {sum(r['jobs'] for r in rows)} | {sum(r['cpu_s'] for r in rows):.1f} | "
               f"{sum(r['sys_s'] for r in rows):.1f} | |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/benchmarks/job_cpu.jsonl"))
    ap.add_argument("--read", type=Path, help="print the table of an earlier record instead of running")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("command", nargs="*", help="the command to run, after --")
    args = ap.parse_args(argv)
    path = args.read or args.out
    if not args.read:
        if not args.command:
            ap.error("give a command after -- or --read FILE")
        totals = record(args.command, args.out)
        print(f"run: {totals['wall_s']:.0f} s wall, {totals['cpu_s']:.0f} CPU-s (user + system, all processes)")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    print(table(lines, args.top))


if __name__ == "__main__":
    sys.exit(main())
