"""The shift matrix (issue 21) end to end on a tiny configuration (tests/workflow/shift_matrix_smoke.yaml): real
Fashion-MNIST from the mirror, two shifts, three algorithms that run and one whose cells are "n/a", MLR and the CNN
in each job; the three named outputs are written for each model; a rerun is a no-op; a malformed section is refused
before any job, naming the key path."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from test_workflow import SNAKEMAKE, job_counts, run

pytestmark = pytest.mark.workflow

TARGETS = ["shift_matrix_table", "shift_matrix_figure", "shift_ranks"]
SMOKE = ["--configfile", "tests/workflow/smoke.yaml", "tests/workflow/shift_matrix_smoke.yaml"]


def smk(repo, mirror, *extra, overlays=(), check=True, smoke=SMOKE):
    return run([*SNAKEMAKE, "--cores", "2", *TARGETS, *extra, *smoke, *overlays, "--config", f"data_mirror={mirror}"],
               repo, check=check)


def test_the_shift_matrix_runs_end_to_end_on_a_tiny_config(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    counts = job_counts(smk(repo, mirror_dir, "-n").stdout)
    # one training and one evaluation job per cell (all seeds and grid values): none_iid × {fedavg, fedprox},
    # label × {fedavg, fedprox, fedpals}; FedPALS needs T under none_iid, AFL domain ids under both: no jobs
    assert counts["paper_train_shift_matrix_none_iid"] == 2
    assert counts["paper_train_shift_matrix_label"] == 3
    assert counts["paper_evaluate_shift_matrix_label"] == 3
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
    assert set(metrics["role"]) == {"validation", "test", "tuning"}  # tuning: successive halving's cost record
    assert set(metrics[metrics["role"] != "tuning"]["grid"]) == set(range(9))  # every method's 9 configurations
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


TOY_COLUMNS = """shift_matrix:
  active_shifts: [toy_upright, toy_rotated]
  algorithms: [fedavg]
  model: [logreg]     # the toy images keep their own small side (the data registry's), too small for cnn2's 5×5 convs
  shifts:
    toy_upright: {kind: none, dataset: toy_shapes, split: iid, clients: 4, samples_per_client: 60,
                  validation_size: 80, test_size: 200}
    toy_rotated: {kind: toy_rotation, dataset: toy_shapes, degrees: 90, clients: 4, samples_per_client: 60,
                  validation_size: 80, test_size: 200}
"""


def test_a_toy_dataset_and_a_toy_shift_from_their_folders_run_through_the_matrix_rules(copy_repo, mirror_dir,
                                                                                     tmp_path):
    """tests/toy_dataset and tests/toy_shift, each switched on by its own YAML (the one registration line), are
    downloaded from a mirror, decoded by the plug-in's loader, drawn, trained and tabulated by the generic rules."""
    repo = copy_repo(tmp_path / "repo")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for entry in mirror_dir.iterdir():
        (mirror / entry.name).symlink_to(entry.resolve())
    (mirror / "toy_shapes").symlink_to(repo / "tests/toy_dataset/raw")
    (repo / "toy_columns.yaml").write_text(TOY_COLUMNS)
    # the matrix smoke without its CNN settings (an overlay cannot delete keys): the toy images are MLR-only
    matrix_smoke = yaml.safe_load((repo / "tests/workflow/shift_matrix_smoke.yaml").read_text())
    matrix_smoke["shift_matrix"].pop("model_train", None)
    (repo / "toy_matrix_smoke.yaml").write_text(yaml.safe_dump(matrix_smoke))
    smoke = ["--configfile", "tests/workflow/smoke.yaml", "toy_matrix_smoke.yaml"]
    overlays = ["tests/toy_dataset/toy_dataset.yaml", "tests/toy_shift/toy_shift.yaml", "toy_columns.yaml"]
    proc = smk(repo, mirror, overlays=overlays, smoke=smoke)
    counts = job_counts(proc.stdout + proc.stderr)
    assert counts["download_toy_shapes"] == 1 and counts["prepare"] == 1  # toy_shapes only: no other dataset
    assert counts["paper_train_shift_matrix_toy_rotated"] == 1
    table = pd.read_csv(repo / "results/tables/shift_matrix/shift_matrix.csv")
    assert set(table["column"]) == {"toy_upright: accuracy", "toy_rotated: accuracy"}
    mean = table.groupby("column")["mean"].mean()  # 2 rounds (the smoke's): learnt upright, lost when rotated
    assert mean["toy_upright: accuracy"] > 0.6 and mean["toy_rotated: accuracy"] < mean["toy_upright: accuracy"] - 0.2
    # editing the toy shift reruns its own column only (its file is in those runs' code hash)
    shift = repo / "tests/toy_shift/shift.py"
    shift.write_text(shift.read_text() + "\n# edited\n")
    counts = job_counts(smk(repo, mirror, "-n", overlays=overlays, smoke=smoke).stdout)
    assert counts.get("paper_train_shift_matrix_toy_rotated") == 1
    assert "paper_train_shift_matrix_toy_upright" not in counts
