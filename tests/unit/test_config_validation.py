"""Malformed configurations over every section are refused before any job, naming the key path, never crashing.

Each case edits one key of the merged configuration (config.yaml + datasets.yaml + papers/*.yaml, and for the
``quick`` cases the quick overlay too), exactly as an edit of that file would, and calls
:func:`fedshift.validation.validate_workflow_config` directly (no Snakemake per case).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from fedshift.errors import ConfigError
from fedshift.validation import strict_schema, validate_workflow_config

ROOT = Path(__file__).resolve().parents[2]
# every paper's YAML, as the Snakefile reads them (config/quick.yaml holds a section of each)
FILES = ["config/config.yaml", "config/datasets.yaml",
         *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "config" / "papers").glob("*.yaml")))]
DEL = object()
NAN, INF = math.nan, math.inf


@functools.cache
def base(overlay: str | None) -> dict:
    """The merged configuration as Snakemake builds it (deep-merged config files, then overlays)."""
    cfg: dict = {}
    for f in FILES + ([f"config/{overlay}.yaml"] if overlay else []):
        update_config(cfg, yaml.safe_load((ROOT / f).read_text()))
    cfg["data_mirror"] = "../shared/data"
    return cfg


def edited(overlay, path, value):
    cfg = copy.deepcopy(base(overlay))
    node = cfg
    for p in path[:-1]:
        node = node[p]
    if value is DEL:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return cfg


AA = ("afl", "experiments", "afl_adult")
AF = ("afl", "experiments", "afl_fashion_mnist")
AD = ("afl", "defaults")
WM = ("wafl", "experiments", "mnist")
WD = ("wafl", "defaults")
FP = ("fedpals", "experiments", "fedpals_fmnist_c3")
FD = ("fedpals", "defaults")
MD = ("fedmm", "tasks", "digits")
AT = ("agnostic_fedavg", "experiments", "toy")
AC = ("agnostic_fedavg", "experiments", "fmnist_client")
ADULT_FILE = ("datasets", "adult", "files", 0)

# (section file, overlay, edited key path, new value or DEL, key path the message must name)
CASES = [
    # config.yaml
    ("config", None, ("data_mirror",), 5, "data_mirror"),
    ("config", None, ("device",), "gpu", "device"),
    ("config", None, ("threads_per_job",), 0, "threads_per_job"),
    ("config", None, ("threads_per_job",), NAN, "threads_per_job"),
    ("config", None, ("download", "timeout_s"), INF, "download.timeout_s"),
    ("config", None, ("download", "retries"), 0, "download.retries"),
    ("config", None, ("download", "proxy"), "x", "download"),
    ("config", None, ("snakemake_profile",), "x", "<root>"),
    ("config", None, ("bad/key",), 1, "bad/key"),
    # datasets.yaml
    ("datasets", None, (*ADULT_FILE, "sha256"), "xyz", "datasets.adult.files[0].sha256"),
    ("datasets", None, (*ADULT_FILE, "name"), "../adult.data", "datasets.adult.files[0].name"),
    ("datasets", None, (*ADULT_FILE, "urls"), ["ftp://example.org/a"], "datasets.adult.files[0].urls[0]"),
    ("datasets", None, (*ADULT_FILE, "hash_of"), "md5", "datasets.adult.files[0].hash_of"),
    ("datasets", None, (*ADULT_FILE, "sha256"), "unpinned", "datasets.adult.files[0]"),
    ("datasets", None, (*ADULT_FILE, "size"), 10, "datasets.adult.files[0]"),
    ("datasets", None, ("datasets", "adult", "licence"), DEL, "datasets.adult"),
    ("datasets", None, ("datasets", "adult", "homepagee"), "x", "datasets.adult"),
    ("datasets", None, ("datasets", "mnist", "files"), [], "datasets.mnist.files"),
    ("datasets", None, ("datasets", "adult", "mirror_dir"), "", "datasets.adult.mirror_dir"),
    ("datasets", None, ("datasets", "mnist/../x"), {}, "datasets.mnist/../x"),
    ("datasets", None, ("datasets", "adult"), DEL, "afl.experiments.afl_adult.dataset"),
    # papers/afl.yaml
    ("afl", None, (*AA, "train", "client_lr"), NAN, "afl.experiments.afl_adult.train.client_lr"),
    ("afl", None, (*AA, "train", "client_lr"), -0.1, "afl.experiments.afl_adult.train.client_lr"),
    ("afl", None, (*AA, "train", "rounds"), 0, "afl.experiments.afl_adult.train.rounds"),
    ("afl", None, (*AA, "train", "rounds"), 1.5, "afl.experiments.afl_adult.train.rounds"),
    ("afl", None, (*AA, "train", "optimizer"), "rmsprop", "afl.experiments.afl_adult.train.optimizer"),
    ("afl", None, (*AA, "train", "client_lrr"), 0.1, "afl.experiments.afl_adult.train"),
    ("afl", None, (*AA, "train", "w_radius"), NAN, "afl.experiments.afl_adult.train.w_radius"),
    ("afl", None, (*AA, "train", "average_iterates"), 1, "afl.experiments.afl_adult.train.average_iterates"),
    ("afl", None, (*AA, "train", "w_gradient"), "perclient", "afl.experiments.afl_adult.train.w_gradient"),
    ("afl", None, (*AA, "seeds"), 0, "afl.experiments.afl_adult.seeds"),
    ("afl", None, (*AA, "partition_seed"), -1, "afl.experiments.afl_adult.partition_seed"),
    ("afl", None, (*AA, "batch_seeds"), "yes", "afl.experiments.afl_adult.batch_seeds"),
    ("afl", None, (*AA, "dataset"), "cifar10", "afl.experiments.afl_adult.dataset"),
    ("afl", None, (*AA, "model"), "mlp", "afl.experiments.afl_adult.model"),
    ("afl", None, (*AD, "algorithms", "afl", "init_lambda"), [0.5, 0.4], "afl.defaults.algorithms.afl.init_lambda"),
    ("afl", None, (*AD, "algorithms", "afl", "init_lambda"), [1.5, -0.5], "afl.defaults.algorithms.afl.init_lambda"),
    ("afl", None, (*AD, "algorithms", "afl", "lambda_lr"), 0, "afl.experiments.afl_adult.algorithms.afl.lambda_lr"),
    ("afl", None, (*AD, "algorithms", "afl", "lambda_lr"), NAN, "afl.defaults.algorithms.afl.lambda_lr"),
    ("afl", None, (*AD, "train", "batch_size"), 0, "afl.defaults.train.batch_size"),
    ("afl", None, (*AD, "seeds"), -1, "afl.defaults.seeds"),
    ("afl", None, (*AD, "train", "select"), {"client_lr": [0.1]}, "afl.defaults.train.select"),
    ("afl", None, (*AF, "algorithms", "domain"), {}, "afl.experiments.afl_fashion_mnist.domains.names[0]"),
    ("afl", None, ("afl", "outputs"), ["afl_table9"], "afl.outputs[0]"),
    ("afl", None, (*AA, "train", "select", "rounds"), [1000, 20000], "afl.experiments.afl_adult.train.select.rounds"),
    ("afl", None, (*AA, "algorithms", "fedsgd"), {}, "afl.experiments.afl_adult.algorithms"),
    ("afl", None, (*AF, "domains", "classes"), [0, 0, 6], "afl.experiments.afl_fashion_mnist.domains.classes[1]"),
    ("afl", None, (*AF, "domains", "classes"), [0, 2, 10], "afl.experiments.afl_fashion_mnist.domains.classes[2]"),
    ("afl", None, (*AF, "domains", "names"), ["../../etc", "pullover", "shirt"],
     "afl.experiments.afl_fashion_mnist.domains.names[0]"),
    ("afl", None, (*AF, "domains", "names"), ["a", "b"], "afl.experiments.afl_fashion_mnist.domains"),
    ("afl", None, (*AF, "preprocess", "scale"), INF, "afl.experiments.afl_fashion_mnist.preprocess.scale"),
    ("afl", None, (*AF, "preprocess", "standardise"), "none", "afl.experiments.afl_fashion_mnist.preprocess"),
    ("afl", None, (*AF, "dtype"), "float16", "afl.experiments.afl_fashion_mnist.dtype"),
    ("afl", None, ("afl", "experiments", "afl adult"), {}, "afl.experiments.afl adult"),
    ("afl", None, ("afl", "tables", "afl_table1", "experiment"), "afl_adultt", "afl.tables.afl_table1.experiment"),
    ("afl", None, ("afl", "tables", "afl_table1", "rows"), ["afl", "fedavg"], "afl.tables.afl_table1.rows"),
    ("afl", None, ("afl", "tables", "afl_table1", "columns"), ["doctorate", "Z"], "afl.tables.afl_table1.columns"),
    ("afl", None, ("afl", "tables", "afl_table1", "file"), "../table1", "afl.tables.afl_table1.file"),
    ("afl", None, ("afl", "tables", "afl_table1", "title"), DEL, "afl.tables.afl_table1"),
    # papers/wafl.yaml
    ("wafl", None, ("wafl", "outputs"), ["fig9"], "wafl.outputs[0]"),
    ("wafl", None, (*WM, "train", "client_lr"), NAN, "wafl.experiments.mnist.train.client_lr"),
    ("wafl", None, (*WM, "train", "lr"), 0.01, "wafl.experiments.mnist.train"),  # the old name of client_lr
    ("wafl", None, (*WD, "train", "client_lr"), DEL, "wafl.experiments.mnist.train"),  # missing once merged
    ("wafl", None, (*WD, "train", "rounds"), -1, "wafl.defaults.train.rounds"),
    ("wafl", None, WD, "x", "wafl.defaults"),  # the plug-in is loaded before its schema runs: no crash
    ("wafl", None, ("wafl", "experiments"), [1], "wafl.experiments"),
    ("wafl", None, (*WM, "train", "rounds"), 0, "wafl.experiments.mnist.train.rounds"),
    ("wafl", None, (*WM, "train", "l2"), -1, "wafl.experiments.mnist.train.l2"),
    ("wafl", None, (*WM, "train", "lrr"), 0.1, "wafl.experiments.mnist.train"),
    ("wafl", None, (*WM, "partition", "labels_per_client"), 11, "wafl.experiments.mnist.partition.labels_per_client"),
    ("wafl", None, (*WM, "partition", "validation_fraction"), 1.5,
     "wafl.experiments.mnist.partition.validation_fraction"),
    ("wafl", None, (*WM, "partition", "sigma"), INF, "wafl.experiments.mnist.partition.sigma"),
    ("wafl", None, (*WM, "shift", "fractions"), [0.0, 1.5], "wafl.experiments.mnist.shift.fractions[1]"),
    ("wafl", None, (*WM, "shift", "eps"), INF, "wafl.experiments.mnist.shift.eps"),
    ("wafl", None, (*WD, "wafl", "inner_lr"), NAN, "wafl.defaults.wafl.inner_lr"),
    ("wafl", None, (*WD, "wafl", "cost"), "l3", "wafl.defaults.wafl.cost"),
    ("wafl", None, (*WM, "wafl"), {"inner_lr": -1}, "wafl.experiments.mnist.wafl.inner_lr"),
    ("wafl", None, (*WM, "modell"), "logreg", "wafl.experiments.mnist"),
    ("wafl", None, (*WM, "dataset"), "imagenet", "wafl.experiments.mnist.dataset"),
    ("wafl", None, (*WM, "gammas"), [-0.1], "wafl.experiments.mnist.gammas[0]"),
    ("wafl", None, (*WM, "seeds"), 0, "wafl.experiments.mnist.seeds"),
    ("wafl", None, (*WD, "adversarial_training", "steps"), 0, "wafl.defaults.adversarial_training.steps"),
    ("wafl", None, ("wafl", "figures", "fig4"), ["mnist_typo"], "wafl.figures.fig4"),
    ("wafl", None, ("wafl", "experiments", "da_mt_mm", "target"), "svhn", "wafl.experiments.da_mt_mm.target"),
    ("wafl", None, ("wafl", "experiments", "../mnist"), {}, "wafl.experiments.../mnist"),
    # papers/fedpals.yaml
    ("fedpals", None, (*FD, "train", "client_lr"), NAN, "fedpals.defaults.train.client_lr"),
    ("fedpals", None, (*FP, "train"), {"rounds": -1}, "fedpals.experiments.fedpals_fmnist_c3.train.rounds"),
    ("fedpals", None, (*FD, "train", "eval_every"), 0, "fedpals.defaults.train.eval_every"),
    ("fedpals", None, (*FD, "train", "clientlr"), 0.1, "fedpals.defaults.train"),
    ("fedpals", None, (*FD, "algorithms", "fedprox", "mu"), -0.1, "fedpals.defaults.algorithms.fedprox.mu"),
    ("fedpals", None, (*FD, "algorithms", "fedpals", "ess_fractions"), [1.5],
     "fedpals.defaults.algorithms.fedpals.ess_fractions[0]"),
    ("fedpals", None, (*FP, "algorithms"), {"fedpals": {"lambdas": [INF]}},
     "fedpals.experiments.fedpals_fmnist_c3.algorithms.fedpals.lambdas[0]"),
    ("fedpals", None, (*FP, "algorithms"), {"fedsgd": {}}, "fedpals.experiments.fedpals_fmnist_c3.algorithms"),
    ("fedpals", None, (*FP, "algorithms"), {"oracle": True}, "fedpals.experiments.fedpals_fmnist_c3.algorithms.oracle"),
    ("fedpals", None, (*FD, "seeds"), DEL, "fedpals.experiments.fedpals_fmnist_c3.seeds"),
    ("fedpals", None, (*FD, "epochs"), 3, "fedpals.defaults"),
    ("fedpals", None, (*FP, "model"), "vgg", "fedpals.experiments.fedpals_fmnist_c3.model"),
    ("fedpals", None, (*FP, "label_shift", "labels_per_client"), 0,
     "fedpals.experiments.fedpals_fmnist_c3.label_shift.labels_per_client"),
    ("fedpals", None, (*FP, "label_shift", "kind"), "random", "fedpals.experiments.fedpals_fmnist_c3.label_shift"),
    ("fedpals", None, (*FP, "num_clients"), 0, "fedpals.experiments.fedpals_fmnist_c3.num_clients"),
    ("fedpals", None, (*FP, "dataset"), "svhn", "fedpals.experiments.fedpals_fmnist_c3.dataset"),
    ("fedpals", None, (*FP, "preprocess"), {"sd": 0.5}, "fedpals.experiments.fedpals_fmnist_c3.preprocess"),
    ("fedpals", None, (*FP, "target_drop_labels"), [2, 2],
     "fedpals.experiments.fedpals_fmnist_c3.target_drop_labels[1]"),
    ("fedpals", None, (*FP, "target_drop_labels"), [12], "fedpals.experiments.fedpals_fmnist_c3.target_drop_labels[0]"),
    ("fedpals", None, (*FP, "seeds"), 0, "fedpals.experiments.fedpals_fmnist_c3.seeds"),
    ("fedpals", None, ("fedpals", "synthetic", "client_marginals"), [[0.5, 0.4, 0.0], [0.5, 0.0, 0.5]],
     "fedpals.synthetic.client_marginals[0]"),
    ("fedpals", None, ("fedpals", "synthetic", "target_start"), [0.5, 0.5, 0.5], "fedpals.synthetic.target_start"),
    ("fedpals", None, ("fedpals", "synthetic", "deltas"), [NAN], "fedpals.synthetic.deltas[0]"),
    ("fedpals", None, ("fedpals", "synthetic", "seeds"), 0, "fedpals.synthetic.seeds"),
    ("fedpals", None, ("fedpals", "tables", "fedpals_table1", "metric"), "f2", "fedpals.tables.fedpals_table1.metric"),
    ("fedpals", None, ("fedpals", "tables", "fedpals_table1", "rows", 0, "experiment"), "fedpals_nope",
     "fedpals.tables.fedpals_table1"),
    ("fedpals", None, ("fedpals", "figures", "fedpals_fig7", "experiments"), ["fedpals_nope"],
     "fedpals.figures.fedpals_fig7"),
    ("fedpals", None, ("fedpals", "figures", "fedpals_fig7", "kind"), "pie", "fedpals.figures.fedpals_fig7"),
    ("fedpals", None, ("fedpals", "figures", "fedpals_fig7", "file"), "a/b", "fedpals.figures.fedpals_fig7.file"),
    ("fedpals", None, ("fedpals", "outputs"), ["fedpals_table9"], "fedpals.outputs"),
    # papers/fedmm.yaml
    ("fedmm", None, ("fedmm", "outputs"), ["fig9"], "fedmm.outputs[0]"),
    ("fedmm", None, (*MD, "train", "client_lr"), NAN, "fedmm.tasks.digits.train.client_lr"),
    ("fedmm", None, (*MD, "train", "lr"), 0.01, "fedmm.tasks.digits.train"),  # renamed client_lr
    ("fedmm", None, (*MD, "train", "rounds"), 0, "fedmm.tasks.digits.train.rounds"),
    ("fedmm", None, (*MD, "network", "kind"), "resnet", "fedmm.tasks.digits.network"),
    ("fedmm", None, (*MD, "network", "conv_layer"), 2, "fedmm.tasks.digits.network"),
    ("fedmm", None, ("fedmm", "defaults", "fedmm", "mu"), -1, "fedmm.defaults.fedmm.mu"),
    # a task's partial block is completed by defaults (issue 39), and what it sets is still checked
    ("fedmm", None, (*MD, "fedmm"), {"mu": 0.0}, "fedmm.tasks.digits.fedmm.mu"),
    ("fedmm", None, ("fedmm", "defaults", "seeds"), DEL, "fedmm.tasks.digits.seeds"),  # no task sets it
    ("fedmm", None, (*MD, "heads", "dann", "nu"), INF, "fedmm.tasks.digits.heads.dann.nu"),
    ("fedmm", None, (*MD, "heads", "gan"), {"nu": 1.0}, "fedmm.tasks.digits.heads"),
    ("fedmm", None, (*MD, "source"), "cifar10", "fedmm.tasks.digits.source"),
    ("fedmm", None, (*MD, "target_size"), 0, "fedmm.tasks.digits.target_size"),
    ("fedmm", None, (*MD, "target_test_fraction"), 0.3, "fedmm.tasks.digits"),  # gone: the test split is the test set
    ("fedmm", None, (*MD, "seeds"), 0, "fedmm.tasks.digits.seeds"),
    ("fedmm", None, ("fedmm", "figures", "fig4", "task"), "nope", "fedmm.figures.fig4"),
    ("fedmm", None, ("fedmm", "figures", "fig4", "p"), [1.5], "fedmm.figures.fig4.p[0]"),
    ("fedmm", None, ("fedmm", "figures", "table1", "optimizers"), ["fedadam"], "fedmm.figures.table1.optimizers[0]"),
    # papers/agnostic_fedavg.yaml
    ("agnostic_fedavg", None, ("agnostic_fedavg", "build"), ["nope"], "agnostic_fedavg.build"),
    ("agnostic_fedavg", None, (*AT, "model", "intt"), [1.0, 2.0], "agnostic_fedavg.experiments.toy.model"),
    ("agnostic_fedavg", None, (*AT, "train", "client_lr"), NAN, "agnostic_fedavg.experiments.toy.train.client_lr"),
    ("agnostic_fedavg", None, (*AC, "data", "classes"), [0, 0, 6],
     "agnostic_fedavg.experiments.fmnist_client.data.classes"),
    ("agnostic_fedavg", None, (*AC, "data", "classes"), [0, 2, 16],
     "agnostic_fedavg.experiments.fmnist_client.data.classes[2]"),
    ("agnostic_fedavg", None, (*AC, "data", "domains"), ["../../etc", "pullover", "shirt"],
     "agnostic_fedavg.experiments.fmnist_client.data.domains[0]"),
    ("agnostic_fedavg", None, (*AC, "algorithms", "agnostic_fedavg", "kind"), "fedsgd",
     "agnostic_fedavg.experiments.fmnist_client.algorithms.agnostic_fedavg"),
    ("agnostic_fedavg", None, (*AC, "algorithms", "agnostic_fedavg", "lambda_lr"), -1,
     "agnostic_fedavg.experiments.fmnist_client.algorithms.agnostic_fedavg.lambda_lr"),
    ("agnostic_fedavg", None, (*AC, "algorithms", "agnostic_fedavg", "domain_lr"), 0.1,  # renamed lambda_lr
     "agnostic_fedavg.experiments.fmnist_client.algorithms.agnostic_fedavg"),
    ("agnostic_fedavg", None, (*AC, "algorithms", "agnostic_fedavg", "init_domain_weights"), [0.5, 0.3, 0.1],
     "agnostic_fedavg.experiments.fmnist_client.algorithms.agnostic_fedavg.init_domain_weights"),
    ("agnostic_fedavg", None, (*AC, "algorithms", "fedavg_uniform", "target"), "nowhere",
     "agnostic_fedavg.experiments.fmnist_client.algorithms.fedavg_uniform"),
    ("agnostic_fedavg", None, (*AC, "kind"), "regression", "agnostic_fedavg.experiments.fmnist_client.kind"),
    ("agnostic_fedavg", None, (*AC, "train", "rounds"), 0, "agnostic_fedavg.experiments.fmnist_client.train.rounds"),
    ("agnostic_fedavg", None, (*AC, "train", "server_optimizer"), "lamb",
     "agnostic_fedavg.experiments.fmnist_client.train.server_optimizer"),
    ("agnostic_fedavg", None, (*AC, "seeds"), 0, "agnostic_fedavg.experiments.fmnist_client.seeds"),
    ("agnostic_fedavg", None, ("agnostic_fedavg", "outputs", "fmnist", "experiments"), ["nope"],
     "agnostic_fedavg.outputs.fmnist"),
    ("agnostic_fedavg", None, ("agnostic_fedavg", "outputs", "fmnist", "kind"), "pie",
     "agnostic_fedavg.outputs.fmnist"),
    # quick.yaml overlay
    ("quick", "quick", (*AA, "seeds"), 0, "afl.experiments.afl_adult.seeds"),
    ("quick", "quick", (*AF, "train", "rounds"), NAN, "afl.experiments.afl_fashion_mnist.train.rounds"),
    ("quick", "quick", (*FP, "train", "rounds"), NAN, "fedpals.experiments.fedpals_fmnist_c3.train.rounds"),
    ("quick", "quick", ("fedpals", "tables", "fedpals_table1", "rows", 0, "experiment"), "fedpals_fmnist_c9",
     "fedpals.tables.fedpals_table1"),
    ("quick", "quick", ("fedpals", "figures", "fedpals_fig7", "experiments"), ["fedpals_fmnist_c9"],
     "fedpals.figures.fedpals_fig7"),
    ("quick", "quick", (*WM, "train", "log_every"), 0, "wafl.experiments.mnist.train.log_every"),
    ("quick", "quick", ("wafl", "figures", "fig4"), ["nope"], "wafl.figures.fig4"),
    ("quick", "quick", (*MD, "heads", "dann", "rounds"), 0, "fedmm.tasks.digits.heads.dann.rounds"),
    ("quick", "quick", ("fedmm", "figures", "fig4", "heads"), ["gan"], "fedmm.figures.fig4.heads[0]"),
    ("quick", "quick", ("agnostic_fedavg", "experiments", "ptb_lm", "model", "hiden"), 32,
     "agnostic_fedavg.experiments.ptb_lm.model"),
    ("quick", "quick", ("agnostic_fedavg", "experiments", "ptb_lm", "data", "vocab_size"), 0,
     "agnostic_fedavg.experiments.ptb_lm.data.vocab_size"),
]


def test_the_shipped_configurations_are_valid():
    for overlay in (None, "quick"):
        validate_workflow_config(copy.deepcopy(base(overlay)), ROOT / "workflow" / "schemas")


def test_there_are_at_least_100_cases_over_every_section():
    assert len(CASES) >= 100
    assert {c[0] for c in CASES} == {"config", "datasets", "afl", "wafl", "fedpals", "fedmm", "agnostic_fedavg",
                                     "quick"}


def case_id(case) -> str:
    """A test id for a malformed-config case, the same in every process (pytest-xdist workers compare their ids):
    object addresses are left out of the value's repr."""
    value = re.sub(r" at 0x[0-9a-f]+", "", repr(case[3]))
    return f"{case[0]}:{'.'.join(map(str, case[2]))}={value}"[:90]


@pytest.mark.parametrize(("section", "overlay", "path", "value", "where"), CASES,
                         ids=[case_id(c) for c in CASES])
def test_malformed_config_is_refused_naming_its_key_path(section, overlay, path, value, where):
    cfg = edited(overlay, path, value)
    with pytest.raises(ConfigError) as err:
        validate_workflow_config(cfg, ROOT / "workflow" / "schemas")
    msg = str(err.value)
    assert msg.startswith("config error at ") and "Error:" not in msg, msg
    named = msg.removeprefix("config error at ").split(": ", 1)[0]
    assert named == where or named.startswith(where), msg


def test_strict_schema_closes_listed_objects_only():
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}},
                                               "free": {"type": "object"}},
              "allOf": [{"if": {"properties": {"a": {}}}, "then": {"properties": {"a": {"required": ["b"]}}}}]}
    s = strict_schema(schema)
    assert s["unevaluatedProperties"] is False and s["properties"]["a"]["unevaluatedProperties"] is False
    assert "unevaluatedProperties" not in s["properties"]["free"]
    assert "unevaluatedProperties" not in s["allOf"][0]["then"]
    assert "unevaluatedProperties" not in schema  # the input is not modified
