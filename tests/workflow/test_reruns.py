"""Reruns follow the code that ran: on a scratch copy whose outputs are all marked up to date (``--touch``),
editing a report module reruns only the tables and figures, editing SCAFFOLD reruns SCAFFOLD's runs (and what
reads them) and nothing else (``params: code``, :mod:`fedshift.codehash`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_workflow import STAGES

pytestmark = pytest.mark.workflow

BIN = Path(sys.executable).parent


def smk(repo: Path, mirror: Path, *extra: str) -> str:
    # the copy's own fedshift, for the DAG's code hashes and for the jobs
    env = {**os.environ, "PYTHONPATH": str(repo / "src"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    args = [str(BIN / "snakemake"), "--cores", "1", "fedpals", *extra, "--configfile", "tests/workflow/smoke.yaml",
            "--config", f"data_mirror={mirror}"]
    proc = subprocess.run(args, cwd=repo, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def planned(repo: Path, mirror: Path) -> dict[str, set[str]]:
    """Rule → the run folders / outputs a dry-run would (re)make."""
    out: dict[str, set[str]] = {}
    rule = None
    for line in smk(repo, mirror, "-n").splitlines():
        if line.startswith("rule "):
            rule = line.split()[1].rstrip(":")
        elif line.strip().startswith("output:") and rule:
            first = line.split("output:")[1].split(",")[0].strip()
            out.setdefault(rule, set()).add(first.split("/seed~")[0])
    return out


def by_stage(rules: dict[str, set[str]]) -> dict[str, set[str]]:
    """:func:`planned` with the generated rules paper_<stage>_<paper>_<experiment> merged by stage."""
    out: dict[str, set[str]] = {}
    for rule, files in rules.items():
        stage = next((s for s in STAGES if rule.startswith(f"{s}_")), rule)
        out.setdefault(stage, set()).update(files)
    return out


def test_editing_a_report_module_or_an_algorithm_reruns_exactly_what_runs_it(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    summary = smk(repo, mirror_dir, "--summary")
    for line in summary.splitlines()[1:]:
        path = line.split("\t")[0]
        if path.startswith(("results/", "data/")):
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).touch()
    smk(repo, mirror_dir, "--touch")
    assert planned(repo, mirror_dir) == {}

    report = repo / "src" / "fedshift" / "papers" / "fedpals" / "report.py"  # outputs' params carry its hash
    original = report.read_text()
    report.write_text(original + "\n# edited\n")
    rules = planned(repo, mirror_dir)
    assert rules and all(r.startswith("fedpals_") for r in rules)
    assert not {"paper_train", "paper_evaluate", "paper_partition", "fedpals_synthetic"} & set(by_stage(rules))
    report.write_text(original)
    assert planned(repo, mirror_dir) == {}

    # the generic plotting/table helpers count for table and figure jobs only (Paper.output_modules)
    reporting = repo / "src" / "fedshift" / "reporting.py"
    original = reporting.read_text()
    reporting.write_text(original + "\n# edited\n")
    rules = planned(repo, mirror_dir)
    assert rules and all(r.startswith("fedpals_") for r in rules), rules
    reporting.write_text(original)

    scaffold = repo / "src" / "fedshift" / "algorithms" / "scaffold.py"
    scaffold.write_text(scaffold.read_text() + "\n# edited\n")
    rules = planned(repo, mirror_dir)
    assert {r for r in rules if r.startswith("paper_")} == {f"paper_{s}_fedpals_fedpals_fmnist_c{c}"
                                                          for s in ("train", "evaluate") for c in (2, 3)}
    rules = by_stage(rules)
    assert rules["paper_train"] == {"results/runs/fedpals/fedpals_fmnist_c2/scaffold",
                                    "results/runs/fedpals/fedpals_fmnist_c3/scaffold"}
    assert rules["paper_evaluate"] == rules["paper_train"]
    assert "paper_partition" not in rules and "fedpals_synthetic" not in rules
