"""Config validation: the shipped config is valid; bad input gives one error naming the key path.

The generic part (fedshift.config.validate_config on the top level) and AFL's section (fedshift.papers.afl.config:
its checks after the schema, its run ids and resolved hyper-parameters, `defaults` merged into each experiment).
"""

import copy

import pytest
from snakemake.utils import update_config

from fedshift.config import validate_config
from fedshift.errors import ConfigError, load_yaml
from fedshift.contract import experiments_of, load_paper
from fedshift.papers.afl.config import algorithm_ids, check_section, resolve_run
from fedshift.validation import validate_workflow_config


@pytest.fixture(scope="module")
def schema(repo_root):
    return repo_root / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture()
def config(repo_root):
    cfg = {}
    for f in ("config/config.yaml", "config/datasets.yaml", "config/papers/afl.yaml"):
        cfg.update(load_yaml(repo_root / f))
    return cfg


def test_shipped_config_and_quick_overlay_are_valid(config, repo_root):
    validate_workflow_config(copy.deepcopy(config), repo_root / "workflow" / "schemas")
    quick = load_yaml(repo_root / "config" / "quick.yaml")
    merged = copy.deepcopy(config)
    update_config(merged, {"afl": quick["afl"]})
    validate_workflow_config(merged, repo_root / "workflow" / "schemas")
    fm = resolve_run(merged["afl"], "afl_fashion_mnist", "afl")["hparams"]
    assert fm["rounds"] == 3000 and fm["log_every"] == 250      # the experiment's own and the overlay's defaults
    assert fm["batch_size"] == 10 and fm["lambda_lr"] == 0.01   # the paper-scale defaults


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.update(unknown_key=1), r"config error at <root>: unknown key\(s\) \('unknown_key'"),
        (lambda c: c["datasets"]["adult"]["files"][0].update(sha256="abc"), r"datasets\.adult\.files\[0\]\.sha256"),
        (lambda c: c.update(device="tpu"), r"config error at device"),
        (lambda c: c.update(portable_cpu="true"), r"config error at portable_cpu: 'true' is not of type 'boolean'"),
    ],
)
def test_bad_config_names_the_key(config, schema, mutate, message):
    mutate(config)
    with pytest.raises(ConfigError, match=message):
        validate_config({k: v for k, v in config.items() if k not in ("afl", "papers")}, schema)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda a: a["experiments"]["afl_adult"].update(dataset="cifar100"), r"afl\.experiments\.afl_adult\.dataset"),
        (lambda a: a["defaults"]["algorithms"]["afl"].update(lambda_lr=0),
         r"afl\.experiments\.afl_adult\.algorithms\.afl\.lambda_lr"),
        (lambda a: a["experiments"]["afl_adult"]["train"].pop("optimizer"),
         r"afl\.experiments\.afl_adult\.algorithms\.afl: missing \['optimizer'\]"),
        (lambda a: a["experiments"]["afl_adult"].pop("dataset"), r"afl\.experiments\.afl_adult: missing \['dataset'\]"),
        (lambda a: a["tables"]["afl_table1"].update(experiment="nope"), r"afl\.tables\.afl_table1\.experiment"),
        (lambda a: a["tables"]["afl_table1"]["rows"].append("domain:phd"),
         r"afl\.tables\.afl_table1\.rows: 'domain:phd'"),
        (lambda a: a["tables"]["afl_table1"]["columns"].append("shirt"), r"afl\.tables\.afl_table1\.columns: 'shirt'"),
        (lambda a: a.update(outputs=["afl_table9"]), r"afl\.outputs\[0\]: unknown table 'afl_table9'"),
        # a domain model of Fashion-MNIST would put 't-shirt/top' into a run folder name: refused
        (lambda a: a["experiments"]["afl_fashion_mnist"]["algorithms"].update(domain={}),
         r"afl\.experiments\.afl_fashion_mnist\.domains\.names\[0\]: 't-shirt/top'"),
        (lambda a: a["experiments"]["afl_adult"].update(validation_fraction=0.0),
         r"afl\.experiments\.afl_adult\.train\.select: needs a validation set"),
    ],
)
def test_bad_afl_section_names_the_key(config, mutate, message):
    mutate(config["afl"])
    with pytest.raises(ConfigError, match=message):
        check_section(config["afl"], config["datasets"])


def test_resolved_hyperparameters(config):
    section = config["afl"]
    exp = experiments_of(section)["afl_adult"]
    assert algorithm_ids(exp) == ["afl", "uniform", "domain~doctorate", "domain~non-doctorate"]
    afl = resolve_run(section, "afl_adult", "afl")["hparams"]
    assert afl["lambda_lr"] > 0 and afl["optimizer"] == "adagrad" and afl["client_lr"] == 0.01
    dom = resolve_run(section, "afl_adult", "domain~non-doctorate")["hparams"]
    assert dom["lambda_lr"] == 0 and dom["init_lambda"] == [0.0, 1.0]
    uni = resolve_run(section, "afl_adult", "uniform")["hparams"]
    assert uni["init_lambda"] == "empirical" and uni["w_gradient"] == "weighted" and uni["batch_size"] == 20
    capped = resolve_run(section, "afl_adult", "afl", {"max_rounds": 2})["hparams"]
    assert capped["rounds"] == 2 and capped["select"]["rounds"] == [2]
    with pytest.raises(ConfigError):
        resolve_run(section, "afl_adult", "domain~phd")


def test_the_plugin_lists_typed_runs_and_batches_seeds(config):
    paper = load_paper("afl", config["papers"]["afl"], config)
    runs = paper.runs()
    adult = [s for s in runs if s.experiment == "afl_adult"]
    assert len(adult) == 4 * section_seeds(config, "afl_adult")
    spec = next(s for s in adult if s.run == "afl" and s.seed == 3)
    assert spec.path == "afl/afl_adult/afl/seed~3" and spec.algorithms == ("afl",)
    assert spec.hparams == resolve_run(config["afl"], "afl_adult", "afl")  # hparams from the spec, not the id
    assert paper.seeds_per_job("afl_adult") == 50 and paper.seeds_per_job("afl_fashion_mnist") == 10
    assert paper.inputs(spec) == {"prepared": "data/prepared/adult.pt",
                                  "partition": "data/partitions/afl/afl_adult.json"}
    outs = {o.name: o for o in paper.outputs()}
    assert set(outs) == {"afl_table1", "afl_table1_figure", "afl_table2", "afl_table2_figure"}
    assert outs["afl_table1"].files["runs"] == "results/tables/afl/table1_adult_runs.csv"
    assert outs["afl_table1"].label == "Table 1" and len(outs["afl_table1"].inputs) == len(adult)
    assert paper.datasets() == ["adult", "fashion_mnist"]


def section_seeds(config, experiment):
    return config["afl"]["experiments"][experiment].get("seeds", config["afl"]["defaults"].get("seeds"))
