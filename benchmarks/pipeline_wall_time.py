r"""Wall time, CPU time and job counts of one whole Snakemake run (issue 16: the quick and rehearsal targets).

Runs ``snakemake --cores all <args>`` in ``--repo`` (a fresh clone, its venv already set up), and writes one JSON
record: wall seconds, the children's user and system CPU seconds, the jobs per rule (Snakemake's job stats), the
machine (CPU model, cores, memory) and the load average before and after, so a reader can tell an idle-core
measurement from a shared one; and the CPU seconds of the benchmarked (training and evaluation) jobs per paper,
summed from ``results/benchmarks/<paper>/`` (the split that says which paper's settings to cut).

Usage (from the repository root)::

    python benchmarks/pipeline_wall_time.py --repo /tmp/fresh --out quick.json -- \\
        --configfile config/quick.yaml --config data_mirror=../shared/data

The targets the README states (quick ≤ 30 min, rehearsal ≤ 60 min on 2 idle cores) are checked by reading the
record, not by a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path


def machine() -> dict:
    """CPU model, logical cores, memory (GiB) and Python/OS of this machine."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    mem = next((int(line.split()[1]) / 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), None) if Path("/proc/meminfo").exists() else None
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(mem, 1) if mem else None,
            "python": platform.python_version(), "system": platform.platform()}


def job_stats(text: str) -> dict[str, int]:
    """Rule → job count from Snakemake's "Job stats" table (the last one in ``text``)."""
    blocks = text.split("Job stats:")
    if len(blocks) < 2:
        return {}
    counts = {}
    for line in blocks[-1].splitlines()[3:]:
        m = re.fullmatch(r"\s*(\S+)\s+(\d+)\s*", line)
        if not m:
            break
        counts[m.group(1)] = int(m.group(2))
    counts.pop("total", None)
    return counts


def cpu_by_paper(benchmarks: Path) -> dict[str, float]:
    """CPU seconds of the benchmarked jobs per paper, from Snakemake's ``benchmark:`` files.

    Parameters
    ----------
    benchmarks : Path
        ``results/benchmarks`` of the run; its first level is the paper (the rules ``paper_train_*``,
        ``paper_evaluate_*`` and ``paper_experiment_*`` write ``results/benchmarks/<paper>/...``).

    Returns
    -------
    dict
        Paper → the sum of the ``cpu_time`` column (seconds) over its files, largest first; a file
        without that column or with ``NA`` is skipped.
    """
    totals: dict[str, float] = {}
    for f in sorted(benchmarks.rglob("*")):
        if not f.is_file():
            continue
        lines = f.read_text().splitlines()
        if len(lines) < 2:
            continue
        row = dict(zip(lines[0].split("\t"), lines[1].split("\t"), strict=False))
        try:
            cpu = float(row.get("cpu_time", "NA"))
        except ValueError:
            continue
        paper = f.relative_to(benchmarks).parts[0]
        totals[paper] = totals.get(paper, 0.0) + cpu
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, required=True, help="checkout to run in (a fresh clone)")
    ap.add_argument("--out", type=Path, required=True, help="JSON record to write")
    ap.add_argument("--snakemake", default=None, help="snakemake executable (default: <repo>/.venv/bin/snakemake)")
    ap.add_argument("--cores", default="all")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="after --: snakemake arguments")
    a = ap.parse_args(argv)
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    exe = a.snakemake or str(a.repo / ".venv/bin/snakemake")
    cmd = [exe, "--cores", a.cores, *args]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=a.repo, capture_output=True, text=True).stdout.strip()
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=a.repo, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    (a.repo / "pipeline_wall_time.log").write_text(proc.stdout + proc.stderr)
    record = {"command": cmd, "commit": commit, "returncode": proc.returncode, "wall_s": round(wall, 1),
              "cpu_user_s": round(ru.ru_utime, 1), "cpu_system_s": round(ru.ru_stime, 1),
              "jobs": job_stats(proc.stderr), "load_before": load0, "load_after": os.getloadavg(),
              "machine": machine(), "benchmarked_cpu_s_by_paper": cpu_by_paper(a.repo / "results/benchmarks")}
    record["jobs_total"] = sum(record["jobs"].values())
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("returncode", "wall_s", "cpu_user_s", "cpu_system_s", "jobs_total")}))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
