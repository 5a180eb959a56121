"""The FedMM workflow end to end at smoke scale on the mirrored data (issue 7): Figs. 1 and 4-7 from five
training runs, checkpoints and results on disk, a rerun is a no-op, the paper-scale DAG lists every output with
its real download steps (the registry's download rules), and bad FedMM config or a mirror without FedMM's raw
files fails before any job runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_workflow import SNAKEMAKE, job_counts, run, stage_counts

pytestmark = pytest.mark.workflow

OVERLAY = "tests/workflow/fedmm_smoke.yaml"


@pytest.fixture(scope="module")
def wdir(copy_repo, tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("fedmm") / "repo")


def smk(wdir, mirror_dir, *extra, overlay=OVERLAY, check=True):
    return run([*SNAKEMAKE, *extra, "--cores", "2", "--configfile", "tests/workflow/smoke.yaml", overlay,
                "--config", f"data_mirror={mirror_dir}"], wdir, check=check)


def test_fedmm_smoke_run(wdir, mirror_dir):
    counts = job_counts(smk(wdir, mirror_dir, "fedmm", "-n").stdout)
    # the generic rules of the paper contract (workflow/rules/runs.smk) serve the FedMM plug-in
    assert stage_counts(counts) == {"paper_train": 5, "paper_evaluate": 5, "paper_partition": 1}
    assert counts["download_mnist"] == counts["download_mnist_m"] == 1
    assert not {"download_office31", "download_bsds500", "download_mobilenet_v2"} & set(counts)
    assert all(counts[f"fedmm_{o}"] == 1 for o in ("fig1", "fig4", "fig5", "fig6", "fig7"))
    smk(wdir, mirror_dir, "fedmm")
    for name in ("fig1", "fig4", "fig5", "fig6", "fig7"):
        assert (wdir / f"results/figures/fedmm/{name}.png").stat().st_size > 1000
    runs = wdir / "results/runs/fedmm/digits"
    info = json.loads((runs / "fedmm-dann-p1-M2-e1/seed~0/run.json").read_text())
    assert info["client_sizes"] == [[600, 0], [0, 1000]] and info["test_size"] == 9001  # train / test splits
    assert 0 <= info["final_target_accuracy"] <= 1 and not info["diverged"]
    hist = pd.read_csv(runs / "fedmm-dann-p1-M2-e1/seed~0/history.csv")
    assert hist["round"].tolist() == [2, 4] and hist["dual_norm"].gt(0).all()
    metrics = pd.read_csv(runs / "fedmm-dann-p1-M2-e1/seed~0/metrics.csv")  # the history as tidy rows
    assert metrics["value"].tolist() == hist["target_accuracy"].tolist() and set(metrics["paper"]) == {"fedmm"}
    assert not list((wdir / "results/checkpoints").rglob("*.pt"))  # removed when a run is done
    f7 = pd.read_csv(wdir / "results/tables/fedmm/fig7.csv")
    assert set(f7.optimizer) == {"fedmm", "fedavg_sgda", "fedprox_sgda"} and set(f7["round"]) == {2, 4}
    r7 = pd.read_csv(wdir / "results/tables/fedmm/fig7_runs.csv")  # per run and seed: the paired claims' table
    assert len(r7) == 3 and set(r7["last_round"]) == {4} and r7["final"].between(0, 100).all()
    f6 = pd.read_csv(wdir / "results/tables/fedmm/fig6.csv")
    assert set(f6.optimizer) == {"fedmm", "fedsgda"}
    assert "Nothing to be done" in smk(wdir, mirror_dir, "fedmm", "-n").stdout


def test_paper_scale_dry_run_lists_every_output_and_download(wdir):
    out = run([*SNAKEMAKE, "fedmm", "-n", "--cores", "1"], wdir).stdout  # data_mirror "": download
    counts = job_counts(out)
    assert all(counts[f"fedmm_{o}"] == 1 for o in ("fig1", "fig4", "fig5", "fig6", "fig7", "table1"))
    for step in ("download_mnist_m_full", "download_office31", "download_mobilenet_v2"):
        assert counts[step] == 1, step
    assert "output: data/prepared/mnist_m_full.pt" in out and "output: data/prepared/office31.pt" in out
    assert "prepare_generated" not in counts and "download_bsds500" not in counts
    # MNIST: downloaded here unless the smoke run of this module already fetched it
    assert counts.get("download_mnist") == 1 or (wdir / "data/raw/mnist/train-images-idx3-ubyte.gz").is_file()
    assert stage_counts(counts)["paper_train"] > 150


def test_bad_fedmm_config_fails_before_any_job(wdir, mirror_dir, tmp_path):
    bad = tmp_path / "bad.yaml"
    over = yaml.safe_load(Path(wdir / OVERLAY).read_text())
    over["fedmm"]["figures"]["fig7"]["clients"] = ["s0t2"]
    bad.write_text(yaml.safe_dump(over))
    proc = smk(wdir, mirror_dir, "fedmm", "-n", overlay=str(bad), check=False)
    assert proc.returncode != 0
    assert "client setting 's0t2': needs at least one source and one target client" in proc.stdout + proc.stderr
    over["fedmm"]["figures"]["fig7"]["clients"] = ["s1t1"]
    over["fedmm"]["tasks"]["digits"]["train"]["client_lr"] = -1
    bad.write_text(yaml.safe_dump(over))
    proc = smk(wdir, mirror_dir, "fedmm", "-n", overlay=str(bad), check=False)
    assert "config error at fedmm.tasks.digits.train.client_lr" in proc.stdout + proc.stderr


def test_mirror_without_fedmm_raw_files_fails_before_any_job(wdir, mirror_dir, tmp_path):
    """The registry's early mirror check covers FedMM's raw files: a mirror without them stops the run before any
    job, naming each; once they are in data/raw nothing has to be fetched and the check passes."""
    over = yaml.safe_load(Path(wdir / OVERLAY).read_text())
    over["fedmm"]["outputs"] = ["fig1", "table1"]
    over["fedmm"]["tasks"]["digits"]["target"] = "mnist_m_full"
    overlay = tmp_path / "full.yaml"
    overlay.write_text(yaml.safe_dump(over))
    proc = smk(wdir, mirror_dir, "fedmm", "-n", overlay=str(overlay), check=False)
    assert proc.returncode != 0 and "job count" not in proc.stdout
    for missing in (f"mnist_m_full: {mirror_dir / 'mnist_m' / 'mnist_m.tar.gz'}",
                    f"office31: mirror folder {mirror_dir / 'office31'}",
                    f"mobilenet_v2: mirror folder {mirror_dir / 'torchvision'}"):
        assert missing in proc.stderr, missing
    assert "bsds500" not in proc.stderr  # not needed by these outputs
    raw = [wdir / "data/raw" / f for f in ("mnist_m_full/mnist_m.tar.gz", "office31/domain_adaptation_images.tar.gz",
                                           "mobilenet_v2/mobilenet_v2-b0353104.pth")]
    try:
        for f in raw:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"placeholder")
        out = smk(wdir, mirror_dir, "fedmm", "-n", overlay=str(overlay)).stdout
        assert "output: data/prepared/mnist_m_full.pt" in out and "output: data/prepared/office31.pt" in out
        assert not {"download_mnist_m_full", "download_office31", "download_mobilenet_v2"} & set(job_counts(out))
    finally:
        for f in raw:
            f.unlink(missing_ok=True)
