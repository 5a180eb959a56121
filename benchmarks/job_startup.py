r"""Jobs per paper and their process start-up cost: one job per run, per run id, per experiment (issue 16, item 4).

For each paper target, dry-runs the workflow with ``jobs: {seeds_together: false}``, ``{seeds_together: true}``
and ``{seeds_together: true, experiments_together: true}`` on top of the given overlays (default: the rehearsal,
i.e. the paper-scale DAG) and counts the jobs that start a Python process
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

PAPERS = ("afl", "wafl", "fedmm", "fedpals", "agnostic_fedavg", "shift_matrix")
#: mode → the `jobs:` overlay (both keys: the overlay replaces what the given configfiles set)
MODES = {"per_run": "{seeds_together: false, experiments_together: false}",
         "per_run_id": "{seeds_together: true, experiments_together: false}",
         "per_experiment": "{seeds_together: true, experiments_together: true}"}
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
        for mode, jobs in MODES.items():
            f = Path(tmp) / f"{mode}.yaml"
            f.write_text(f"jobs: {jobs}\n")
            overlays[mode] = f
        for paper in PAPERS:
            row = {"paper": paper}
            for mode, f in overlays.items():
                # the overlay goes last among the --configfile files (before --config, which ends the list)
                at = extra.index("--config") if "--config" in extra else len(extra)
                args = [*extra[:at], str(f), *extra[at:]] if "--configfile" in extra else [
                    "--configfile", str(f), *extra]
                counts = job_counts(a.snakemake, paper, args)
                heavy = sum(n for rule, n in counts.items() if not rule.startswith(LIGHT) and rule != paper)
                row[f"jobs_{mode}"] = heavy
                row[f"startup_cpu_min_{mode}"] = round(heavy * cost / 60, 1)
            rows.append(row)
    total = {"paper": "total"} | {k: round(sum(r[k] for r in rows), 1) for k in rows[0] if k != "paper"}
    rows.append(total)
    record = {"startup_cpu_s_per_job": round(cost, 2), "imports": IMPORTS, "overlays": extra, "modes": MODES,
              "papers": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"start-up: {cost:.2f} CPU-s per job ({IMPORTS})\n")
    print("| paper | jobs: per run → per run id → per experiment | start-up CPU-min |")
    print("|---|---:|---:|")
    for r in rows:
        print(f"| {r['paper']} | {' → '.join(str(r[f'jobs_{m}']) for m in MODES)} "
              f"| {' → '.join(str(r[f'startup_cpu_min_{m}']) for m in MODES)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
