"""Config validation: the shipped config is valid; bad input gives one error naming the key path."""

import copy

import pytest

from fedshift.config import ConfigError, algorithm_ids, load_yaml, resolve_hparams, runs_of, validate_config


@pytest.fixture(scope="module")
def schema(repo_root):
    return repo_root / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture()
def config(repo_root):
    cfg = {}
    for f in ("config/config.yaml", "config/datasets.yaml", "config/papers/afl.yaml"):
        cfg.update(load_yaml(repo_root / f))
    return cfg


def test_shipped_config_and_quick_overlay_are_valid(config, schema, repo_root):
    validate_config(config, schema)
    quick = load_yaml(repo_root / "config" / "quick.yaml")
    merged = copy.deepcopy(config)
    for name, over in quick["experiments"].items():
        merged["experiments"][name]["seeds"] = over["seeds"]
        merged["experiments"][name]["train"].update(over["train"])
    validate_config(merged, schema)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.update(unknown_key=1), r"config error at <root>: unknown key\(s\) \('unknown_key'"),
        (lambda c: c["experiments"]["afl_adult"].update(seeds=0), r"experiments\.afl_adult\.seeds: 0 is less"),
        (lambda c: c["experiments"]["afl_adult"].update(seeds="5"), r"experiments\.afl_adult\.seeds: '5' is not"),
        (lambda c: c["experiments"]["afl_adult"]["train"].update(rounds=-3),
         r"experiments\.afl_adult\.train\.rounds: -3 is less"),
        (lambda c: c["experiments"]["afl_adult"]["algorithms"].update(fedfoo={}),
         r"experiments\.afl_adult\.algorithms"),
        (lambda c: c["experiments"]["afl_adult"].update(dataset="cifar100"), r"experiments\.afl_adult\.dataset"),
        (lambda c: c["experiments"]["afl_adult"]["train"].update(optimizer="lbfgs"),
         r"experiments\.afl_adult\.train\.optimizer"),
        (lambda c: c["experiments"]["afl_adult"]["train"].update(lr_w=0), r"experiments\.afl_adult\.train\.lr_w"),
        (lambda c: c["experiments"]["afl_adult"]["algorithms"]["afl"].update(lr_lambda=0),
         r"experiments\.afl_adult\.algorithms\.afl\.lr_lambda"),
        (lambda c: c["tables"]["afl_table1"].update(experiment="nope"), r"tables\.afl_table1\.experiment"),
        (lambda c: c["datasets"]["adult"]["files"][0].update(sha256="abc"), r"datasets\.adult\.files\[0\]\.sha256"),
        (lambda c: c.update(device="tpu"), r"config error at device"),
        (lambda c: c.update(portable_cpu="true"), r"config error at portable_cpu: 'true' is not of type 'boolean'"),
        (lambda c: c["tables"]["afl_table1"]["rows"].append("domain:phd"), r"tables\.afl_table1\.rows: 'domain:phd'"),
        (lambda c: c["tables"]["afl_table1"]["columns"].append("shirt"), r"tables\.afl_table1\.columns: 'shirt'"),
    ],
)
def test_bad_config_names_the_key(config, schema, mutate, message):
    mutate(config)
    with pytest.raises(ConfigError, match=message):
        validate_config(config, schema)


def test_resolved_hyperparameters(config):
    assert algorithm_ids(config["experiments"]["afl_adult"]) == [
        "afl", "uniform", "domain~doctorate", "domain~non-doctorate"]
    afl = resolve_hparams(config, "afl_adult", "afl")["hparams"]
    assert afl["lr_lambda"] > 0 and afl["optimizer"] == "adagrad"
    dom = resolve_hparams(config, "afl_adult", "domain~non-doctorate")["hparams"]
    assert dom["lr_lambda"] == 0 and dom["init_lambda"] == [0.0, 1.0]
    uni = resolve_hparams(config, "afl_adult", "uniform")["hparams"]
    assert uni["init_lambda"] == "empirical" and uni["w_gradient"] == "weighted"
    assert len(runs_of(config, "afl_adult")) == 4 * config["experiments"]["afl_adult"]["seeds"]
    with pytest.raises(ConfigError):
        resolve_hparams(config, "afl_adult", "domain~phd")
