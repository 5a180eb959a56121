"""Proof of the paper contract (issue 17): a toy sixth paper from tests/toy_paper, switched on by its own YAML and
nothing else, runs end to end through the generic rules; a rerun is a no-op; editing the plug-in reruns its jobs;
a malformed section of it is refused before any job, naming the key path."""

from __future__ import annotations

import pandas as pd
import pytest
from test_workflow import SNAKEMAKE, job_counts, run

pytestmark = pytest.mark.workflow

TOY = ["--configfile", "tests/workflow/smoke.yaml", "tests/toy_paper/toy.yaml"]


def smk(repo, mirror, *extra, overlays=(), check=True):
    return run([*SNAKEMAKE, "--cores", "2", "toy", *extra, *TOY, *overlays, "--config", f"data_mirror={mirror}"],
               repo, check=check)


def test_a_toy_paper_from_a_test_folder_runs_end_to_end(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    counts = job_counts(smk(repo, mirror_dir, "-n").stdout)
    assert counts == {"paper_partition": 1, "paper_train": 4, "paper_evaluate": 4, "toy_table": 1, "toy": 1}
    smk(repo, mirror_dir)
    table = pd.read_csv(repo / "results/tables/toy/toy_table.csv")
    assert sorted(table["run"]) == ["fedavg", "fedprox"] and table["count"].eq(2).all()
    assert table["mean"].between(0.5, 1).all()
    metrics = pd.read_csv(repo / "results/runs/toy/two_domains/fedprox/seed~1/metrics.csv")
    assert metrics.loc[0, ["paper", "experiment", "run", "seed"]].tolist() == ["toy", "two_domains", "fedprox", 1]
    assert "Nothing to be done" in smk(repo, mirror_dir, "-n").stdout
    # fewer, fatter jobs: `jobs: {seeds_together: true}` trains and evaluates each run id's seeds in one job, with
    # the same bytes
    models = {p: p.read_bytes() for p in (repo / "results/runs/toy").rglob("model.pt")}
    (repo / "together.yaml").write_text("jobs: {seeds_together: true}\n")
    proc = smk(repo, mirror_dir, "-F", overlays=["together.yaml"])
    counts = job_counts(proc.stdout + proc.stderr)  # a real run logs its job stats to stderr
    assert counts["paper_train_seeds_toy_two_domains"] == 2 and counts["paper_evaluate_seeds_toy_two_domains"] == 2
    assert "paper_train" not in counts and len(models) == 4
    assert all(p.read_bytes() == b for p, b in models.items())
    # editing the plug-in reruns its jobs (its module is part of every toy job's code hash)
    paper = repo / "tests/toy_paper/paper.py"
    paper.write_text(paper.read_text() + "\n# edited\n")
    counts = job_counts(smk(repo, mirror_dir, "-n").stdout)
    assert counts["paper_train"] == 4 and counts["paper_partition"] == 1


@pytest.mark.parametrize(("overlay", "where"), [
    ("toy: {experiments: {two_domains: {seeds: 0}}}", "toy.experiments.two_domains.seeds"),
    ("toy: {experiments: {two_domains: {train: {client_lr: .nan}}}}", "toy.experiments.two_domains.train.client_lr"),
    ("toy: {experiments: {two_domains: {algorithms: {not_registered: }}}}", "toy.experiments.two_domains"),
])
def test_a_malformed_toy_section_is_refused_before_any_job(copy_repo, mirror_dir, tmp_path, overlay, where):
    repo = copy_repo(tmp_path / "repo")
    (repo / "bad.yaml").write_text(overlay + "\n")
    proc = run([*SNAKEMAKE, "-n", "--cores", "1", "toy", *TOY, "bad.yaml", "--config", f"data_mirror={mirror_dir}"],
               repo, check=False)
    assert proc.returncode != 0
    assert where in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
