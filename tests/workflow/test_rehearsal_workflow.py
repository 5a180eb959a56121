"""The rehearsal overlay (config/rehearsal.yaml, issue 16): the paper-scale DAG plus stand-in rules, nothing dropped;
stand-ins generated and fetched without the real checksum, and marked."""

from __future__ import annotations

import pytest
from test_workflow import SNAKEMAKE, job_counts, run

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
