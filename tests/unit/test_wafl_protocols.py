"""WAFL issue 19: Fig. 4's equal tuning budget (baseline grids chosen on validation, fixed rows, per-run table)
and Table 2's protocol switch (the text's vs the official code's whole-domain clients)."""

from __future__ import annotations

import copy
import re

import numpy as np
import pandas as pd
import pytest
import torch

from fedshift.config import validate_section
from fedshift.errors import ConfigError, load_yaml
from fedshift.contract import deep_merge, load_paper
from fedshift.data.digits import preprocess, whole_domain_partition
from fedshift.io import torch_save_atomic
from fedshift.papers import wafl as W
from fedshift.papers.wafl import report as R

PLUGIN = "fedshift.papers.wafl.paper:WaflPaper"


@pytest.fixture()
def raw(repo_root):
    return load_yaml(repo_root / "config" / "papers" / "wafl.yaml")["wafl"]


@pytest.fixture()
def official(raw, repo_root):
    """The shipped section with config/quick.yaml and config/wafl_official.yaml applied, as the workflow does."""
    sec = raw
    for name in ("quick.yaml", "wafl_official.yaml"):
        sec = deep_merge(sec, load_yaml(repo_root / "config" / name)["wafl"])
    return sec


@pytest.fixture(scope="module")
def schema(repo_root):
    return repo_root / "src" / "fedshift" / "papers" / "wafl" / "schema.yaml"


# ------------------------------------------------------------------------------------------- Fig. 4 tuning

def test_official_overlay_is_valid_and_its_grids_are_equal_in_size(official, schema):
    validate_section(official, schema, "wafl")
    sec = W.merged_section(official)
    W.check_section(sec)
    e = sec["experiments"]["mnist"]
    assert e["train"]["client_lr"] == 0.001 and e["partition"]["labels_per_client"] == 3
    assert e["train"]["rounds"] == 200 and e["wafl"]["cost"] == "code" and e["compare_gamma"] == 0.05
    runs = W.algorithm_runs(sec, "mnist")
    # the code's settings keep the plain ids (one run serves the fixed row and the grid)
    assert runs["fedpgm"] == ("fedpgm", None, None) and runs["wafl~0.05"] == ("wafl", 0.05, None)
    assert runs["fedpgm~eps0.3_step0.03"] == ("fedpgm", None, {"eps": 0.3, "step": 0.03, "steps": 10})
    assert runs["fedfgsm~eps0.5"] == ("fedfgsm", None, {"eps": 0.5})
    ch = W.fig4_choices(sec, "mnist")
    assert {k: len(c["candidates"]) for k, c in ch.items()} == {"fedavg": 0, "wafl": 3, "fedpgm": 3, "fedfgsm": 3}
    assert ch["fedpgm"]["candidates"] == ["fedpgm~eps0.2_step0.02", "fedpgm", "fedpgm~eps0.3_step0.03"]  # weakest first
    assert ch["wafl"]["candidates"] == ["wafl~0.5", "wafl~0.05", "wafl~0.01"] and ch["wafl"]["fixed"] == "wafl~0.05"
    r = W.resolve_run(sec, "mnist", "fedpgm~eps0.2_step0.02")
    assert r["algorithm"] == "fedpgm~eps0.2_step0.02" and r["perturb"] == {"eps": 0.2, "step": 0.02, "steps": 10}
    assert W.resolve_run(sec, "mnist", "fedfgsm~eps0.1")["perturb"] == {"eps": 0.1}
    # the fixed runs resolve exactly as before the grid existed (their trained runs stay valid)
    assert W.resolve_run(sec, "mnist", "fedpgm")["perturb"] == {"eps": 0.3, "step": 0.01, "steps": 10}
    assert W.resolve_run(sec, "mnist", "fedfgsm")["algorithm"] == "fedfgsm"


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda e: e["fig4_grid"]["fedfgsm"].pop(), "wafl.experiments.mnist.fig4_grid.fedfgsm: 2 candidates where "
                                                "fig4_gammas has 3"),
    (lambda e: e["fig4_grid"].update(fedpgm=[{"eps": 0.3, "step": 0.01, "steps": 10}, {"eps": 0.3, "step": 0.01},
                                             {"eps": 0.2, "step": 0.02}]),
     "wafl.experiments.mnist.fig4_grid.fedpgm: repeated candidates"),
])
def test_grid_errors_name_the_key(official, mutate, message):
    sec = W.merged_section(official)
    mutate(sec["experiments"]["mnist"])
    with pytest.raises(ConfigError, match=re.escape(message)):
        W.check_section(sec)


def test_grid_schema_error_names_the_key(official, schema):
    bad = copy.deepcopy(official)
    bad["experiments"]["mnist"]["fig4_grid"]["fedfgsm"][0] = {"eps": 0.1, "step": 0.01}
    with pytest.raises(ConfigError, match=re.escape("config error at wafl.experiments.mnist.fig4_grid.fedfgsm[0]")):
        validate_section(bad, schema, "wafl")


def _rows(alg, kind, gamma, seed, population, fraction, acc):
    return dict(experiment="mnist", algorithm=alg, kind=kind, gamma=gamma, seed=seed, round=200,
                population=population, fraction=fraction, metric="accuracy", value=acc)


def test_baselines_are_chosen_on_validation_and_keep_a_fixed_row():
    """Each algorithm's fixed run and its validation choice; the test values rank the candidates the other way."""
    choices = {"mnist": {"fedavg": {"fixed": "fedavg", "candidates": []},
                         "fedpgm": {"fixed": "fedpgm", "candidates": ["fedpgm", "fedpgm~eps0.3_step0.03"]},
                         "wafl": {"fixed": "wafl~0.05", "candidates": ["wafl~0.05"]}}}
    val = {(0, "fedpgm"): 0.30, (0, "fedpgm~eps0.3_step0.03"): 0.45, (1, "fedpgm"): 0.40,
           (1, "fedpgm~eps0.3_step0.03"): 0.40}  # seed 1 ties: the weaker (earlier) candidate
    test = {(0, "fedpgm"): 0.50, (0, "fedpgm~eps0.3_step0.03"): 0.20, (1, "fedpgm"): 0.35,
            (1, "fedpgm~eps0.3_step0.03"): 0.60}
    rows = []
    for seed in (0, 1):
        for alg in ("fedpgm", "fedpgm~eps0.3_step0.03"):
            rows += [_rows(alg, "fedpgm", np.nan, seed, "validation", 0.8, val[seed, alg]),
                     _rows(alg, "fedpgm", np.nan, seed, "clients", 0.8, test[seed, alg])]
        rows += [_rows("fedavg", "fedavg", np.nan, seed, "clients", 0.8, 0.1),
                 _rows("wafl~0.05", "wafl", 0.05, seed, "clients", 0.8, 0.4 + seed / 10),
                 _rows("wafl~0.05", "wafl", 0.05, seed, "validation", 0.8, 0.4)]
    df = pd.DataFrame(rows)
    runs = R.fig4_runs(df, choices).set_index(["kind", "selection", "seed"])
    assert runs.loc[("fedpgm", "validation", 0), "algorithm"] == "fedpgm~eps0.3_step0.03"
    assert runs.loc[("fedpgm", "validation", 0), "value"] == 0.20  # the chosen run's test value
    assert runs.loc[("fedpgm", "validation", 1), "algorithm"] == "fedpgm"
    assert runs.loc[("fedpgm", "fixed", 1), "value"] == 0.35
    assert ("wafl", "validation", 0) not in runs.index  # one candidate: nothing to choose
    t = R.fig4_table(df, choices).set_index(["kind", "selection"])
    assert t.loc[("fedpgm", "validation"), "selected_run"] == "fedpgm~eps0.3_step0.03/fedpgm"
    assert t.loc[("fedpgm", "validation"), "mean"] == pytest.approx(np.mean([0.20, 0.35]))
    assert t.loc[("wafl", "fixed"), "gamma"] == 0.05 and t.loc[("fedavg", "fixed"), "selected_run"] == ""
    with pytest.raises(ValueError, match="validation"):
        R.fig4_runs(df[~((df.population == "validation") & (df.algorithm == "fedpgm"))], choices)


def test_claims_read_the_per_run_table_paired_by_seed(raw, repo_root):
    """The Fig. 4 claims pair by seed on fig4_runs.csv, which the fig4 output writes."""
    from fedshift.claims import estimate

    claims = load_yaml(repo_root / "config" / "papers" / "wafl.yaml")["claims"]["wafl"]
    fig4 = [c for c in claims if c["id"].startswith("wafl_fig4") and "exploratory" not in c]  # the planned rows
    assert len(fig4) == 8 and all(c["quantity"]["table"] == "results/tables/wafl/fig4_runs.csv" for c in fig4)
    table = pd.DataFrame([dict(experiment="mnist", kind=k, selection=s, seed=seed, fraction=0.8, metric="accuracy",
                               value=v + seed / 100)
                          for k, s, v in (("wafl", "validation", 0.5), ("wafl", "fixed", 0.45),
                                          ("fedpgm", "fixed", 0.4), ("fedpgm", "validation", 0.48),
                                          ("fedfgsm", "fixed", 0.5), ("fedfgsm", "validation", 0.52),
                                          ("fedavg", "fixed", 0.2)) for seed in (0, 1, 2)])
    got = {c["id"]: estimate(table, c["quantity"]) for c in fig4}
    assert got["wafl_fig4_80_tuned_over_fedpgm"]["ours"] == pytest.approx(2.0)
    assert got["wafl_fig4_80_tuned_over_fedpgm"]["interval"] == "paired t"
    assert got["wafl_fig4_80_fixed_over_fedpgm"]["ours"] == pytest.approx(5.0)
    assert got["wafl_fig4_80_over_fedpgm"]["ours"] == pytest.approx(10.0)
    paper = load_paper("wafl", PLUGIN, {"wafl": raw})
    fig4_out = [o for o in paper.outputs() if o.name == "wafl_fig4"][0]
    assert fig4_out.files["runs"] == "results/tables/wafl/fig4_runs.csv"


# ------------------------------------------------------------------------------------------- Table 2 protocols

def test_protocol_switch_merges_the_official_settings(official, schema):
    sec = W.merged_section(official)
    W.check_section(sec)
    e = sec["experiments"]["da_mm_up"]
    assert e["protocol"] == "official" and e["partition"]["whole_domain"] is True and e["partition"]["clients"] == 1
    assert e["train"]["client_lr"] == 0.001 and e["train"]["rounds"] == 10 and e["train"]["clients_per_round"] == 1
    assert e["wafl"]["inner_lr"] == 1.0 and e["wafl"]["cost"] == "code" and e["compare_gamma"] == 0.1
    assert e["preprocess"] == "digits_rgb28_raw" and e["dataset"] == "mnist_m" and e["target"] == "usps"
    assert W.runs_of(sec, "da_mm_up") == [(a, s) for a in ("fedavg", "wafl~0.1") for s in range(e["seeds"])]
    text = W.merged_section(deep_merge(official, {"experiments": {"da_mm_up": {"protocol": "text"}}}))
    t = text["experiments"]["da_mm_up"]
    assert t["partition"]["clients"] == 100 and "whole_domain" not in t["partition"]
    assert t["preprocess"] == "digits_rgb28" and t["train"]["client_lr"] == 0.01


def test_a_bad_protocol_is_refused_naming_the_key(official, schema):
    bad = deep_merge(official, {"experiments": {"da_mt_up": {"protocol": "offical"}}})
    with pytest.raises(ConfigError, match=re.escape("config error at wafl.experiments.da_mt_up.protocol")):
        validate_section(bad, schema, "wafl")
    with pytest.raises(ConfigError, match=re.escape("config error at wafl.experiments.da_mt_up.protocol: "
                                                    "'offical' is not one of ['text', 'official']")):
        W.merged_section(bad)
    no_settings = copy.deepcopy(official)
    del no_settings["protocols"]
    with pytest.raises(ConfigError, match=re.escape("config error at wafl.protocols")):
        W.merged_section(no_settings)
    whole_without_target = W.merged_section(official)
    whole_without_target["experiments"]["mnist"]["partition"]["whole_domain"] = True
    with pytest.raises(ConfigError, match="whole_domain: whole-domain clients are Table 2's"):
        W.check_section(whole_without_target)


def test_official_partition_is_the_whole_source_domain_on_one_client_and_the_target_tests(tmp_path, official):
    """The official protocol: the source's train split trains its one client, its test split tests it; the
    target is tested on its own test split in [0, 1] pixels; nothing is standardised."""
    rng = np.random.default_rng(3)
    src = {"x_train": torch.from_numpy(rng.integers(0, 256, (50, 28, 28), dtype=np.uint8)),
           "y_train": torch.from_numpy(np.arange(50) % 10),
           "x_test": torch.from_numpy(rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)),
           "y_test": torch.from_numpy(np.arange(20) % 10)}
    tgt = {"x_train": torch.from_numpy(rng.integers(0, 256, (30, 16, 16), dtype=np.uint8)),
           "y_train": torch.from_numpy(np.arange(30) % 10),
           "x_test": torch.from_numpy(rng.integers(0, 256, (8, 16, 16), dtype=np.uint8)),
           "y_test": torch.from_numpy(np.arange(8) % 10)}
    torch_save_atomic(src, tmp_path / "s.pt")
    torch_save_atomic(tgt, tmp_path / "t.pt")
    exp = dict(W.merged_section(official)["experiments"]["da_mt_up"], experiment="da_mt_up")
    out = W.write_partition(exp, tmp_path / "s.pt", tmp_path / "p.json")
    assert len(out["clients"]) == 1 and out["stats"]["total"] == 70
    assert out["clients"][0]["train"] == list(range(50)) and out["clients"][0]["test"] == list(range(50, 70))
    data = W.load_data(exp, tmp_path / "s.pt", tmp_path / "p.json", torch.device("cpu"), tmp_path / "t.pt")
    (client,) = data["clients"]
    assert client.num_examples == 50 and torch.equal(client.y, src["y_train"])
    assert torch.allclose(client.x[:, 0], src["x_train"].float() / 255)  # [0, 1], grey over 3 channels
    x, y = data["target"]
    assert x.shape == (8, 3, 28, 28) and torch.equal(y, tgt["y_test"]) and 0 <= float(x.min()) <= float(x.max()) <= 1
    assert torch.equal(x, preprocess(tgt["x_test"].numpy(), "digits_rgb28_raw"))
    with pytest.raises(ValueError, match="both splits"):
        whole_domain_partition(np.arange(5), 5)
