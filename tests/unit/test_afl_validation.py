"""AFL without test data: the per-domain validation split and the choice of (γ_w, T, iterate) made on it."""

import numpy as np
import pytest
import torch

from fedshift.errors import ConfigError
from fedshift.io import write_json
from fedshift.papers.afl.config import resolve_run
from fedshift.papers.afl.data import load_experiment, make_partition
from fedshift.papers.afl.fit import train_runs


def synthetic_prepared(n_train=(60, 140), n_test=(30, 50), dim=4, seed=0):
    """Two domains of a separable-ish binary task, stored like a prepared dataset with a domain column."""
    rng = np.random.default_rng(seed)
    out = {"domain_names": ["a", "b"], "num_classes": 2}
    for split, sizes in (("train", n_train), ("test", n_test)):
        dom = np.repeat([0, 1], sizes)
        x = rng.normal(size=(dom.size, dim)) + dom[:, None] * 0.5
        y = (x[:, 0] + 0.3 * rng.normal(size=dom.size) > 0.25).astype(np.int64)
        perm = rng.permutation(dom.size)  # interleave the domains, as real data
        out[f"x_{split}"] = torch.tensor(x[perm], dtype=torch.float32)
        out[f"y_{split}"] = torch.tensor(y[perm])
        out[f"domain_{split}"] = torch.tensor(dom[perm])
    return out


EXP = {"dataset": "toy", "domains": {"by": "domain"}, "preprocess": {"standardize": "per_feature", "eps": 1e-3},
       "validation_fraction": 0.25}


def test_validation_split_is_disjoint_from_train_and_test_and_seeded():
    prepared = synthetic_prepared()
    plain = make_partition({**EXP, "validation_fraction": 0.0}, prepared, seed=3)
    part = make_partition(EXP, prepared, seed=3)
    assert "validation" not in plain
    assert part["test"] == plain["test"]                          # test examples untouched
    for name, n in (("a", 60), ("b", 140)):
        val, train = set(part["validation"][name]), set(part["train"][name])
        assert len(val) == round(0.25 * n) and not val & train    # disjoint from the training examples
        assert val | train == set(plain["train"][name])           # and held out of this domain's training split
        assert (prepared["domain_train"][sorted(val)] == ["a", "b"].index(name)).all()
    # validation indices point into the training split: disjoint from the test split by construction, and no test
    # example's input appears among them
    x_val = prepared["x_train"][sorted(part["validation"]["a"] + part["validation"]["b"])]
    assert not (torch.cdist(x_val, prepared["x_test"]) == 0).any()
    assert make_partition(EXP, prepared, seed=3) == part            # same seed, same split
    assert make_partition(EXP, prepared, seed=4)["validation"] != part["validation"]


def test_validation_tensors_use_training_statistics_only():
    prepared = synthetic_prepared()
    part = make_partition(EXP, prepared, seed=0)
    data = load_experiment(EXP, prepared, part, torch.device("cpu"), torch.float64)
    x_tr = torch.cat([prepared["x_train"][part["train"][n]] for n in ("a", "b")]).double()
    mu, sd = x_tr.mean(0), x_tr.std(0, unbiased=False) + 1e-3
    raw = prepared["x_train"][part["validation"]["b"]].double()
    assert torch.allclose(data.validation[1][0], (raw - mu) / sd)
    assert torch.equal(data.validation[1][1], prepared["y_train"][part["validation"]["b"]])
    assert [c.num_examples for c in data.clients] == [45, 105]


def test_too_small_a_domain_for_a_validation_split_fails():
    with pytest.raises(ValueError, match="too few"):
        make_partition({**EXP, "validation_fraction": 0.4}, synthetic_prepared(n_train=(1, 50)), seed=0)


def afl_config(select):
    train = {"rounds": 40, "batch_size": 5, "optimizer": "sgd", "client_lr": 0.1, "log_every": 10,
             "checkpoint_every": 0, "select": select}
    exp = {"dataset": "adult", "domains": {"by": "domain"}, "preprocess": {"standardize": "none"},
           "model": "logreg", "dtype": "float64", "partition_seed": 0, "validation_fraction": 0.25, "seeds": 2,
           "train": train, "algorithms": {"afl": {"lambda_lr": 0.05}, "uniform": {"w_gradient": "weighted"}}}
    return {"experiments": {"e": exp}}


def test_select_keeps_the_best_validation_setting_and_records_it(tmp_path):
    prepared = synthetic_prepared()
    prepared_path, partition_path = tmp_path / "p.pt", tmp_path / "part.json"
    torch.save(prepared, prepared_path)
    exp = {**EXP, "dataset": "adult", "preprocess": {"standardize": "none"}}
    write_json(partition_path, make_partition(exp, prepared, seed=0))
    select = {"client_lr": [0.01, 0.5], "rounds": [10, 40], "iterate": ["averaged", "last"]}
    resolved = resolve_run(afl_config(select), "e", "afl")
    fits = train_runs(resolved, [0, 1], prepared_path=prepared_path, partition_path=partition_path,
                      device=torch.device("cpu"), checkpoint_path=tmp_path / "ck.pt", fingerprint="job")
    infos = [f.info for f in fits]
    sel = infos[0]["selection"]
    cands = sel["candidates"]
    assert len(cands) == 8 and {(c["client_lr"], c["rounds"], c["iterate"]) for c in cands} == {
        (lr, t, it) for lr in (0.01, 0.5) for t in (10, 40) for it in ("averaged", "last")}
    best = max(cands, key=lambda c: c["mean_validation_score"])
    assert sel["chosen"] == {k: best[k] for k in ("client_lr", "rounds", "iterate")}
    assert sel["mean_validation_score"] == best["mean_validation_score"]
    assert np.mean([i["selection"]["validation_score"] for i in infos]) == pytest.approx(best["mean_validation_score"])
    assert infos[1]["selection"]["chosen"] == sel["chosen"]
    assert not list(tmp_path.glob("ck*"))                          # every candidate's checkpoint removed
    # the stored model is the chosen snapshot: retraining that one setting gives the same parameters
    chosen = sel["chosen"]
    one = {**resolved, "hparams": {**resolved["hparams"], "select": None, "client_lr": chosen["client_lr"],
                                   "rounds": chosen["rounds"], "average_iterates": chosen["iterate"] == "averaged"}}
    ref = train_runs(one, [0, 1], prepared_path=prepared_path, partition_path=partition_path,
                     device=torch.device("cpu"), checkpoint_path=None, fingerprint="ref")
    for s in (0, 1):
        got, want = fits[s].params, ref[s].params
        assert all(torch.allclose(got[k], want[k], atol=1e-12) for k in want)


def test_select_without_a_validation_split_or_beyond_the_rounds_fails_naming_the_key():
    cfg = afl_config({"client_lr": [0.1], "rounds": [40], "iterate": ["last"]})
    cfg["experiments"]["e"]["validation_fraction"] = 0.0
    with pytest.raises(ConfigError, match=r"afl\.experiments\.e\.train\.select: needs a validation set"):
        resolve_run(cfg, "e", "afl")
    cfg = afl_config({"client_lr": [0.1], "rounds": [80], "iterate": ["last"]})
    with pytest.raises(ConfigError, match=r"afl\.experiments\.e\.train\.select\.rounds: 80"):
        resolve_run(cfg, "e", "uniform")
