r"""CPU seconds to plan the workflow (``snakemake -n``) and to start a job, for one checkout (issue 46).

Measured for the tree given by ``--tree`` (default: this repository), with that tree's ``src`` first on
``PYTHONPATH`` and this environment's Snakemake, so two checkouts (before and after a change) are compared on the
same machine and interpreter:

* **plan**: ``snakemake -n --cores 1 --quiet`` at quick scale (``--configfile config/quick.yaml``) and at paper scale
  (no overlay) on an empty results tree; user + system CPU of the process and its children. ``plan_<scale>_first``
  is a first plan (the code-hash memo under ``.snakemake/fedshift`` removed before each run), ``plan_<scale>`` one
  after another (the memo kept, as for a user's second ``snakemake -n`` or a SLURM job's parse);
* **start**: a fresh interpreter doing what a job does before its work begins: Snakemake's script preamble
  (``snakemake.script``, which unpickles the job's ``snakemake`` object), the job script's own imports, the paper
  plug-in loaded by name (:func:`fedshift.contract.load_paper`), then the module the stage runs: the paper's
  ``fit`` for a training job (up to its first training step: torch and the training code), its ``report`` for a
  table/figure job (pandas, matplotlib). Data loading and the steps themselves are not part of it.

Each figure is the median of ``--repeat`` runs. Prints a Markdown table and writes a JSON record. ``--drop-paper
shift_matrix`` measures the plan of the other papers, in a copy of the tree without that paper's config file and
overlay section (the shift matrix's plug-in is issue 50's to make light).

Usage (repository root; "before" = a worktree of the earlier commit sharing this environment)::

    git worktree add /tmp/before 498d59e
    .venv/bin/python benchmarks/plan_start.py --tree /tmp/before --out results/benchmarks/plan_start_before.json
    .venv/bin/python benchmarks/plan_start.py --out results/benchmarks/plan_start_after.json
    git worktree remove /tmp/before
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

PAPERS = ("afl", "agnostic_fedavg", "fedmm", "fedpals", "wafl")
#: stage → (job script, the paper submodule the stage imports once the plug-in is loaded)
STAGES = {"train": ("job_train.py", "fit"), "output": ("job_output.py", "report")}
PLANS = {"quick": ["--configfile", "config/quick.yaml"], "paper": []}


def cpu_seconds(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    """User + system CPU seconds of one command and its children (it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stderr[-3000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def start_code(tree: Path, paper: str, stage: str) -> str:
    """The Python a fresh job process runs before its work: preamble, script imports, plug-in, stage module."""
    script, module = STAGES[stage]
    body = ast.parse((tree / "workflow" / "scripts" / script).read_text()).body
    imports = "\n".join(ast.unparse(n) for n in body if isinstance(n, (ast.Import, ast.ImportFrom)))
    target = yaml.safe_load((tree / "config" / "papers" / f"{paper}.yaml").read_text())["papers"][paper]
    return (f"import snakemake.script\n{imports}\nfrom fedshift.contract import load_paper\n"
            f"load_paper({paper!r}, {target!r}, {{}})\nimport fedshift.papers.{paper}.{module}\n")


def measure(tree: Path, repeat: int, snakemake: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out: dict[str, float] = {}
    memo = tree / ".snakemake" / "fedshift"  # the code hashes kept between plans (fedshift.codehash)
    for scale, extra in PLANS.items():
        cmd = [snakemake, "-n", "--cores", "1", "--quiet", *extra]
        cold = []
        for _ in range(repeat):  # a fresh clone's first plan: nothing kept
            shutil.rmtree(memo, ignore_errors=True)
            cold.append(cpu_seconds(cmd, tree, env))
        out[f"plan_{scale}_first"] = statistics.median(cold)
        out[f"plan_{scale}"] = statistics.median(cpu_seconds(cmd, tree, env) for _ in range(repeat))
    for stage in STAGES:
        for paper in PAPERS:
            code = start_code(tree, paper, stage)
            out[f"start_{stage}_{paper}"] = statistics.median(
                cpu_seconds([sys.executable, "-c", code], tree, env) for _ in range(repeat))
    return out


def without_paper(tree: Path, paper: str, dest: Path) -> Path:
    """A copy of ``tree``'s tracked files without ``paper``: its ``config/papers`` file and quick-scale section."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=tree, capture_output=True, text=True, check=True).stdout
    for f in filter(None, files.split("\0")):
        if f != f"config/papers/{paper}.yaml" and (tree / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / f, dest / f)
    quick = yaml.safe_load((dest / "config" / "quick.yaml").read_text())
    quick.pop(paper, None)
    (dest / "config" / "quick.yaml").write_text(yaml.safe_dump(quick))
    if (tree / "src" / "fedshift" / "__pycache__").is_dir():  # the tree's bytecode (bin/setup) comes with it
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "src" / "fedshift")], check=True,
                       capture_output=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")))
    ap.add_argument("--drop-paper", help="measure without this paper (its config file and quick section)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    tree = a.tree.resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                            text=True).stdout.strip()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = without_paper(tree, a.drop_paper, Path(tmp)) if a.drop_paper else tree
        figures = measure(work, a.repeat, a.snakemake)
    record = {"tree": str(tree), "commit": commit, "repeat": a.repeat, "load_before": load,
              "without": a.drop_paper, "cpu_seconds": figures}
    print(f"| what ({commit}{', without ' + a.drop_paper if a.drop_paper else ''}, median of {a.repeat}) | CPU-s |"
          "\n|---|---:|")
    for key, value in figures.items():
        print(f"| {key} | {value:.2f} |")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
