"""The WAFL workflow end to end at smoke scale on the mirrored data (issue 6): every named output
(Figs. 2-5, Table 2 with eq. 9's λ), a rerun is a no-op, and bad WAFL config fails before any job runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from test_workflow import SNAKEMAKE, job_counts, run, stage_counts

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def wdir(repo_root, tmp_path_factory):
    dest = tmp_path_factory.mktemp("wafl") / "repo"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo_root,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        if (repo_root / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo_root / f, dest / f)
    return dest


def smk(wdir, mirror_dir, *extra, overlay="tests/workflow/wafl_smoke.yaml", check=True):
    return run([*SNAKEMAKE, "--cores", "2", *extra, "--configfile", "tests/workflow/smoke.yaml", overlay,
                "--config", f"data_mirror={mirror_dir}"], wdir, check=check)


def test_wafl_smoke_run(wdir, mirror_dir):
    counts = job_counts(smk(wdir, mirror_dir, "-n", "wafl").stdout)
    # 5 MNIST runs shared by Figs. 2-5 (WAFL at two γ for Fig. 4's choice on validation), 2 for Table 2: the
    # paper contract's generic rules (the target `wafl` builds WAFL's outputs only)
    assert stage_counts(counts) == {"paper_train": 7, "paper_evaluate": 7, "paper_partition": 2}
    assert counts["download_mnist"] == counts["download_usps"] == 1 and "download_cifar10" not in counts
    assert all(counts[f"wafl_{o}"] == 1 for o in ("fig2", "fig3", "fig4", "fig5", "table2", "lambda_da_mt_up"))
    smk(wdir, mirror_dir, "wafl")
    for name in ("fig2", "fig3", "fig4", "fig5"):
        assert (wdir / f"results/figures/wafl/{name}.png").stat().st_size > 1000
    m = pd.read_csv(wdir / "results/runs/wafl/mnist/wafl~0.5/seed~0/metrics.csv")
    clients = m[(m.population == "clients") & (m["round"] == 3) & (m.metric == "accuracy")]
    assert sorted(clients.fraction) == [0.0, 0.2, 0.4, 0.6, 0.8]
    acc = clients.set_index("fraction")["value"]
    assert acc[0.0] > 0.5 and acc[0.8] < acc[0.0]  # the PGD shift hurts
    assert sorted(m["round"].unique()) == [0, 1, 2, 3]  # Fig. 5 evaluates every snapshot of this run
    assert set(m.paper) == {"wafl"} and set(m.run) == {"wafl~0.5"}  # the job skeleton's identity columns
    snaps = torch.load(wdir / "results/runs/wafl/mnist/wafl~0.5/seed~0/artifacts.pt", weights_only=True)
    assert sorted(snaps) == ["0", "1", "2", "3"]  # Fig. 5's θ snapshots by round (Fit.artifacts)
    val = m[m.population == "validation"]  # the held-out validation sets, final round only
    assert set(val["round"]) == {3} and sorted(val[val.metric == "accuracy"].fraction) == [0.0, 0.2, 0.4, 0.6, 0.8]
    assert m[m.metric == "rho2"]["value"].item() > 0
    f4 = pd.read_csv(wdir / "results/tables/wafl/fig4.csv", dtype={"selected_gamma": str})
    assert set(f4.kind) == {"wafl", "fedavg", "fedpgm", "fedfgsm"}
    tuned = f4[(f4.kind == "wafl") & (f4.selection == "validation")]
    assert tuned["selected_gamma"].isin(["0.5", "1"]).all() and tuned.gamma.isna().all()
    fixed = f4[f4.selection == "fixed"]  # every algorithm at its configured settings (WAFL: compare_gamma 0.5)
    assert set(fixed.kind) == {"wafl", "fedavg", "fedpgm", "fedfgsm"}
    assert (fixed[fixed.kind == "wafl"].gamma == 0.5).all()
    runs = pd.read_csv(wdir / "results/tables/wafl/fig4_runs.csv")  # what the claims pair by seed
    assert len(runs) == len(f4) and set(runs.seed) == {0}
    t2 = pd.read_csv(wdir / "results/tables/wafl/table2.csv")
    assert set(t2.algorithm) == {"WAFL", "FedAvg", "WAFL − FedAvg"} and set(t2.column) == {"mt_up"}
    acc = t2.set_index("algorithm")["mean"]
    assert acc[["WAFL", "FedAvg"]].between(5, 100).all()
    assert acc["WAFL − FedAvg"] == pytest.approx(acc["WAFL"] - acc["FedAvg"])  # one seed: the paired difference
    lam = pd.read_csv(wdir / "results/tables/wafl/lambda_da_mt_up.csv")
    assert len(lam) == 20 and lam["lambda"].sum() == pytest.approx(1.0)
    assert "Nothing to be done" in smk(wdir, mirror_dir, "-n", "wafl").stdout



def test_a_shift_edit_reevaluates_without_retraining(wdir, mirror_dir, tmp_path):
    """The shift attack is the evaluation's own setting (WaflPaper.evaluate_params), not a training hparam."""
    over = yaml.safe_load(Path(wdir / "tests/workflow/wafl_smoke.yaml").read_text())
    over["wafl"]["experiments"]["mnist"]["shift"]["steps"] = 6
    edited = tmp_path / "shift.yaml"
    edited.write_text(yaml.safe_dump(over))
    counts = job_counts(smk(wdir, mirror_dir, "-n", "wafl", overlay=str(edited)).stdout)
    assert stage_counts(counts) == {"paper_evaluate": 5}  # the 5 MNIST runs, Table 2's not


def test_bad_wafl_config_fails_before_any_job(wdir, mirror_dir, tmp_path):
    bad = tmp_path / "bad.yaml"
    over = yaml.safe_load(Path(wdir / "tests/workflow/wafl_smoke.yaml").read_text())
    over["wafl"]["figures"]["fig4"] = ["mnist", "cifar"]
    bad.write_text(yaml.safe_dump(over))
    proc = smk(wdir, mirror_dir, "-n", "wafl", overlay=str(bad), check=False)
    assert proc.returncode != 0
    assert "config error at wafl.figures.fig4: unknown experiment 'cifar'" in proc.stdout + proc.stderr
    over["wafl"]["experiments"]["mnist"]["wafl"] = {"inner_lr": -1}
    over["wafl"]["figures"]["fig4"] = ["mnist"]
    bad.write_text(yaml.safe_dump(over))
    proc = smk(wdir, mirror_dir, "-n", "wafl", overlay=str(bad), check=False)
    assert "config error at wafl.experiments.mnist.wafl" in proc.stdout + proc.stderr


def raw_files(wdir, dataset):
    spec = yaml.safe_load((wdir / "config/datasets.yaml").read_text())["datasets"][dataset]
    return [f"data/raw/{dataset}/{f['name']}" for f in spec["files"]]


def test_paper_scale_dry_run_lists_every_output_and_download(wdir):
    """Paper scale (data_mirror "": the canonical URLs): every Fig. 2-5 and Table 2 target, the real downloads, and
    the canonical MNIST-M archive (train and test splits) shared by mt→mm, mm→up and mm→mt."""
    out = run([*SNAKEMAKE, "wafl", "-n", "--cores", "1"], wdir).stdout
    counts = job_counts(out)
    assert all(counts[f"wafl_{o}"] == 1 for o in ("fig2", "fig3", "fig4", "fig5", "table2"))
    for ds in ("cifar10", "mnist_m_full"):
        assert counts.get(f"download_{ds}") == 1, ds
    # MNIST, USPS: downloaded here unless the smoke run of this module already fetched them
    for ds in ("mnist", "usps"):
        assert counts.get(f"download_{ds}") == 1 or all(Path(wdir, f).is_file() for f in raw_files(wdir, ds)), ds
    assert "prepare_generated" not in counts and "output: data/prepared/mnist_m_full.pt" in out
    assert "download_mnist_m" not in counts and "download_bsds500" not in counts
    for e in ("da_mt_mm", "da_mt_up", "da_mm_up", "da_mm_mt"):
        assert f"results/runs/wafl/{e}/wafl~0.5/seed~0/metrics.csv" in out, e
    assert "results/runs/wafl/cifar10/wafl~10/seed~0/metrics.csv" in out


def test_generated_mnist_m_from_real_mnist_and_a_bsds500_fixture(copy_repo, mirror_dir, tmp_path):
    """rule prepare_generated for real: a mirror with a BSDS500 archive in its real layout (the registry's
    unpinned entry records its sha256 on this first fetch) beside the real MNIST gives 70,000 MNIST-M digits with
    MNIST's labels, which WAFL's mt→mm target reads."""
    import io
    import tarfile

    import torch
    from PIL import Image

    from fedshift.data.mnist import load_mnist

    wdir = copy_repo(tmp_path / "repo")  # its own copy: the downloads and files here leave the module's alone
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for d in mirror_dir.iterdir():
        (mirror / d.name).symlink_to(d)
    (mirror / "bsds500").mkdir()
    with tarfile.open(mirror / "bsds500" / "BSR_bsds500.tgz", "w:gz") as tar:
        for i, rgb in enumerate(((200, 10, 10), (10, 200, 10), (10, 10, 200))):
            buf = io.BytesIO()
            Image.new("RGB", (48, 32), rgb).save(buf, format="JPEG")
            info = tarfile.TarInfo(f"BSR/BSDS500/data/images/train/{i}.jpg")
            info.size = len(buf.getvalue())
            tar.addfile(info, io.BytesIO(buf.getvalue()))
    over = yaml.safe_load(Path(wdir / "tests/workflow/wafl_smoke.yaml").read_text())
    over["wafl"]["figures"]["table2"] = ["da_mt_mm"]
    over["wafl"]["experiments"]["da_mt_mm"] = {"target": "mnist_m_bsds", **over["wafl"]["experiments"]["da_mt_up"]}
    overlay = tmp_path / "bsds.yaml"
    overlay.write_text(yaml.safe_dump(over))
    proc = run([*SNAKEMAKE, "--cores", "2", "data/prepared/mnist_m_bsds.pt", "--configfile",
                "tests/workflow/smoke.yaml", str(overlay), "--config", f"data_mirror={mirror}"], wdir)
    assert "download_bsds500" in proc.stdout + proc.stderr
    d = torch.load(wdir / "data/prepared/mnist_m_bsds.pt", weights_only=True)
    assert tuple(d["x_train"].shape) == (60000, 28, 28, 3) and tuple(d["x_test"].shape) == (10000, 28, 28, 3)
    mnist = load_mnist(wdir / "data/raw/mnist")
    assert d["y_train"].tolist() == mnist["y_train"].tolist() and d["y_test"].tolist() == mnist["y_test"].tolist()
    assert d["x_train"].float().mean(dim=(0, 1, 2)).sub(110).abs().max() < 60  # the fixture's colours, mixed
    assert (wdir / "data/raw/bsds500/BSR_bsds500.tgz.sha256").is_file()  # trust-on-first-use record
