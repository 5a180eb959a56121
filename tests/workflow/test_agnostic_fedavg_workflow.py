"""The AgnosticFedAvg workflow end to end at smoke scale on the mirrored data (issue 5): the toy figure, the
Fashion-MNIST curves for both domain types and the PTB language-model table; a rerun is a no-op; the paper-scale
dry-run lists the EMNIST, Stack Overflow and AFL-LM targets with their download steps; bad config fails before
any job runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_workflow import SNAKEMAKE, job_counts, run, stage_counts

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def wdir(copy_repo, tmp_path_factory):
    return copy_repo(tmp_path_factory.mktemp("afa") / "repo")


def smk(wdir, mirror_dir, *extra, overlay="tests/workflow/agnostic_fedavg_smoke.yaml", check=True):
    return run([*SNAKEMAKE, "--cores", "2", *extra, "--configfile", "tests/workflow/smoke.yaml", overlay,
                "--config", f"data_mirror={mirror_dir}"], wdir, check=check)


def test_paper_scale_dry_run_lists_downloads(wdir):
    out = run([*SNAKEMAKE, "-n", "--cores", "1", "agnostic_fedavg"], wdir).stdout
    counts = job_counts(out)
    for ds in ("emnist_tff", "stackoverflow_tff", "ptb", "cornell_movie_dialogs", "fashion_mnist"):
        assert counts[f"download_{ds}"] == 1
    for name in ("table5_emnist", "table1_stackoverflow", "table3_stackoverflow", "afl_table3_lm", "fig1_toy",
                 "fmnist"):
        assert counts[f"afa_{name}"] == 1
    # EMNIST 3 algorithms x 3 seeds, Stack Overflow 3 x 3, AFL-LM 4 x 1, toy 1, Fashion-MNIST 2 x 2 x 3; the
    # generic rules of the paper contract (fedshift.contract): per experiment its tensors and their summary
    stages = stage_counts(counts)
    assert stages["paper_train"] == 9 + 9 + 4 + 1 + 12 and stages["paper_partition"] == 2 * 6
    assert stages["paper_evaluate"] == 9 + 9 + 4  # the tables' runs (the figures read the training history)
    assert "data/raw/emnist_tff/fed_emnist.tar.bz2" in out and "data/raw/stackoverflow_tff/stackoverflow.tar.bz2" in out


def test_agnostic_fedavg_smoke_run(wdir, mirror_dir):
    counts = job_counts(smk(wdir, mirror_dir, "-n", "agnostic_fedavg").stdout)
    stages = stage_counts(counts)
    assert stages["paper_train"] == 1 + 2 * 2 + 2 and stages["paper_partition"] == 2 * 4
    assert stages["paper_evaluate"] == 2
    assert counts["download_fashion_mnist"] == counts["download_ptb"] == 1 and "download_emnist_tff" not in counts
    smk(wdir, mirror_dir, "agnostic_fedavg")
    for stem in ("fig1_toy", "fmnist"):
        assert (wdir / f"results/figures/agnostic_fedavg/{stem}.png").stat().st_size > 1000
    toy = pd.read_csv(wdir / "results/tables/agnostic_fedavg/fig1_toy.csv")
    assert toy["round"].tolist() == [10, 20, 30, 40]
    assert toy["w_error"].iloc[-1] < toy["w_error"].iloc[0]  # moving towards the minimax point
    lam = toy[[c for c in toy.columns if c.startswith("lambda/")]]
    assert lam.sum(axis=1).round(6).eq(1).all() and lam.shape[1] == 5
    curves = pd.read_csv(wdir / "results/tables/agnostic_fedavg/fmnist.csv")
    assert set(curves.experiment) == {"fmnist_client", "fmnist_data"}
    assert set(curves.algorithm) == {"fedavg_uniform", "agnostic_fedavg"} and set(curves["round"]) == {2, 4}
    assert curves["worst_accuracy"].between(0, 1).all()
    agn = curves[curves.algorithm == "agnostic_fedavg"]
    assert agn[[c for c in curves.columns if c.startswith("lambda/")]].sum(axis=1).round(6).eq(1).all()
    summary = json.loads((wdir / "data/partitions/agnostic_fedavg/fmnist_client.json").read_text())
    assert summary["clients"] == 20 and summary["single_domain_clients"]
    assert summary["train_examples"] == {"t-shirt/top": 6000, "pullover": 6000, "shirt": 6000}
    data = json.loads((wdir / "data/partitions/agnostic_fedavg/fmnist_data.json").read_text())
    assert not data["single_domain_clients"]
    ptb = pd.read_csv(wdir / "results/tables/agnostic_fedavg/ptb_lm.csv")
    perp = ptb[(ptb.metric == "perplexity") & (ptb.column == "document")]
    assert len(perp) == 2 and perp["mean"].between(1, 310).all()  # below a uniform guess over 304 outputs
    run_json = yaml.safe_load((wdir / "results/runs/agnostic_fedavg/ptb_lm/agnostic_fedavg/seed~0/run.json")
                              .read_text())
    assert run_json["rounds"] == 2 and run_json["effective_client_lr"] == pytest.approx(1.0 * 50 / 20)  # n_k / B
    m = pd.read_csv(wdir / "results/runs/agnostic_fedavg/ptb_lm/agnostic_fedavg/seed~0/metrics.csv")
    assert set(m.paper) == {"agnostic_fedavg"} and m[m.metric == "lambda"]["value"].sum() == pytest.approx(1.0)
    assert not list((wdir / "results").rglob("checkpoints/**/*.pt"))
    assert "Nothing to be done" in smk(wdir, mirror_dir, "-n", "agnostic_fedavg").stdout


@pytest.mark.parametrize("change, message", [
    ({"experiments": {"fmnist_data": {"algorithms": {"agnostic_fedavg": {"window_size": 0}}}}},
     "config error at agnostic_fedavg.experiments.fmnist_data.algorithms.agnostic_fedavg.window_size"),
    ({"experiments": {"fmnist_data": {"algorithms": {"agnostic_fedavg": {"lambda_lr": -1}}}}},
     "config error at agnostic_fedavg.experiments.fmnist_data.algorithms.agnostic_fedavg.lambda_lr"),
    ({"experiments": {"fmnist_data": {"algorithms": {"fedavg_uniform": {"target": "coat"}}}}},
     "config error at agnostic_fedavg.experiments.fmnist_data.algorithms.fedavg_uniform.target: 'coat'"),
    ({"build": ["fmnist", "table9"]}, "config error at agnostic_fedavg.build: unknown output 'table9'"),
])
def test_bad_config_fails_before_any_job(wdir, mirror_dir, tmp_path, change, message):
    # a JSON round trip unshares the overlay's YAML aliases (fmnist_data is an alias of fmnist_client)
    over = json.loads(json.dumps(yaml.safe_load(Path(wdir / "tests/workflow/agnostic_fedavg_smoke.yaml").read_text())))

    def merge(a, b):
        for k, v in b.items():
            a[k] = merge(a.get(k, {}), v) if isinstance(v, dict) else v
        return a

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(merge(over, {"agnostic_fedavg": change})))
    proc = smk(wdir, mirror_dir, "-n", "agnostic_fedavg", overlay=str(bad), check=False)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr
