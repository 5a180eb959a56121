"""The rehearsal overlay (config/rehearsal.yaml, issue 16): the paper-scale DAG plus stand-in rules, nothing dropped;
stand-ins generated and fetched without the real checksum, and marked."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_workflow import SNAKEMAKE, job_counts, run

from fedshift.budget import REHEARSAL_MARK

pytestmark = pytest.mark.workflow

REHEARSAL = ["--configfile", "config/rehearsal.yaml"]


@pytest.fixture(scope="module")
def wdir(copy_repo, tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("rehearsal") / "repo")


def test_rehearsal_dag_is_the_paper_scale_dag_plus_standins(wdir, mirror_dir):
    (wdir / "together.yaml").write_text(  # as the rehearsal overlay sets
        "jobs: {seeds_together: true, experiments_together: true}\n")
    paper = job_counts(run([*SNAKEMAKE, "-n", "wafl", "agnostic_fedavg", "--configfile", "together.yaml"],
                           wdir).stdout)
    reh = job_counts(run([*SNAKEMAKE, "-n", "wafl", "agnostic_fedavg", *REHEARSAL, "--config",
                          f"data_mirror={mirror_dir}"], wdir).stdout)  # unmirrored datasets: no early failure
    standins = {k: v for k, v in reh.items() if k.startswith("standin_")}
    assert set(standins) == {"standin_cifar10", "standin_emnist_tff", "standin_stackoverflow_tff",
                             "standin_cornell_movie_dialogs"}
    for rule, n in paper.items():  # every training, evaluation, table and figure job is still there
        if rule.startswith(("download_mnist_m", "download_bsds500", "prepare")) or rule == "total":
            continue  # MNIST-M: the mirror's real one (mnist_m) instead of the canonical archive (mnist_m_full)
        assert reh.get(rule) == n, rule
    assert paper.get("download_mnist_m_full") == 1 and "download_mnist_m_full" not in reh
    assert reh.get("download_mnist_m") == 1


def test_standin_is_generated_fetched_unverified_and_marked(wdir, mirror_dir):
    out = run([*SNAKEMAKE, "--cores", "1", "data/raw/pacs/pacs_v1.0.tar.gz", *REHEARSAL, "--config",
               f"data_mirror={mirror_dir}"], wdir)
    assert (wdir / "data/standin/pacs/pacs_v1.0.tar.gz").is_file()
    assert (wdir / "data/raw/pacs/STANDIN").is_file()
    assert not (wdir / "data/raw/pacs/pacs_v1.0.tar.gz.sha256").exists()  # no trust-on-first-use record
    assert "STAND-IN" in (wdir / "results/logs/download/pacs.log").read_text()
    assert out.returncode == 0


# A slice of the reduced rehearsal that CI affords (≈ 5 min on 2 cores): the paper-scale settings of AFL, WAFL's MNIST
# and MNIST → USPS (with its λ table), AgnosticFedAvg's toy, Fashion-MNIST and EMNIST (the TFF h5 stand-in, Table 5),
# FedMM's Office-31 A → W (the Office-31 and MobileNetV2 stand-ins, 224 px) and FedPALS's Fashion-MNIST C = 2,
# CIFAR-10 C = 2 (the CIFAR-10 stand-in) and synthetic experiments, each experiment in one job, two rounds. FedMM's
# digits would add 4.5 min (preparing the 68,002 MNIST-M images, 190 CPU-s in one job), so CI leaves it out. The heavy
# experiments (ResNet-50 PACS/iWildCam, WAFL CIFAR-10, the language models, the shift matrix) need hours of CPU:
# README "Rehearsal".
SLICE = ["afl", "afa_fig1_toy", "afa_fmnist", "afa_table5_emnist", "fedpals_fig4", "paper_experiment_wafl_mnist",
         "wafl_lambda_da_mt_up", "paper_experiment_fedmm_office_A_W", "paper_experiment_fedpals_fedpals_fmnist_c2",
         "paper_experiment_fedpals_fedpals_cifar10_c2"]
REDUCED = [*REHEARSAL, "tests/workflow/rehearsal_reduced.yaml"]


def test_a_rehearsal_slice_runs_one_job_per_experiment_and_marks_what_it_writes(wdir, mirror_dir):
    proc = run([*SNAKEMAKE, "--cores", "2", *SLICE, *REDUCED, "--config", f"data_mirror={mirror_dir}"], wdir)
    counts = job_counts(proc.stdout + proc.stderr)
    experiments = {k for k in counts if k.startswith("paper_experiment_")}
    assert {"paper_experiment_afl_afl_adult", "paper_experiment_afl_afl_fashion_mnist",
            "paper_experiment_agnostic_fedavg_toy", "paper_experiment_agnostic_fedavg_fmnist_client",
            "paper_experiment_wafl_mnist", "paper_experiment_wafl_da_mt_up", "paper_experiment_agnostic_fedavg_emnist",
            "paper_experiment_fedmm_office_A_W", "paper_experiment_fedpals_fedpals_cifar10_c2"} <= experiments
    assert not [k for k in counts if k.startswith(("paper_train", "paper_evaluate"))]  # no job per run left
    assert all(counts[k] == 1 for k in experiments)
    assert all(counts[f"standin_{d}"] == 1 for d in ("cifar10", "emnist_tff", "office31", "mobilenet_v2"))
    runs = sorted((wdir / "results/runs").rglob("run.json"))
    assert len(runs) >= 30
    for f in runs:
        info = json.loads(f.read_text())
        assert info["scale"] == "rehearsal" and info["rounds"] <= 2, f
        assert (f.parent / "metrics.csv").is_file(), f
    cifar = json.loads((wdir / "results/runs/fedpals/fedpals_cifar10_c2/fedavg/seed~0/run.json").read_text())
    assert "cifar10" in cifar["standin_data"]
    office = json.loads((wdir / "results/runs/fedmm/office_A_W/fedmm-dann-p1-M10-e1/seed~0/run.json").read_text())
    assert {"office31", "mobilenet_v2"} <= set(office["standin_data"])
    table = pd.read_csv(wdir / "results/tables/afl/table1_adult.csv")
    assert table["rehearsal"].eq(REHEARSAL_MARK).all()
    assert pd.read_csv(wdir / "results/tables/wafl/lambda_da_mt_up.csv")["rehearsal"].eq(REHEARSAL_MARK).all()
    for md in ("fmnist.md", "table5_emnist.md"):
        assert (wdir / "results/tables/agnostic_fedavg" / md).read_text().startswith(f"**{REHEARSAL_MARK}**")
    assert not list((wdir / "results/checkpoints").rglob("finished"))  # each job removed its stash
    again = run([*SNAKEMAKE, "-n", "--cores", "2", *SLICE, *REDUCED, "--config", f"data_mirror={mirror_dir}"], wdir)
    assert "Nothing to be done" in again.stdout
