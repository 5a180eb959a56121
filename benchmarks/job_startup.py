r"""Jobs per paper and their process start-up cost, one job per run vs one job per run id (issue 16, item 4).

For each paper target, dry-runs the workflow with ``jobs: {seeds_together: false}`` and ``true`` on top of the
given overlays (default: the rehearsal, i.e. the paper-scale DAG) and counts the jobs that start a Python process
importing torch (``paper_*`` training/evaluation/partition jobs and the paper's output jobs); then measures the CPU
seconds one such start costs (interpreter + torch + torchvision + fedshift's job modules, median of ``--repeat``
fresh processes). Start-up CPU = jobs × that cost. Writes a JSON record and prints a Markdown table.

Usage (repository root)::

    python benchmarks/job_startup.py --out results/benchmarks/job_startup.json \
        --configfile config/rehearsal.yaml --config data_mirror=../shared/data
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PAPERS = ("afl", "wafl", "fedmm", "fedpals", "agnostic_fedavg")
IMPORTS = "import torch, torchvision, fedshift.jobs, fedshift.contract"
#: rules whose jobs do not import torch (downloads, stand-in copies, the per-paper aggregate rule)
LIGHT = ("download_", "standin_", "all", "total")


def job_counts(snakemake: str, target: str, extra: list[str]) -> dict[str, int]:
    """Rule → jobs of ``snakemake -n target`` (Snakemake's job stats)."""
    out = subprocess.run([snakemake, "-n", "--cores", "1", target, *extra], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    counts, table = {}, out.stdout.split("Job stats:")[-1].splitlines()[3:]
    for line in table:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def startup_cpu_seconds(repeat: int) -> float:
    """Median user + system CPU seconds of a fresh interpreter importing what a job imports."""
    costs = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", IMPORTS], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        costs.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(costs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")))
    ap.add_argument("--repeat", type=int, default=5)
    a, extra = ap.parse_known_args(argv)
    cost = startup_cpu_seconds(a.repeat)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        overlays = {}
        for together in (False, True):
            f = Path(tmp) / f"together_{together}.yaml"
            f.write_text(f"jobs: {{seeds_together: {str(together).lower()}}}\n")
            overlays[together] = f
        for paper in PAPERS:
            row = {"paper": paper}
            for together, f in overlays.items():
                # the overlay goes last among the --configfile files (before --config, which ends the list)
                at = extra.index("--config") if "--config" in extra else len(extra)
                args = [*extra[:at], str(f), *extra[at:]] if "--configfile" in extra else [
                    "--configfile", str(f), *extra]
                counts = job_counts(a.snakemake, paper, args)
                heavy = sum(n for rule, n in counts.items() if not rule.startswith(LIGHT) and rule != paper)
                key = "per_run_id" if together else "per_run"
                row[f"jobs_{key}"] = heavy
                row[f"startup_cpu_min_{key}"] = round(heavy * cost / 60, 1)
            rows.append(row)
    record = {"startup_cpu_s_per_job": round(cost, 2), "imports": IMPORTS, "overlays": extra, "papers": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"start-up: {cost:.2f} CPU-s per job ({IMPORTS})\n")
    print("| paper | jobs, one per run | jobs, one per run id | start-up CPU-min before | after |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['paper']} | {r['jobs_per_run']} | {r['jobs_per_run_id']} | {r['startup_cpu_min_per_run']} "
              f"| {r['startup_cpu_min_per_run_id']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
