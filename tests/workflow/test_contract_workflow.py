"""Proof of the paper contract (issue 17): a toy sixth paper from tests/toy_paper, switched on by its own YAML and
nothing else, runs end to end through the generic rules; a rerun is a no-op; editing the plug-in reruns its jobs;
a malformed section of it is refused before any job, naming the key path. A toy algorithm from tests/toy_algorithm,
registered in one line, runs in two papers' experiments."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import yaml
from test_workflow import SNAKEMAKE, job_counts, run, stage_counts

pytestmark = pytest.mark.workflow

TOY = ["--configfile", "tests/workflow/smoke.yaml", "tests/toy_paper/toy.yaml"]


def smk(repo, mirror, *extra, overlays=(), check=True):
    return run([*SNAKEMAKE, "--cores", "2", "toy", *extra, *TOY, *overlays, "--config", f"data_mirror={mirror}"],
               repo, check=check)


def test_a_toy_paper_from_a_test_folder_runs_end_to_end(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    counts = job_counts(smk(repo, mirror_dir, "-n").stdout)
    assert counts == {"paper_partition_toy": 1, "paper_train_toy_two_domains": 4, "paper_evaluate_toy_two_domains": 4,
                      "toy_table": 1, "toy": 1}  # one job per run: 2 run ids × 2 seeds
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
    assert counts["paper_train_toy_two_domains"] == 2 and counts["paper_evaluate_toy_two_domains"] == 2  # per run id
    assert len(models) == 4
    assert all(p.read_bytes() == b for p, b in models.items())
    # ... and `jobs: {experiments_together: true}` everything of an experiment (its partition, every run id's
    # training and evaluation) in one job, with the same bytes; on a rerun there is nothing to do
    files = {p: p.read_bytes() for d in ("results/runs/toy", "data/partitions") for p in (repo / d).rglob("*")
             if p.is_file() and p.name != "run.json"}  # run.json: wall times
    (repo / "experiments.yaml").write_text("jobs: {experiments_together: true}\n")
    proc = smk(repo, mirror_dir, "-F", overlays=["experiments.yaml"])
    assert job_counts(proc.stdout + proc.stderr) == {"paper_experiment_toy_two_domains": 1, "toy_table": 1, "toy": 1}
    assert len(files) == 4 * 4 + 1 and all(p.read_bytes() == b for p, b in files.items())
    assert "Nothing to be done" in smk(repo, mirror_dir, "-n", overlays=["experiments.yaml"]).stdout
    # editing the plug-in reruns its jobs (its module is part of every toy job's code hash)
    paper = repo / "tests/toy_paper/paper.py"
    paper.write_text(paper.read_text() + "\n# edited\n")
    counts = job_counts(smk(repo, mirror_dir, "-n").stdout)
    assert counts["paper_train_toy_two_domains"] == 4 and counts["paper_partition_toy"] == 1


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


PLUGIN = """algorithm_plugins: [tests/toy_algorithm/uniform_fedavg.py]
toy: {experiments: {two_domains: {algorithms: {uniform_fedavg: }}}}
fedpals: {experiments: {fedpals_fmnist_c3: {algorithms: {uniform_fedavg: {}}}}}
"""
UNIFORM_FEDPALS = [f"results/runs/fedpals/fedpals_fmnist_c3/uniform_fedavg/seed~{s}/metrics.csv" for s in (0, 1)]


def test_a_toy_algorithm_registered_in_one_line_runs_in_two_papers(copy_repo, mirror_dir, tmp_path):
    """tests/toy_algorithm/uniform_fedavg.py registers one algorithm by one @register line; one config line loads it;
    the toy paper and FedPALS then train it by name, and editing it reruns exactly its runs."""
    repo = copy_repo(tmp_path / "repo")
    (repo / "plugin.yaml").write_text(PLUGIN)
    targets = UNIFORM_FEDPALS  # and `toy` (smk)
    smk(repo, mirror_dir, *targets, overlays=["plugin.yaml"])
    table = pd.read_csv(repo / "results/tables/toy/toy_table.csv")
    assert sorted(table["run"]) == ["fedavg", "fedprox", "uniform_fedavg"]
    for f in UNIFORM_FEDPALS:
        metrics = pd.read_csv(repo / f)
        assert set(metrics["run"]) == {"uniform_fedavg"} and metrics["paper"].eq("fedpals").all()
    run_json = yaml.safe_load((repo / UNIFORM_FEDPALS[0]).with_name("run.json").read_text())
    assert run_json["algorithm"] == "uniform_fedavg"
    # the toy paper's clients all hold 30 examples: equal weights are n_i weights, so the models are FedAvg's exactly
    runs = repo / "results/runs/toy/two_domains"
    for s in (0, 1):
        a, b = (torch.load(runs / r / f"seed~{s}/model.pt") for r in ("uniform_fedavg", "fedavg"))
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert "Nothing to be done" in smk(repo, mirror_dir, *targets, "-n", overlays=["plugin.yaml"]).stdout
    # editing the plug-in reruns its four runs (two papers × two seeds) and no other training job
    plugin = repo / "tests/toy_algorithm/uniform_fedavg.py"
    plugin.write_text(plugin.read_text() + "\n# edited\n")
    proc = smk(repo, mirror_dir, *targets, "-n", overlays=["plugin.yaml"])
    assert stage_counts(job_counts(proc.stdout))["paper_train"] == 4
    assert proc.stdout.count("run=uniform_fedavg") >= 4 and "run=fedavg," not in proc.stdout


def test_a_bad_algorithm_plugin_is_refused_before_any_job(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    (repo / "bad.yaml").write_text("algorithm_plugins: [tests/toy_algorithm/missing.py]\n")
    proc = run([*SNAKEMAKE, "-n", "--cores", "1", "toy", *TOY, "bad.yaml", "--config", f"data_mirror={mirror_dir}"],
               repo, check=False)
    assert proc.returncode != 0
    assert "algorithm_plugins[0]" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_default_papers_chooses_what_the_default_target_builds(copy_repo, mirror_dir, tmp_path):
    """`default_papers` limits `rule all` to those papers' outputs (the quick scale leaves the shift matrix out of
    its ≤ 30-minute main command); every output stays a target by name; an unknown paper is refused by key."""
    repo = copy_repo(tmp_path / "repo")
    (repo / "noclaims.yaml").write_text("claims_papers: []\n")  # the default target's claims would pull in all
    base = [*SNAKEMAKE, "-n", "--cores", "1", *TOY, "noclaims.yaml", "--config", f"data_mirror={mirror_dir}"]
    only_toy = job_counts(run([*base, "default_papers=toy"], repo).stdout)
    assert stage_counts(only_toy, "toy")["paper_train"] == stage_counts(only_toy)["paper_train"] > 0
    assert not [k for k in only_toy if k.startswith("afl_")]
    everything = job_counts(run(base, repo).stdout)
    assert sum(everything.values()) > sum(only_toy.values()) and any(k.startswith("afl_") for k in everything)
    bad = run([*base, "default_papers=toy,nope"], repo, check=False)
    assert bad.returncode != 0 and "config error at default_papers: ['nope']" in bad.stderr, bad.stderr[-2000:]


def test_an_experiment_named_like_a_seed_batched_one_of_another_paper_still_trains(copy_repo, mirror_dir, tmp_path):
    """AFL trains `afl_adult`'s seeds in one job; a toy experiment of the same name trains one run per job: the
    granularity is each (paper, experiment)'s own, and so are its rules (reviewer item B2: an exclusion used to go by
    experiment name)."""
    repo = copy_repo(tmp_path / "repo")
    (repo / "same_name.yaml").write_text(
        "toy:\n  tables: {toy_table: {experiments: [afl_adult]}}\n  experiments:\n    afl_adult:\n"
        "      {clients: 4, dim: 3, points: 30, seeds: 2, algorithms: {fedavg: },\n"
        "       train: {rounds: 2, clients_per_round: 2, local_epochs: 1, batch_size: 10, client_lr: 0.1}}\n")
    counts = job_counts(smk(repo, mirror_dir, "-n", overlays=["same_name.yaml"]).stdout)
    assert counts["paper_train_toy_afl_adult"] == 2 and counts["paper_evaluate_toy_afl_adult"] == 2, counts
    afl = job_counts(run([*SNAKEMAKE, "-n", "--cores", "1", "afl_table1", *TOY, "same_name.yaml", "--config",
                          f"data_mirror={mirror_dir}"], repo).stdout)
    assert afl.get("paper_train_afl_afl_adult", 0) >= 1 and stage_counts(afl, "toy") == {}, afl
