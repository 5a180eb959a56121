"""The WAFL workflow end to end at smoke scale on the mirrored data (issue 6): every named output
(Figs. 2-5, Table 2 with eq. 9's λ), a rerun is a no-op, and bad WAFL config fails before any job runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_workflow import SNAKEMAKE, job_counts, run

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
    assert counts["wafl_train"] == 6 and counts["wafl_evaluate"] == 6  # 4 MNIST runs shared by Figs. 2-5, 2 for Table 2
    assert counts["download_mnist"] == counts["download_usps"] == 1 and "download_cifar10" not in counts
    assert all(counts[f"wafl_{o}"] == 1 for o in ("fig2", "fig3", "fig4", "fig5", "table2"))
    smk(wdir, mirror_dir, "wafl")
    for name in ("fig2", "fig3", "fig4", "fig5"):
        assert (wdir / f"results/figures/wafl/{name}.png").stat().st_size > 1000
    m = pd.read_csv(wdir / "results/runs/wafl/mnist/wafl~0.5/seed~0/metrics.csv")
    clients = m[(m.population == "clients") & (m["round"] == 3) & (m.metric == "accuracy")]
    assert sorted(clients.fraction) == [0.0, 0.2, 0.4, 0.6, 0.8]
    acc = clients.set_index("fraction")["value"]
    assert acc[0.0] > 0.5 and acc[0.8] < acc[0.0]  # the PGD shift hurts
    assert sorted(m["round"].unique()) == [0, 1, 2, 3]  # Fig. 5 evaluates every snapshot of this run
    assert m[m.metric == "rho2"]["value"].item() > 0
    f4 = pd.read_csv(wdir / "results/tables/wafl/fig4.csv")
    assert set(f4.kind) == {"wafl", "fedavg", "fedpgm", "fedfgsm"}
    t2 = pd.read_csv(wdir / "results/tables/wafl/table2.csv")
    assert set(t2.algorithm) == {"WAFL", "FedAvg", "WAFL − FedAvg"} and set(t2.column) == {"mt_up"}
    acc = t2.set_index("algorithm")["mean"]
    assert acc[["WAFL", "FedAvg"]].between(5, 100).all()
    assert acc["WAFL − FedAvg"] == pytest.approx(acc["WAFL"] - acc["FedAvg"])  # one seed: the paired difference
    lam = pd.read_csv(wdir / "results/tables/wafl/lambda_da_mt_up.csv")
    assert len(lam) == 20 and lam["lambda"].sum() == pytest.approx(1.0)
    assert "Nothing to be done" in smk(wdir, mirror_dir, "-n", "wafl").stdout


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
