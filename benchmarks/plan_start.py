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

Each figure is the median of ``--repeat`` runs (a later plan and a start after one untimed run). With ``--vs
TREE`` the two trees are measured in turn, run by run (A B A B ...), and the table gives each tree's median and the
median of the per-turn ratios: on a shared machine whose speed drifts by tens of percent within minutes, the ratio is
the figure to trust. Prints a Markdown table and writes a JSON record of every run. ``--drop-paper shift_matrix``
measures the plan of the other papers, in a copy of each tree without that paper's config file and overlay section
(with the tree's bytecode compiled, when the tree has it: ``bin/setup`` compiles the package).

Usage (repository root; "before" = a worktree of the earlier commit sharing this environment)::

    git worktree add /tmp/before 5021f1c
    .venv/bin/python benchmarks/plan_start.py --vs /tmp/before --drop-paper shift_matrix --repeat 5 \
        --out results/benchmarks/plan_start.json
    git worktree remove /tmp/before
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
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


def runs_of(tree: Path, snakemake: str) -> dict[str, Callable[[], float]]:
    """Each figure's measurement, by name: a callable that runs it once in ``tree`` and returns its CPU-s."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    memo = tree / ".snakemake" / "fedshift"  # the code hashes kept between plans (fedshift.codehash)
    out: dict[str, Callable[[], float]] = {}

    def plan(cmd: list[str], first: bool) -> Callable[[], float]:
        def run() -> float:
            if first:  # a fresh clone's first plan: nothing kept
                shutil.rmtree(memo, ignore_errors=True)
            return cpu_seconds(cmd, tree, env)
        return run

    for scale, extra in PLANS.items():
        cmd = [snakemake, "-n", "--cores", "1", "--quiet", *extra]
        out[f"plan_{scale}_first"] = plan(cmd, True)
        out[f"plan_{scale}"] = plan(cmd, False)
    for stage in STAGES:
        for paper in PAPERS:
            cmd = [sys.executable, "-c", start_code(tree, paper, stage)]
            out[f"start_{stage}_{paper}"] = functools.partial(cpu_seconds, cmd, tree, env)
    return out


def measure(trees: list[Path], repeat: int, snakemake: str) -> list[dict[str, list[float]]]:
    """Every figure ``repeat`` times in each tree, the trees in turn (A B A B ...), so that a drift of the machine's
    speed shows in both alike; a plan's ``_first`` runs before its later ones, as for a user."""
    runs = [runs_of(t, snakemake) for t in trees]
    out: list[dict[str, list[float]]] = [{} for _ in trees]
    for name in runs[0]:
        if not name.endswith("_first") and f"{name}_first" not in runs[0]:
            for r in runs:  # one untimed run first: the figure is a later plan or a start, not the first
                r[name]()
        for _ in range(repeat):
            for i, r in enumerate(runs):
                out[i].setdefault(name, []).append(r[name]())
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
    ap.add_argument("--vs", type=Path, help="a second tree (the earlier commit), measured in turn with --tree")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")))
    ap.add_argument("--drop-paper", help="measure without this paper (its config file and quick section)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    trees = [t.resolve() for t in ([a.vs] if a.vs else []) + [a.tree]]
    commits = [subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=t, capture_output=True,
                              text=True).stdout.strip() for t in trees]
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = [without_paper(t, a.drop_paper, Path(tmp) / str(i)) if a.drop_paper else t
                for i, t in enumerate(trees)]
        samples = measure(work, a.repeat, a.snakemake)
    medians = [{k: statistics.median(v) for k, v in s.items()} for s in samples]
    record = {"trees": [str(t) for t in trees], "commits": commits, "repeat": a.repeat, "load_before": load,
              "load_after": os.getloadavg()[0], "without": a.drop_paper, "cpu_seconds": samples}
    title = f"median of {a.repeat}{', without ' + a.drop_paper if a.drop_paper else ''}"
    if len(trees) == 1:
        print(f"| what ({commits[0]}, {title}) | CPU-s |\n|---|---:|")
        for key, value in medians[0].items():
            print(f"| {key} | {value:.2f} |")
    else:  # the ratio: the median of each turn's after / before
        print(f"| what ({title}, in turn) | {commits[0]} | {commits[1]} | ratio |\n|---|---:|---:|---:|")
        for key in medians[0]:
            ratio = statistics.median(b / a for a, b in zip(samples[0][key], samples[1][key], strict=True))
            print(f"| {key} | {medians[0][key]:.2f} | {medians[1][key]:.2f} | {ratio:.3f} |")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
