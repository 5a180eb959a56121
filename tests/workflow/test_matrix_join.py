"""Adding an algorithm to a finished shift matrix trains only its own cells, in the documented command (one job per
shift, config/experiments_together.yaml): a tiny matrix (two shifts, FedAvg and FedProx, 2 seeds, MLR, 2 rounds) is
run, then the toy plug-in ``uniform_fedavg`` joins. Each shift's job runs again (it has new outputs: the plug-in's
cell), restores the finished cells from their stashes (hard links: the same inodes, the same bytes) and trains the
plug-in's cell alone; the per-seed table gains its rows."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from test_workflow import SNAKEMAKE, job_counts, run

pytestmark = pytest.mark.workflow

TINY = """shift_matrix:
  outputs: [shift_matrix_table]
  active_shifts: [none_iid, label]
  algorithms: [fedavg, fedprox]
  seeds: 2
  model: [logreg]
  plateau_tolerance: null
  train: {rounds: 2, clients_per_round: 3, local_epochs: 1, batch_size: 20, client_lr: 0.1}
  shifts:
    none_iid: {clients: 4, samples_per_client: 40, validation_size: 100, test_size: 200}
    label: {clients: 4, samples_per_label: 10, validation_size: 30, test_size: 200}
"""
PLUGIN = """algorithm_plugins: [tests/toy_algorithm/uniform_fedavg.py]
shift_matrix:
  algorithms: [fedavg, fedprox, uniform_fedavg]
"""


def smk(repo, mirror, *extra, overlays=()):
    return run([*SNAKEMAKE, "--cores", "2", "shift_matrix", *extra, "--configfile", "tests/workflow/smoke.yaml",
                "config/experiments_together.yaml", "tiny.yaml", *overlays, "--config", f"data_mirror={mirror}"],
               repo)


def _cells(repo: Path) -> dict[str, tuple[int, bytes]]:
    return {str(f.relative_to(repo)): (f.stat().st_ino, f.read_bytes())
            for f in sorted((repo / "results/runs/shift_matrix").rglob("*")) if f.is_file()}


def test_adding_a_plugin_algorithm_to_a_finished_matrix_trains_only_its_cells(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    (repo / "tiny.yaml").write_text(TINY)
    (repo / "plugin.yaml").write_text(PLUGIN)
    smk(repo, mirror_dir)
    before = _cells(repo)
    assert len(before) == 2 * 2 * 2 * 5  # shifts × algorithms × seeds × run files
    plan = smk(repo, mirror_dir, "-n", overlays=["plugin.yaml"]).stdout
    counts = job_counts(plan)
    # one job per shift: each holds a new cell (the plug-in's); nothing else trains, no per-cell job exists
    assert counts["paper_experiment_shift_matrix_none_iid"] == counts["paper_experiment_shift_matrix_label"] == 1
    assert not any(r.startswith(("paper_train_", "paper_evaluate_", "paper_partition_")) for r in counts)
    missing = [line for line in plan.splitlines() if "Missing output files" in line]
    assert len(missing) == 2 and all("/uniform_fedavg/" in line for line in missing)
    assert not any(re.search(r"/(fedavg|fedprox)/seed", line) for line in missing)
    smk(repo, mirror_dir, overlays=["plugin.yaml"])
    for shift in ("none_iid", "label"):
        log = (repo / f"results/logs/shift_matrix/experiment/{shift}.log").read_text()
        restored = set(re.findall(rf"shift_matrix / {shift} / (\w+): restored", log))
        assert restored == {"fedavg", "fedprox"}, log
    after = _cells(repo)
    assert {f: after[f] for f in before} == before  # same inodes and bytes: restored, not retrained or rewritten
    assert {Path(f).parts[4] for f in set(after) - set(before)} == {"uniform_fedavg"}
    runs = pd.read_csv(repo / "results/tables/shift_matrix/shift_matrix_runs.csv")
    assert set(runs["algorithm"]) == {"fedavg", "fedprox", "uniform_fedavg"} and set(runs["seed"]) == {0, 1}
    assert "Nothing to be done" in smk(repo, mirror_dir, "-n", overlays=["plugin.yaml"]).stdout
