r"""What bounds the plan and job-start targets on this machine: the costs fedshift's own code cannot go under.

* **snakemake_start**: ``snakemake -n`` of a one-rule Snakefile in this environment (Snakemake's command line, API
  and the executor plug-ins it loads), user + system CPU-s;
* **import_torch**: ``python -c "import torch"``, user + system CPU-s (a training job's start includes it);
* **fedshift_share_<scale>** (with ``--py-spy``): the share of a later ``snakemake -n`` (the code-hash memo kept)
  spent in fedshift's code, from ``py-spy record --format raw``: a sample counts as fedshift's when a frame of the
  package or of the workflow's Snakefile and rule files is on its stack (the input and params functions Snakemake
  calls included, Snakemake's own work around them not). The rest of the plan's CPU-s is Snakemake's.

Each CPU figure is the median of ``--repeat`` runs, after one untimed run. The plans run in a copy of the tree
without ``--drop-paper`` (as :mod:`plan_start` measures them). py-spy is not one of fedshift's pins: install it
beside (``pip install --target /tmp/pyspy py-spy``) and pass ``--py-spy /tmp/pyspy/bin/py-spy``.

Usage (repository root)::

    .venv/bin/python benchmarks/plan_floor.py --drop-paper shift_matrix --py-spy /tmp/pyspy/bin/py-spy
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_start import PLANS, cpu_seconds, without_paper  # noqa: E402

ONE_RULE = 'rule a:\n    output: "x"\n    shell: "touch {output}"\n'


def fedshift_share(py_spy: str, cmd: list[str], tree: Path, env: dict[str, str]) -> float:
    """Share of ``cmd``'s py-spy samples with a fedshift package, Snakefile or ``.smk`` frame on the stack."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "raw.txt"
        subprocess.run([py_spy, "record", "-r", "200", "-f", "raw", "-o", str(out), "--", *cmd], cwd=tree, env=env,
                       capture_output=True, check=True)
        ours = total = 0
        for line in out.read_text().splitlines():
            stack, n = line.rsplit(" ", 1)
            total += int(n)
            if any("fedshift/" in f or ".smk:" in f or "Snakefile:" in f for f in stack.split(";")):
                ours += int(n)
    return ours / total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")))
    ap.add_argument("--drop-paper", help="plan without this paper (its config file and quick section)")
    ap.add_argument("--py-spy", help="a py-spy executable: also measure fedshift's share of each plan")
    a = ap.parse_args(argv)
    tree = a.tree.resolve()
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one"
        one.mkdir()
        (one / "Snakefile").write_text(ONE_RULE)
        runs = {"snakemake_start": ([a.snakemake, "-n", "--cores", "1", "--quiet"], one),
                "import_torch": ([sys.executable, "-c", "import torch"], tree)}
        for name, (cmd, cwd) in runs.items():
            cpu_seconds(cmd, cwd, env)
            rows[name] = statistics.median(cpu_seconds(cmd, cwd, env) for _ in range(a.repeat))
        if a.py_spy:
            work = without_paper(tree, a.drop_paper, Path(tmp) / "tree") if a.drop_paper else tree
            for scale, extra in PLANS.items():
                cmd = [a.snakemake, "-n", "--cores", "1", "--quiet", *extra]
                cpu_seconds(cmd, work, {**env, "PYTHONPATH": str(work / "src")})  # the memo written: a later plan
                rows[f"fedshift_share_{scale}"] = fedshift_share(a.py_spy, cmd, work,
                                                                 {**env, "PYTHONPATH": str(work / "src")})
    print(f"| what (median of {a.repeat}) | value |\n|---|---:|")
    for key, value in rows.items():
        print(f"| {key} | {value:.3f} |" if key.startswith("fedshift_share") else f"| {key} | {value:.2f} CPU-s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
