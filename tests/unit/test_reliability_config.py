"""Issue 39 (reliability), part 1: the configurations the issue found accepted are refused before any job.

Every case edits one key of the merged configuration exactly as an edit of that file would (the helpers of
``test_config_validation``) and calls :func:`fedshift.validation.validate_workflow_config`; the message must name
the offending key path (not the mapping around it, nor a list of every valid key). A few cases also run
``snakemake -n`` on an overlay: the workflow exits non-zero with the key path, no job is scheduled and nothing is
written under ``results/``.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_config_validation import CASES as BASE_CASES
from test_config_validation import DEL, base, case_id, edited

from fedshift import validation
from fedshift.algorithms import registry
from fedshift.errors import ConfigError
from fedshift.validation import UPPER_BOUNDS, check_yaml_file, validate_workflow_config

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "workflow" / "schemas"
SM = ("shift_matrix",)
SH = ("shift_matrix", "shifts")


def _nine(values: list) -> list:
    """A matrix grid of the configured grid_size (9, issue 50): ``values`` then its last value repeated."""
    return values + [values[-1]] * (9 - len(values))
AA = ("afl", "experiments", "afl_adult")
AD = ("afl", "defaults")
WM = ("wafl", "experiments", "mnist")
FP = ("fedpals", "experiments", "fedpals_fmnist_c3")
FD = ("fedpals", "defaults")
MD = ("fedmm", "tasks", "digits")
AC = ("agnostic_fedavg", "experiments", "fmnist_client")
AE = ("agnostic_fedavg", "experiments", "emnist")
AL = ("agnostic_fedavg", "experiments", "afl_lm")
C0 = ("claims", "afl", 0)
BIG = 10**12


def _claims_copy(cfg):
    return copy.deepcopy(cfg["claims"]["afl"])


# (section, overlay, edited key path, new value or DEL (a callable gets the config), key path the message names)
CASES = [
    # absurd counts (upper bounds, validation.UPPER_BOUNDS)
    ("afl", None, (*AA, "train", "rounds"), BIG, "afl.experiments.afl_adult.train.rounds"),
    ("wafl", None, (*WM, "train", "rounds"), BIG, "wafl.experiments.mnist.train.rounds"),
    ("fedmm", None, (*MD, "train", "rounds"), BIG, "fedmm.tasks.digits.train.rounds"),
    ("fedpals", None, (*FD, "train", "rounds"), BIG, "fedpals.defaults.train.rounds"),
    ("agnostic_fedavg", None, (*AC, "train", "rounds"), BIG, "agnostic_fedavg.experiments.fmnist_client.train.rounds"),
    ("shift_matrix", None, (*SM, "train", "rounds"), BIG, "shift_matrix.train.rounds"),
    ("afl", None, (*AA, "seeds"), 10**6, "afl.experiments.afl_adult.seeds"),
    ("afl", None, (*AA, "train", "select", "rounds"), [1000, BIG], "afl.experiments.afl_adult.train.select.rounds[1]"),
    ("afl", None, (*AA, "train", "select", "client_lr"), [0.01, 1e6],
     "afl.experiments.afl_adult.train.select.client_lr[1]"),
    ("fedpals", None, (*FD, "train", "client_lr"), 1.0e30, "fedpals.defaults.train.client_lr"),
    ("shift_matrix", None, (*SH, "none_iid", "clients"), 10**7, "shift_matrix.shifts.none_iid.clients"),
    ("shift_matrix", None, (*SM, "resources", "mem_mb"), 10**9, "shift_matrix.resources.mem_mb"),
    ("shift_matrix", None, (*SM, "seeds"), 10**5, "shift_matrix.seeds"),
    ("config", None, ("threads_per_job",), 10**6, "threads_per_job"),
    ("config", None, ("download", "retries"), 10**4, "download.retries"),
    ("config", None, ("download", "timeout_s"), 1e9, "download.timeout_s"),
    ("config", None, ("budget",), {"max_rounds": BIG}, "budget.max_rounds"),
    # free-form dictionaries: optimiser keyword dictionaries
    ("afl", None, (*AA, "train", "optimizer_kwargs"), {"initial_accumulator_valu": 0.1},
     "afl.experiments.afl_adult.train.optimizer_kwargs"),
    ("afl", None, (*AA, "train", "optimizer_kwargs"), {"momentum": 0.9},  # adagrad has none
     "afl.experiments.afl_adult.train.optimizer_kwargs.momentum"),
    ("afl", None, (*AA, "train", "optimizer_kwargs"), {"eps": -1.0},
     "afl.experiments.afl_adult.train.optimizer_kwargs.eps"),
    ("afl", None, (*AA, "train", "optimizer_kwargs"), "fast", "afl.experiments.afl_adult.train.optimizer_kwargs"),
    ("agnostic_fedavg", None, (*AE, "train", "server_optimizer_kwargs"), {"beta1": 0.9, "beta22": 0.99},
     "agnostic_fedavg.experiments.emnist.train.server_optimizer_kwargs"),
    ("agnostic_fedavg", None, (*AE, "train", "server_optimizer_kwargs"), {"beta1": 1.5},
     "agnostic_fedavg.experiments.emnist.train.server_optimizer_kwargs.beta1"),
    ("agnostic_fedavg", None, (*AE, "train", "server_optimizer_kwargs"), {"momentum": 0.9},  # adam has none
     "agnostic_fedavg.experiments.emnist.train.server_optimizer_kwargs.momentum"),
    ("agnostic_fedavg", None, (*AL, "train", "server_optimizer_kwargs"), {"momentum": 0.9, "nesterov": "yes"},
     "agnostic_fedavg.experiments.afl_lm.train.server_optimizer_kwargs.nesterov"),
    ("agnostic_fedavg", None, (*AL, "train", "server_optimizer_kwargs"), {"beta1": 0.9},  # sgd has none
     "agnostic_fedavg.experiments.afl_lm.train.server_optimizer_kwargs.beta1"),
    # free-form dictionaries: the matrix's grids and fixed settings (registry.hparam_schema)
    ("shift_matrix", None, (*SM, "grids", "fedprox"), _nine([{"muu": 0.1}, {"mu": 0.1}]),
     "shift_matrix.grids.fedprox[0]"),
    ("shift_matrix", None, (*SM, "grids", "fedprox"), _nine([{"mu": -0.1}, {"mu": 0.1}]),
     "shift_matrix.grids.fedprox[0].mu"),
    ("shift_matrix", None, (*SM, "grids", "fedprox"), _nine([{"mu": "big"}, {"mu": 0.1}]),
     "shift_matrix.grids.fedprox[0].mu"),
    ("shift_matrix", None, (*SM, "grids", "fedprox"), _nine([{"mu": 0.1, "squared": 1}, {"mu": 0.1}]),
     "shift_matrix.grids.fedprox[0].squared"),
    ("shift_matrix", None, (*SM, "grids", "wafl"), _nine([{"gama": 1.0}, {"gamma": 10.0}]),
     "shift_matrix.grids.wafl[0]"),
    ("shift_matrix", None, (*SM, "grids", "fedpals"), _nine([{"lam": -1.0}, {"ess_fraction": 0.5}]),
     "shift_matrix.grids.fedpals[0].lam"),
    ("shift_matrix", None, (*SM, "grids", "fedpals"), _nine([{"lam": 0.0}, {"ess_fraction": 1.5}]),
     "shift_matrix.grids.fedpals[1].ess_fraction"),
    ("shift_matrix", None, (*SM, "grids", "fedpals"), _nine([{"lam": 0.0}, {"ess_fractoin": 0.5}]),
     "shift_matrix.grids.fedpals[1]"),
    ("shift_matrix", None, (*SM, "grids", "fedmm"), _nine([{"mu": "x"}, {"mu": [2.0, 2.0]}]),
     "shift_matrix.grids.fedmm[0].mu"),
    ("shift_matrix", None, (*SM, "grids", "afl"), _nine([{"lambda_lr": -0.01}, {"lambda_lr": 0.1}]),
     "shift_matrix.grids.afl[0].lambda_lr"),
    ("shift_matrix", None, (*SM, "grids", "fedavg_sgda"), _nine([{"nu": -0.1}, {"nu": 1.0}]),
     "shift_matrix.grids.fedavg_sgda[0].nu"),
    ("shift_matrix", None, (*SM, "grids", "default"), _nine([{"client_lr": 0.05, "mu": 0.1}, {"client_lr": 0.15}]),
     "shift_matrix.grids.default[0]"),
    ("shift_matrix", None, (*SM, "grids", "default"), _nine([{"client_lr": 1e6}, {"client_lr": 0.15}]),
     "shift_matrix.grids.default[0].client_lr"),
    ("shift_matrix", None, (*SM, "fixed", "wafl"), {"inner_lr": 1.0, "inner_steps": 5, "step_rule": "stable",
                                                     "inner_step": 3}, "shift_matrix.fixed.wafl"),
    ("shift_matrix", None, (*SM, "fixed", "wafl"), {"inner_lr": 1.0, "inner_steps": 2.5},
     "shift_matrix.fixed.wafl.inner_steps"),
    ("shift_matrix", None, (*SM, "fixed", "fedpgm"), {"step": -0.02, "steps": 5}, "shift_matrix.fixed.fedpgm.step"),
    ("shift_matrix", None, (*SM, "fixed", "fedpgm"), {"step": 0.02, "steps": 2.5}, "shift_matrix.fixed.fedpgm.steps"),
    ("shift_matrix", None, (*SM, "fixed", "afl"), {"w_gradient": "perdomain", "init_lambda": 3},
     "shift_matrix.fixed.afl.init_lambda"),
    ("shift_matrix", None, (*SM, "fixed", "agnostic_fedavg"), {"window_size": 5, "windowsize": 3},
     "shift_matrix.fixed.agnostic_fedavg"),
    ("shift_matrix", None, (*SM, "fixed", "fedmm"), {"nu": 1.0, "eta3": -1.0}, "shift_matrix.fixed.fedmm.eta3"),
    ("shift_matrix", None, (*SM, "fixed", "fedprox_sgda"), {"nu": 1.0, "loss_fn": "mse"},
     "shift_matrix.fixed.fedprox_sgda"),
    ("shift_matrix", None, (*SM, "model_fixed"), {"cnn2": {"fedprox": {"muu": 1.0}}},
     "shift_matrix.model_fixed.cnn2.fedprox"),
    # cross-key consistency
    ("fedpals", None, (*FP, "train"), {"clients_per_round": 50},
     "fedpals.experiments.fedpals_fmnist_c3.train.clients_per_round"),
    ("fedpals", None, (*FD, "train", "clients_per_round"), 10, "fedpals.experiments."),  # 9 training clients
    ("shift_matrix", None, (*SM, "train", "clients_per_round"), 50, "shift_matrix.train.clients_per_round"),
    ("shift_matrix", None, (*SM, "model_train"), {"cnn2": {"clients_per_round": 30}},
     "shift_matrix.model_train.cnn2.clients_per_round"),
    ("shift_matrix", None, (*SM, "grids", "default"), [{"client_lr": 0.05, "clients_per_round": 21},
                                                        {"client_lr": 0.15}],
     "shift_matrix.grids.default[0].clients_per_round"),
    ("shift_matrix", None, (*SM, "grids", "fedprox"), {"client_lr": [0.1, 0.3, 1.0], "mu": [0.01],
                                                        "clients_per_round": [10, 10, 21]},
     "shift_matrix.grids.fedprox.clients_per_round[2]"),  # a product grid's values, too
    ("shift_matrix", None, (*SH, "mixture", "clients_per_domain"), [12, 4],
     "shift_matrix.shifts.mixture.clients_per_domain"),
    ("shift_matrix", None, (*SM, "baseline"), "fedavgg", "shift_matrix.baseline"),
    ("shift_matrix", None, (*SM, "algorithms"), ["fedprox", "wafl"], "shift_matrix.baseline"),
    # a bad value inside one shift (a conditional schema) is named, not its shift
    ("shift_matrix", None, (*SH, "label", "labels_per_client"), -3, "shift_matrix.shifts.label.labels_per_client"),
    ("shift_matrix", None, (*SH, "adversarial", "fractions"), [0.0, 1.4],
     "shift_matrix.shifts.adversarial.fractions[1]"),
    ("shift_matrix", None, (*SH, "none_iid", "dataset"), "cifar100", "shift_matrix.shifts.none_iid.dataset"),
    ("shift_matrix", None, (*SH, "adversarial", "pgd"), {"attack": "ce", "eps": 0.1, "step": 0.01, "steps": 0},
     "shift_matrix.shifts.adversarial.pgd.steps"),
    ("shift_matrix", None, (*SH, "adversarial", "pgd"), {"attack": "apgd", "eps": 0.1, "steps": 0},
     "shift_matrix.shifts.adversarial.pgd.steps"),
    ("shift_matrix", None, (*SH, "adversarial", "pgd"), {"attack": "ce", "eps": 0.1, "step": 0.01},
     "shift_matrix.shifts.adversarial.pgd"),
    # the step belongs to the cross-entropy PGD: required with it, refused with APGD (which sets its own)
    ("shift_matrix", None, (*SH, "adversarial", "pgd"), {"attack": "ce", "eps": 0.1, "steps": 5},
     "shift_matrix.shifts.adversarial.pgd"),
    ("shift_matrix", None, (*SH, "adversarial", "pgd"), {"eps": 0.1, "step": 0.02, "steps": 5},
     "shift_matrix.shifts.adversarial.pgd"),
    ("shift_matrix", None, (*SH, "adversarial", "pgd", "attack"), "fgsm",
     "shift_matrix.shifts.adversarial.pgd.attack"),
    ("shift_matrix", None, (*SH, "adversarial", "pgd", "targets"), -1,
     "shift_matrix.shifts.adversarial.pgd.targets"),
    ("shift_matrix", None, (*SH, "adversarial", "pgd"), {"attack": "ce", "eps": 0.1, "step": 0.02, "steps": 5,
                                                          "targets": 3}, "shift_matrix.shifts.adversarial.pgd"),
    ("shift_matrix", None, (*SH, "domain_usps", "placement"), "all", "shift_matrix.shifts.domain_usps.placement"),
    ("shift_matrix", None, (*SH, "none_dirichlet", "beta"), -1, "shift_matrix.shifts.none_dirichlet.beta"),
    ("shift_matrix", None, (*SH, "mixture", "domains"), ["mnist", "svhn", "mnist_m"],
     "shift_matrix.shifts.mixture.domains[1]"),
    ("shift_matrix", None, (*SH, "mixture", "samples_per_client"), 0, "shift_matrix.shifts.mixture.samples_per_client"),
    ("shift_matrix", None, (*SH, "domain_mnist_m", "test_size"), "all", "shift_matrix.shifts.domain_mnist_m.test_size"),
    ("shift_matrix", None, (*SH, "none_iid", "clientz"), 3, "shift_matrix.shifts.none_iid"),
    ("shift_matrix", None, (*SH, "label", "kind"), "labels", "shift_matrix.shifts.label.kind"),
    # inside a oneOf, the branch closest to the value is reported
    ("fedmm", None, (*MD, "network"), {"kind": "digits", "conv_layers": 4, "task_hidden": [100],
                                       "domain_hidden": [100]}, "fedmm.tasks.digits.network.conv_layers"),
    ("afl", None, (*AD, "algorithms", "afl", "init_lambda"), "random", "afl.defaults.algorithms.afl.init_lambda"),
    ("shift_matrix", None, (*SM, "model"), ["logreg", "cnn3"], "shift_matrix.model[1]"),
    ("fedpals", None, (*FP, "label_shift"), {"kind": "sparsity", "labels_per_client": -3, "target_coverage": "covered"},
     "fedpals.experiments.fedpals_fmnist_c3.label_shift.labels_per_client"),
    # the claims section
    ("claims", None, (*C0, "test", "value"), "zero", "claims.afl[0].test.value"),
    ("claims", None, (*C0, "test", "tolerance"), -1, "claims.afl[0].test.tolerance"),
    ("claims", None, (*C0, "test", "op"), "bigger", "claims.afl[0].test.op"),
    ("claims", None, (*C0, "test", "valu"), 0, "claims.afl[0].test"),
    ("claims", None, ("claims", "alf"), _claims_copy, "claims.alf"),
    ("claims", None, ("claims", "shift_matrixx"), [], "claims.shift_matrixx"),
    ("claims", None, (*C0, "quantity", "table"), "../../../etc/passwd", "claims.afl[0].quantity.table"),
    ("claims", None, (*C0, "quantity", "table"), "results/tables/../../../etc/passwd", "claims.afl[0].quantity.table"),
    ("claims", None, (*C0, "quantity", "table"), "/etc/passwd", "claims.afl[0].quantity.table"),
    ("claims", None, (*C0, "quantity", "table"), "results/runs/afl/x.csv", "claims.afl[0].quantity.table"),
    ("claims", None, (*C0, "paper_value"), [1.92], "claims.afl[0].paper_value"),
    ("claims", None, (*C0, "quantity", "scale"), "100", "claims.afl[0].quantity.scale"),
    ("claims", None, (*C0, "quantity", "a"), {}, "claims.afl[0].quantity.a"),
    ("claims", None, (*C0, "quantity", "std_ddof"), 2, "claims.afl[0].quantity.std_ddof"),
    ("claims", None, (*C0, "quantity", "pairby"), "seed", "claims.afl[0].quantity"),
    ("claims", None, (*C0, "exact"), "yes", "claims.afl[0].exact"),
    ("claims", None, (*C0, "extra"), 1, "claims.afl[0]"),
    ("claims", None, (*C0, "id"), DEL, "claims.afl[0]"),
    ("claims", None, (*C0, "id"), "has space", "claims.afl[0].id"),
    ("claims", None, ("claims", "afl", 1, "id"), lambda cfg: cfg["claims"]["afl"][0]["id"], "claims.afl[1].id"),
    ("claims", None, ("claims", "afl"), "all", "claims.afl"),
    # traversal in mirror_dir is a key error (not "the folder does not exist")
    ("datasets", None, ("datasets", "adult", "mirror_dir"), "../../etc", "datasets.adult.mirror_dir"),
    ("datasets", None, ("datasets", "adult", "mirror_dir"), "/etc", "datasets.adult.mirror_dir"),
    ("datasets", None, ("datasets", "adult", "mirror_dir"), "adult/../../x", "datasets.adult.mirror_dir"),
    ("datasets", None, ("datasets", "mnist", "mirror_dir"), "mnist\\..\\x", "datasets.mnist.mirror_dir"),
    # plain http without a pinned sha256 (trust on first use over an unauthenticated channel)
    ("datasets", None, ("datasets", "bsds500", "files", 0, "urls"), ["http://example.org/BSR_bsds500.tgz"],
     "datasets.bsds500.files[0].urls[0]"),
    ("datasets", None, ("datasets", "pacs", "files", 0, "urls"), ["https://a.org/p.tgz", "http://b.org/p.tgz"],
     "datasets.pacs.files[0].urls[1]"),
    ("datasets", None, ("datasets", "pacs", "files", 0, "allow_http"), "", "datasets.pacs.files[0].allow_http"),
    # non-negative step sizes everywhere, and partial overrides that stay wrong
    ("fedmm", None, (*MD, "fedmm"), {"mu": -1.0}, "fedmm.tasks.digits.fedmm.mu"),
    ("fedmm", None, (*MD, "fedmm"), {"muu": 1.0}, "fedmm.tasks.digits.fedmm"),
    ("wafl", None, (*WM, "train", "client_lr"), -0.1, "wafl.experiments.mnist.train.client_lr"),
    ("agnostic_fedavg", None, (*AC, "train", "server_lr"), -1.0,
     "agnostic_fedavg.experiments.fmnist_client.train.server_lr"),
]


def _apply(case):
    _, overlay, path, value, _ = case
    if callable(value):
        value = value(base(overlay))
    return edited(overlay, path, value)


def test_the_suite_holds_at_least_200_malformed_configs_over_every_section():
    assert len(CASES) + len(BASE_CASES) >= 200
    sections = {c[0] for c in CASES} | {c[0] for c in BASE_CASES}
    assert {"config", "datasets", "afl", "wafl", "fedpals", "fedmm", "agnostic_fedavg", "shift_matrix", "claims",
            "quick"} <= sections


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_malformed_config_is_refused_naming_the_offending_key(case):
    with pytest.raises(ConfigError) as err:
        validate_workflow_config(_apply(case), SCHEMAS)
    msg = str(err.value)
    assert msg.startswith("config error at ") and "Traceback" not in msg, msg
    named = msg.removeprefix("config error at ").split(": ", 1)[0]
    assert named == case[4] or named.startswith(case[4]), msg
    # a bad value inside a shift names the value, not "unknown key(s)" listing the shift's every key
    if case[2][:2] == SH and case[4].count(".") >= 3:
        assert "unknown key" not in msg, msg


@pytest.mark.parametrize("overlay", ["quick", "verdicts", "fedmm_medium", "wafl_official", "seeds_together",
                                     "experiments_together", "rehearsal"])
def test_every_shipped_overlay_stays_valid(overlay):
    """The bounds and cross-checks refuse nothing the project ships."""
    cfg = copy.deepcopy(base(None))
    from snakemake.utils import update_config

    update_config(cfg, yaml.safe_load((ROOT / "config" / f"{overlay}.yaml").read_text()))
    validate_workflow_config(cfg, SCHEMAS)


@pytest.mark.parametrize(("path", "value"), [
    ((*MD, "fedmm"), {"mu": 1.0}),                        # FedMM: the rest of the block from defaults
    ((*MD, "fedprox"), {"mu": 1.0}),
    ((*SM, "grids", "fedprox"), [{"mu": 0.001}] * 8 + [{"mu": 1.0, "squared": False}]),  # grid_size 9
    ((*SM, "fixed", "fedpgm"), {"step": 0.01, "steps": 1}),   # step 0 is refused: PGD needs a step > 0 (issue 49)
    ((*AE, "train", "server_optimizer_kwargs"), {"beta1": 0.0, "eps": 1e-3}),
    ((*AA, "train", "optimizer_kwargs"), {"initial_accumulator_value": 0.1}),
    (("datasets", "pacs", "files", 0, "urls"), ["http://b.org/p.tgz"]),  # with the opt-in below
    (("datasets", "mnist", "files", 0, "urls"), ["http://yann.lecun.com/x.gz"]),  # pinned: http is fine
])
def test_valid_edits_are_accepted(path, value):
    cfg = edited(None, path, value)
    if path[1] == "pacs":
        cfg["datasets"]["pacs"]["files"][0]["allow_http"] = "an internal mirror without TLS, pinned after a first fetch"
    validate_workflow_config(cfg, SCHEMAS)


def test_an_unknown_key_in_a_oneof_branch_names_that_branch_and_key():
    cfg = edited(None, (*MD, "network"), {"kind": "digits", "conv_layers": 2, "task_hidden": [100],
                                         "domain_hidden": [100], "dropout": 0.5})
    with pytest.raises(ConfigError) as err:
        validate_workflow_config(cfg, SCHEMAS)
    msg = str(err.value)
    assert msg.startswith("config error at fedmm.tasks.digits.network: unknown key(s)") and "'dropout'" in msg, msg
    assert "office" not in msg


def test_every_algorithm_has_a_closed_registry_schema():
    """``**kwargs`` factories (FedProx, FedPALS, WAFL's family) are covered: no algorithm accepts any key."""
    for name in registry.names():
        schema = validation.hparam_schema(name)
        assert schema["additionalProperties"] is False, name
    props = validation.hparam_schema("fedprox")["properties"]
    assert {"mu", "squared", "clients_per_round", "client_lr", "server_optimizer"} <= set(props)
    assert "prox_mu" not in props  # FedProx sets it itself
    assert {"gamma", "inner_lr", "eps", "steps"} <= set(validation.hparam_schema("wafl")["properties"])
    assert "kind" not in validation.hparam_schema("wafl")["properties"]  # fixed by the name


def test_upper_bounds_are_documented_and_above_every_shipped_value():
    for key, (bound, why) in UPPER_BOUNDS.items():
        assert bound > 0 and why, key


def test_claims_schema_ops_are_the_claims_module_tests():
    from fedshift.claims import TESTS

    schema = yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text())
    assert set(schema["$defs"]["claim"]["properties"]["test"]["properties"]["op"]["enum"]) == set(TESTS)


@pytest.mark.parametrize(("text", "where"), [
    ("scale: quick\nfoo:\n\t- 1\n", "line 3"),    # a tab
    ("scale: [quick\n", "line 2"),                 # an unclosed bracket
    ("- 1\n- 2\n", "top level"),                   # a list at the top level
])
def test_yaml_errors_name_the_file(tmp_path, text, where):
    bad = tmp_path / "overlay.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as err:
        check_yaml_file(bad)
    assert str(bad) in str(err.value) and where in str(err.value), err.value


def test_the_overlay_checker_names_a_broken_overlay(tmp_path, capsys):
    from fedshift.validation import main

    (tmp_path / "ok.yaml").write_text("scale: quick\n")
    (tmp_path / "bad.yaml").write_text("a:\n\t- 1\n")
    assert main([str(tmp_path / "ok.yaml")]) == 0
    assert main([str(tmp_path / "ok.yaml"), str(tmp_path / "bad.yaml")]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'bad.yaml'}, line 2 column 1" in err and "YAML indents with spaces only" in err


def test_yaml_check_accepts_every_shipped_file():
    for f in [*(ROOT / "config").glob("*.yaml"), *(ROOT / "config" / "papers").glob("*.yaml")]:
        assert isinstance(check_yaml_file(f), dict), f


def _snakemake(tmp_path, overlay_text, *extra):
    overlay = tmp_path / "bad.yaml"
    overlay.write_text(overlay_text)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    snakemake = Path(sys.executable).with_name("snakemake")
    return subprocess.run([str(snakemake), "-n", "--configfile", str(overlay), *extra], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("overlay", "where"), [
    ("afl:\n  experiments:\n    afl_adult:\n      train:\n        rounds: 1000000000000\n",
     "afl.experiments.afl_adult.train.rounds"),
    ("shift_matrix:\n  grids:\n    fedprox: [{muu: 0.1}" + ", {mu: 0.1}" * 8 + "]\n", "shift_matrix.grids.fedprox[0]"),
    # a declared range, a cross-knob range, a shift's protocol, a plug-in that exits on import
    ("shift_matrix:\n  grids:\n    qffl: [{q: 1.0e9}" + ", {q: 1.0}" * 8 + "]\n", "shift_matrix.grids.qffl[0].q"),
    ("shift_matrix:\n  fixed:\n    fednova: {prox_mu: 20.0}\n", "shift_matrix.fixed.fednova.prox_mu"),
    ("shift_matrix:\n  shifts:\n    generalization_mnist_m: {target: usps}\n",
     "shift_matrix.shifts.generalization_mnist_m.target"),
    ("algorithm_plugins: [{tmp}/exits_on_import.py]\n", "algorithm_plugins[0]"),
])
@pytest.mark.workflow  # Snakemake parses the whole workflow each time (seconds): the full run, not the unit loop
def test_snakemake_refuses_before_any_job(tmp_path, overlay, where):
    results = ROOT / "results"
    before = sorted(p.name for p in results.iterdir()) if results.exists() else []
    if "{tmp}" in overlay:  # a plug-in that ends the process on import (sys.exit(0) would exit the dry run with 0)
        (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(0)\n")
        overlay = overlay.format(tmp=tmp_path)
    out = _snakemake(tmp_path, overlay)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert f"fedshift: config error at {where}" in text, text[-2000:]
    assert "Job stats" not in text and "rule " not in text.split("fedshift: config error")[0][-500:], text[-2000:]
    assert (sorted(p.name for p in results.iterdir()) if results.exists() else []) == before
