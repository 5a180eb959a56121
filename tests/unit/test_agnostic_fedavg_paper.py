"""The AgnosticFedAvg paper package: config checks (bad input fails with the key path), data of each experiment
kind (toy, Fashion-MNIST client / data partition, PTB), the training run and its tidy metrics, the plug-in's run,
partition and output specs, and the report tables."""

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedshift.config import validate_section
from fedshift.errors import ConfigError, load_yaml
from fedshift.contract import load_paper
from fedshift.papers.agnostic_fedavg import config as afa_config
from fedshift.papers.agnostic_fedavg import data as afa_data
from fedshift.papers.agnostic_fedavg import fit as afa_fit
from fedshift.papers.agnostic_fedavg import report as rep
from fedshift.papers.agnostic_fedavg.paper import AgnosticFedAvgPaper

SCHEMA = AgnosticFedAvgPaper.schema


@pytest.fixture(scope="module")
def section(repo_root):
    return load_yaml(repo_root / "config/papers/agnostic_fedavg.yaml")["agnostic_fedavg"]


def paper_datasets(section):
    """The registry datasets the paper needs for ``section`` (the contract's ``Paper.datasets``)."""
    registry = load_yaml(Path(__file__).parents[2] / "config/datasets.yaml")["datasets"]  # raw file names
    return load_paper("agnostic_fedavg", "fedshift.papers.agnostic_fedavg.paper:AgnosticFedAvgPaper",
                      {"agnostic_fedavg": section, "datasets": registry}).datasets()


def test_paper_config_is_valid_and_names_its_datasets(section, repo_root):
    validate_section(section, repo_root / "src/fedshift/papers/agnostic_fedavg" / SCHEMA, "agnostic_fedavg")
    afa_config.check_section(section)
    assert paper_datasets(section) == ["cornell_movie_dialogs", "emnist_tff", "fashion_mnist", "ptb",
                                        "stackoverflow_tff"]
    quick = copy.deepcopy(section)
    quick["build"] = ["fig1_toy", "fmnist"]
    assert paper_datasets(quick) == ["fashion_mnist"]
    r = afa_config.resolve_run(section, "emnist", "fedavg_high_school")
    assert r["train"]["target"] == "high_school" and r["train"]["server_optimizer"] == "adam"
    agn = afa_config.resolve_run(section, "emnist", "agnostic_fedavg")["train"]
    assert agn["client_lr"] == 0.001 and agn["client_lr_scale"] == "mean_client_size"
    with pytest.raises(ConfigError, match="unknown algorithm 'afl'"):
        afa_config.resolve_run(section, "emnist", "afl")


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["outputs"]["table5_emnist"]["rows"].update(fedprox="FedProx"),
     "outputs.table5_emnist.rows: 'fedprox' is not an algorithm of experiment emnist"),
    (lambda s: s["experiments"]["emnist"]["algorithms"]["fedavg_high_school"].update(target="college"),
     "experiments.emnist.algorithms.fedavg_high_school.target: 'college' is not a domain"),
    (lambda s: s["experiments"]["toy"]["algorithms"]["agnostic_fedavg"].update(lambda_lr=0),
     "experiments.toy.algorithms.agnostic_fedavg.lambda_lr: must be > 0"),
    (lambda s: s["experiments"]["toy"]["algorithms"]["agnostic_fedavg"].pop("window_size"),
     "experiments.toy.algorithms.agnostic_fedavg.window_size: must be >= 1"),
    (lambda s: s["experiments"]["toy"]["train"].update(rounds=401),
     "experiments.toy.algorithms.agnostic_fedavg: rounds and checkpoint_every must be multiples of log_every"),
    (lambda s: s["experiments"]["afl_lm"]["data"].update(sources=["ptb", "stackoverflow"]),
     "experiments.afl_lm.data.sources: stackoverflow cannot be mixed"),
    (lambda s: s["experiments"]["fmnist_client"]["train"].update(clients_per_round=101),
     "experiments.fmnist_client.train.clients_per_round: 101 > 100 clients"),
    (lambda s: s["build"].append("fig9"), "build: unknown output 'fig9'"),
])
def test_bad_config_is_named(section, edit, message):
    s = copy.deepcopy(section)
    edit(s)
    with pytest.raises(ConfigError, match="config error at agnostic_fedavg." + message.replace("(", r"\(")):
        afa_config.check_section(s)


def test_schema_rejects_window_size_zero_and_unknown_kind(section, repo_root):
    schema = repo_root / "src/fedshift/papers/agnostic_fedavg" / SCHEMA
    s = copy.deepcopy(section)
    s["experiments"]["toy"]["algorithms"]["agnostic_fedavg"]["window_size"] = 0
    with pytest.raises(ConfigError, match="experiments.toy.algorithms.agnostic_fedavg.window_size"):
        validate_section(s, schema, "agnostic_fedavg")
    s = copy.deepcopy(section)
    s["experiments"]["toy"]["algorithms"]["agnostic_fedavg"]["kind"] = "afl"
    with pytest.raises(ConfigError, match="kind"):
        validate_section(s, schema, "agnostic_fedavg")


@pytest.fixture(scope="module")
def fmnist_data(section, mirror_dir, tmp_path_factory):
    out = {}
    for dt in ("client", "data"):
        exp = copy.deepcopy(section["experiments"][f"fmnist_{dt}"])
        exp["data"]["clients"] = 30
        d = tmp_path_factory.mktemp(dt)
        summary = afa_data.build_data(exp, {"fashion_mnist": mirror_dir / "fashion-mnist"}, d / "x.pt", d / "x.json")
        out[dt] = (exp, d, summary)
    return out


def test_fashion_mnist_domain_types(fmnist_data):
    for dt, (_exp, d, summary) in fmnist_data.items():
        assert json.loads((d / "x.json").read_text()) == summary
        assert summary["train_examples"] == {"t-shirt/top": 6000, "pullover": 6000, "shirt": 6000}
        assert summary["test_examples"] == {"t-shirt/top": 1000, "pullover": 1000, "shirt": 1000}
        assert summary["clients"] == 30 and summary["single_domain_clients"] == (dt == "client")
        data = afa_data.load_data(d / "x.pt", torch.device("cpu"))
        c = data["clients"]
        assert c.num_domains == 3 and c.pool.x.shape == (18000, 784)
        # labels are the domain ids (each AFL domain is one class)
        assert torch.equal(c.pool.y, c.domain)
        assert abs(float(c.pool.x.mean())) < 1e-3  # standardised on the training sample
        counts = c.counts()
        assert ((counts > 0).sum(1) == 1).all() == (dt == "client")
    exp, d, _ = fmnist_data["data"]
    target = afa_data.load_data(d / "x.pt", torch.device("cpu"), target=2)
    assert (target["clients"].domain == 2).all() and target["clients"].pool.y.shape[0] == 6000


def test_train_run_gives_history_lambda_and_tidy_metrics(fmnist_data, section, tmp_path):
    exp, d, _ = fmnist_data["data"]
    r = afa_config.resolve_run(section, "fmnist_data", "agnostic_fedavg")
    r["train"].update(rounds=4, log_every=2, checkpoint_every=2, clients_per_round=5)
    fit = afa_fit.train_run(r, 0, d / "x.pt", device=torch.device("cpu"), checkpoint=str(tmp_path / "ck.pt"),
                        fingerprint="f")
    assert fit.info["rounds"] == 4 and fit.result.state.round == 4
    h = fit.history
    assert h["round"].tolist() == [2, 4]
    assert {"accuracy/shirt", "worst_accuracy", "lambda/0", "domain_loss/2"} <= set(h.columns)
    np.testing.assert_allclose(h[["lambda/0", "lambda/1", "lambda/2"]].sum(axis=1), 1, atol=1e-6)
    m = afa_fit.evaluate_run(r, 0, fit.artifacts)
    acc = m[m.metric == "accuracy"].set_index("domain")["value"]
    assert set(acc.index) == {"t-shirt/top", "pullover", "shirt"} and acc.between(0, 1).all()
    assert m[m.metric == "worst_accuracy"]["value"].item() == pytest.approx(acc.min())
    assert m[m.metric == "lambda"]["value"].sum() == pytest.approx(1.0)
    # the last logged round evaluated the final model: the same numbers as the history's last row
    assert acc["shirt"] == h["accuracy/shirt"].iloc[-1]
    fedavg = afa_fit.evaluate_run(afa_config.resolve_run(section, "fmnist_data", "fedavg_uniform"), 1,
                              {"final": {"accuracy/shirt": 0.5, "worst_accuracy": 0.5}, "lambda": None})
    assert fedavg[["domain", "metric"]].values.tolist() == [["shirt", "accuracy"], ["all", "worst_accuracy"]]


def test_plugin_lists_partitions_runs_and_outputs(section):
    config = {"agnostic_fedavg": section, "budget": {"max_rounds": 2},
              "datasets": {"fashion_mnist": {"files": [{"name": "a.gz"}, {"name": "b.gz"}]}}}
    paper = type("P", (AgnosticFedAvgPaper,), {"name": "agnostic_fedavg"})(config)
    quick = copy.deepcopy(section)
    quick["build"] = ["fig1_toy", "fmnist"]
    paper.section = quick
    parts = {p.name: p for p in paper.partitions()}
    assert sorted(parts) == ["fmnist_client.json", "fmnist_client.pt", "fmnist_data.json", "fmnist_data.pt",
                             "toy.json", "toy.pt"]
    assert parts["fmnist_client.pt"].inputs == {"fashion_mnist": ["data/raw/fashion_mnist/a.gz",
                                                                  "data/raw/fashion_mnist/b.gz"]}
    assert parts["toy.json"].inputs == {"data": "data/partitions/agnostic_fedavg/toy.pt"}
    runs = paper.runs()
    assert len(runs) == 1 + 2 * 2 * 3  # toy; Fashion-MNIST 2 experiments x 2 algorithms x 3 seeds
    agn = next(s for s in runs if s.experiment == "fmnist_data" and s.run == "agnostic_fedavg" and s.seed == 2)
    assert agn.algorithms == ("agnostic_fedavg",) and agn.hparams["train"]["lambda_lr"] == 0.2
    assert agn.hparams["train"]["rounds"] == 2  # the budget applied
    assert next(s for s in runs if s.run == "fedavg_uniform").algorithms == ("domain_fedavg",)
    assert paper.inputs(agn) == {"data": "data/partitions/agnostic_fedavg/fmnist_data.pt"}
    outs = {o.name: o for o in paper.outputs()}
    assert sorted(outs) == ["afa_fig1_toy", "afa_fmnist"]
    assert outs["afa_fmnist"].files["png"] == "results/figures/agnostic_fedavg/fmnist.png"
    run0 = "results/runs/agnostic_fedavg/fmnist_client/fedavg_uniform/seed~0/history.csv"
    assert outs["afa_fmnist"].inputs[0] == run0
    assert outs["afa_fmnist"].inputs[-2:] == ["data/partitions/agnostic_fedavg/fmnist_client.json",
                                              "data/partitions/agnostic_fedavg/fmnist_data.json"]
    assert len(outs["afa_fmnist"].inputs) == 12 + 2


def test_ptb_experiment_data(section, mirror_dir, tmp_path):
    exp = copy.deepcopy(section["experiments"]["ptb_lm"])
    exp["data"].update(vocab_size=500, max_sentences=300, clients=6)
    summary = afa_data.build_data(exp, {"ptb": mirror_dir / "ptb"}, tmp_path / "p.pt", tmp_path / "p.json")
    assert summary["train_examples"] == {"document": 300} and summary["clients"] == 6
    data = afa_data.load_data(tmp_path / "p.pt", torch.device("cpu"))
    assert len(data["vocab"]) == 500
    x, y = data["clients"].pool.x, data["clients"].pool.y
    assert x.shape == (300, 31) and torch.equal(x[:, 1:], y[:, :-1])  # next-word targets


def test_toy_experiment_truth(section, tmp_path):
    summary = afa_data.build_data(section["experiments"]["toy"], {}, tmp_path / "t.pt")
    assert afa_data.write_summary(tmp_path / "t.pt", tmp_path / "t.json") == summary  # the JSON partition
    assert json.loads((tmp_path / "t.json").read_text()) == summary
    assert summary["truth"]["w_star"] == [0.0, 0.0]
    np.testing.assert_allclose(summary["truth"]["lambda_star"], [1 / 3, 1 / 3, 1 / 3, 0, 0])
    assert summary["single_domain_clients"] and summary["clients"] == 20


def test_domain_table_worst_and_difference():
    rows = []
    for alg, vals in (("fedavg_uniform", [(0.70, 0.90), (0.74, 0.88)]), ("agnostic_fedavg", [(0.80, 0.86),
                                                                                             (0.82, 0.84)])):
        for seed, (hs, census) in enumerate(vals):
            rows += [{"algorithm": alg, "seed": seed, "domain": "high_school", "metric": "accuracy", "value": hs},
                     {"algorithm": alg, "seed": seed, "domain": "census", "metric": "accuracy", "value": census}]
    t = rep.domain_table(pd.DataFrame(rows), {"fedavg_uniform": "FedAvg (uniform)", "agnostic_fedavg": "AFA"},
                         ["high_school", "census"], ["accuracy"])
    cell = t.set_index(["algorithm", "column"])["mean"]
    assert cell[("fedavg_uniform", "worst")] == pytest.approx(0.72)
    assert cell[("agnostic_fedavg", "difference")] == pytest.approx(0.04)
    assert cell[("fedavg_uniform", "difference")] == pytest.approx(0.17)
    md = rep.table_markdown(t, "Table 5")
    assert "| FedAvg (uniform) | 72.00 ± 2.00 | 89.00 ± 1.00 | 72.00 ± 2.00 | 17.00 ± 3.00 |" in md
    with pytest.raises(ValueError, match="no perplexity"):
        rep.domain_table(pd.DataFrame(rows), {"agnostic_fedavg": "AFA"}, ["high_school", "census"], ["perplexity"])


def test_stats_table_needs_statistics():
    st = {"train": {"clients": 3, "sentences": 6, "answers": 4, "questions": 2},
          "test": {"clients": 2, "sentences": 3, "answers": 1, "questions": 2}}
    t = rep.stats_table({"statistics": st})
    assert t.loc["answers", "train"] == 4 and list(t.columns) == ["train", "test"]
    with pytest.raises(ValueError, match="no split statistics"):
        rep.stats_table({"domains": ["question", "answer"]})
