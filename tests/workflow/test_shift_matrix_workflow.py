"""The shift matrix (issue 21) end to end on a tiny configuration (tests/workflow/shift_matrix_smoke.yaml): real
Fashion-MNIST from the mirror, two shifts, three algorithms that run and one whose cells are "n/a", MLR and the CNN
in each job; the three named outputs are written for each model; a rerun is a no-op; a malformed section is refused
before any job, naming the key path."""

from __future__ import annotations

import pandas as pd
import pytest
from test_workflow import SNAKEMAKE, job_counts, run

pytestmark = pytest.mark.workflow

TARGETS = ["shift_matrix_table", "shift_matrix_figure", "shift_ranks"]
SMOKE = ["--configfile", "tests/workflow/smoke.yaml", "tests/workflow/shift_matrix_smoke.yaml"]


def smk(repo, mirror, *extra, overlays=(), check=True):
    return run([*SNAKEMAKE, "--cores", "2", *TARGETS, *extra, *SMOKE, *overlays, "--config", f"data_mirror={mirror}"],
               repo, check=check)


def test_the_shift_matrix_runs_end_to_end_on_a_tiny_config(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    counts = job_counts(smk(repo, mirror_dir, "-n").stdout)
    # one training and one evaluation job per cell (all seeds and grid values): none_iid × {fedavg, fedprox},
    # label × {fedavg, fedprox, fedpals}; FedPALS needs T under none_iid, AFL domain ids under both: no jobs
    assert counts["paper_train_seeds_shift_matrix_none_iid"] == 2
    assert counts["paper_train_seeds_shift_matrix_label"] == 3
    assert counts["paper_evaluate_seeds_shift_matrix_label"] == 3
    smk(repo, mirror_dir)
    table = pd.read_csv(repo / "results/tables/shift_matrix/shift_matrix.csv")
    assert set(table["column"]) == {"none_iid: accuracy", "label: accuracy"}
    assert table["seeds"].eq(2).all() and table["mean"].between(0, 1).all()
    assert set(table[table["column"] == "label: accuracy"]["algorithm"]) == {"fedavg", "fedprox", "fedpals"}
    md = (repo / "results/tables/shift_matrix/shift_matrix.md").read_text()
    assert "n/a: needs target_label_marginal, which the none shift does not give" in md
    assert "n/a: needs domain_ids, which the label shift does not give" in md and "**" in md and "Δ" in md
    assert (repo / "results/tables/shift_matrix/shift_matrix.tex").read_text().startswith("\\begin{tabular}")
    for f in ("shift_matrix_delta", "shift_ranks"):
        assert (repo / f"results/figures/shift_matrix/{f}.png").stat().st_size > 1000
    ranks = pd.read_csv(repo / "results/tables/shift_matrix/shift_ranks.csv")
    assert set(ranks["algorithm"]) == {"fedavg", "fedprox"}  # FedPALS runs in one column of two: not ranked
    assert sorted(ranks["average_rank"]) in ([1.0, 2.0], [1.5, 1.5], [1.25, 1.75])
    metrics = pd.read_csv(repo / "results/runs/shift_matrix/label/fedpals/seed~1/metrics.csv")
    assert set(metrics["role"]) == {"validation", "test"} and set(metrics["grid"]) == {0, 1}
    assert set(metrics["model"]) == {"logreg", "cnn2"}  # both models in the cell's one job
    cnn = pd.read_csv(repo / "results/tables/shift_matrix/shift_matrix_cnn2.csv")
    assert set(cnn["column"]) == set(table["column"]) and cnn["seeds"].eq(2).all()
    assert not cnn.set_index(["column", "algorithm"])["mean"].equals(table.set_index(["column", "algorithm"])["mean"])
    assert (repo / "results/figures/shift_matrix/shift_matrix_delta_cnn2.png").stat().st_size > 1000
    assert "Nothing to be done" in smk(repo, mirror_dir, "-n").stdout


def test_a_malformed_shift_matrix_section_is_refused_before_any_job(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    (repo / "bad.yaml").write_text("shift_matrix: {grids: {fedprox: [{mu: 0.1}]}}\n")
    proc = smk(repo, mirror_dir, "-n", overlays=["bad.yaml"], check=False)
    assert proc.returncode != 0 and "shift_matrix.grids.fedprox" in proc.stderr and "Traceback" not in proc.stderr
