"""The shift matrix (issue 21, fedshift.papers.shift_matrix): each shift's invariants, the n/a rule, a label-shift cell
against FedPALS's own pipeline, a plug-in algorithm appearing as a row, and the outputs' selection on validation.

Synthetic images with the real datasets' shapes (MNIST/Fashion-MNIST 28×28, USPS 16×16, MNIST-M 32×32 RGB) keep
this file at a few seconds; the workflow test runs the matrix on the real data."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from fedshift.algorithms import registry
from fedshift.core.metrics import attacked_clients
from fedshift.errors import ConfigError
from fedshift.papers.shift_matrix import cells, report, rows
from fedshift.papers.shift_matrix import paper as matrix_paper
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper
from fedshift.partition import label_marginals
from fedshift.shifts import images, shift_of
from fedshift.shifts.adversarial import fraction_id

SHAPES = {"mnist": ((28, 28), 1500, 400), "fashion_mnist": ((28, 28), 1500, 600), "usps": ((16, 16), 600, 300),
          "mnist_m": ((32, 32, 3), 600, 300)}


def _fake(name: str) -> dict:
    shape, n_train, n_test = SHAPES[name]
    g = torch.Generator().manual_seed(len(name))
    out = {"class_names": [str(k) for k in range(10)]}
    for split, n in (("train", n_train), ("test", n_test)):
        y = torch.arange(n) % 10
        x = torch.randint(0, 60, (n, *shape), generator=g, dtype=torch.uint8)
        x.view(n, -1)[torch.arange(n), y * 7] = 255  # a label-dependent bright pixel: learnable
        out[f"x_{split}"], out[f"y_{split}"] = x, y
    return out


@pytest.fixture(scope="module")
def data():
    return {name: _fake(name) for name in SHAPES}


SHIFTS = {
    "none_iid": {"kind": "none", "dataset": "fashion_mnist", "split": "iid", "clients": 6, "samples_per_client": 50,
                 "validation_size": 100, "test_size": 200},
    "none_dirichlet": {"kind": "none", "dataset": "fashion_mnist", "split": "dirichlet", "beta": 0.3, "clients": 6,
                       "samples_per_client": 50, "validation_size": 100, "test_size": 200},
    "label": {"kind": "label", "dataset": "fashion_mnist", "clients": 6, "labels_per_client": 3,
              "samples_per_label": 10, "validation_size": 30, "test_size": 200},
    "mixture": {"kind": "mixture", "domains": ["mnist", "usps", "mnist_m"], "clients_per_domain": [3, 1, 2],
                "samples_per_client": 40, "validation_per_domain": 50, "test_per_domain": 100},
    "adversarial": {"kind": "adversarial", "dataset": "mnist", "clients": 5, "beta": 0.5, "train_per_client": 40,
                    "validation_per_client": 10, "test_per_client": 20, "fractions": [0.0, 0.4, 0.8],
                    "pgd": {"attack": "apgd", "eps": 0.3, "steps": 5}},
    "domain_mnist_m": {"kind": "domain", "source": "mnist", "target": "mnist_m", "clients": 4,
                       "samples_per_client": 50, "unlabelled_size": 200, "placement": "spread",
                       "validation_size": 50, "test_size": 100},
}
SECTION = {"outputs": ["shift_matrix_table", "shift_matrix_figure", "shift_ranks"], "algorithms": "all",
           "baseline": "fedavg", "seeds": 2, "model": "logreg", "grid_size": 2,
           "train": {"rounds": 3, "clients_per_round": 3, "local_epochs": 1, "batch_size": 10, "client_lr": 0.1},
           "grids": {"default": [{"client_lr": 0.05}, {"client_lr": 0.2}], "fedprox": [{"mu": 0.01}, {"mu": 0.1}],
                     "fedpals": [{"lam": 0.0}, {"ess_fraction": 0.5}]},
           "shifts": SHIFTS}


def paper(section=None) -> ShiftMatrixPaper:
    return ShiftMatrixPaper({"shift_matrix": copy.deepcopy(section or SECTION)})


def train_cell(name, instance, seed, *, model, train, fixed, grid, device):
    """Each value of ``grid`` trained for ``train["rounds"]`` rounds on one seed of a cell, as one uninterrupted run.

    The cell's own pieces (``cells.setup_cell``: the algorithm, its w₀ and clients) through
    ``fedshift.core.training.run_training``, a loop apart from the cell's tuning: the reference that successive
    halving's survivor must equal (the jobs train through ``cells.successive_halving``). Per grid value
    ``(params, history)``.
    """
    from fedshift.core.training import run_training

    module = cells.model_of(model, instance.image_side, instance.num_labels).to(device)
    out = []
    for value in grid:
        alg, params0, clients = cells.setup_cell(name, module, instance, seed, train=train, fixed=fixed, value=value)
        result = run_training(alg, params0, clients, rounds=train["rounds"], seed=seed, log_every=train["rounds"])
        out.append((alg.eval_params(result.state), result.history))
    return out


def _disjoint(part, roles=("clients", "validation", "test", "unlabelled")):
    rows = {r: part.rows(r) for r in roles}
    for i, a in enumerate(roles):
        for b in roles[i + 1:]:
            assert not rows[a] & rows[b], (a, b)


def test_common_image_format(data):
    for name in SHAPES:
        x = images(data[name], "train", [0, 5, 9], 28)
        assert x.shape == (3, 784) and x.dtype == torch.float32 and 0 <= float(x.min()) and float(x.max()) <= 1
    assert torch.equal(images(data["mnist"], "test", [3]), data["mnist"]["x_test"][[3]].float().flatten(1) / 255)


def test_a_shifts_image_side_and_classes_come_from_the_data_registry(data):
    """The common format is read from fedshift.data.registry.FACTS, not assumed: the side of the shift's first
    dataset (USPS first: 16 × 16, MNIST-M resized to it) and its datasets' classes (a 62-class dataset gives a
    62-output model)."""
    from fedshift.data.registry import FACTS

    usps_first = shift_of("m", SHIFTS["mixture"] | {"domains": ["usps", "mnist", "mnist_m"]})
    assert usps_first.image_side == FACTS["usps"].image_shape[-1] == 16
    inst = usps_first.instance(data, 0)
    assert inst.image_side == 16 and inst.clients[0].x.shape[1] == 256 and inst.validation.x.shape[1] == 256
    assert shift_of("m", SHIFTS["mixture"]).instance(data, 0).clients[0].x.shape[1] == 784
    emnist = shift_of("e", SHIFTS["none_iid"] | {"dataset": "emnist_tff"})
    assert (emnist.image_side, emnist.num_labels) == (28, FACTS["emnist_tff"].num_classes) == (28, 62)
    assert cells.model_of("cnn2", 16, 62)(torch.zeros(2, 256)).shape == (2, 62)


@pytest.mark.parametrize("name", ["none_iid", "none_dirichlet"])
def test_no_shift_clients_validation_and_test_are_disjoint(data, name):
    sh = shift_of(name, SHIFTS[name])
    part = sh.partition(data, 3)
    _disjoint(part)
    assert [len(c.indices) for c in part.clients] == [50] * 6
    assert all(s.split == "train" for s in part.validation) and all(s.split == "test" for s in part.test)
    assert sh.side(data, part) == {} and sh.side_information == frozenset()
    assert part.rows("clients") == sh.partition(data, 3).rows("clients") != sh.partition(data, 4).rows("clients")


def test_label_shift_is_fedpals_draw_with_target_marginal(data):
    from fedshift.partition.label_shift import label_shift_partition

    sh = shift_of("label", SHIFTS["label"])
    part = sh.partition(data, 1)
    y_tr, y_te = data["fashion_mnist"]["y_train"].numpy(), data["fashion_mnist"]["y_test"].numpy()
    ref = label_shift_partition(sh.fedpals_experiment(), y_tr, y_te, 1)
    assert [c.indices.tolist() for c in part.clients] == ref["clients"]
    _disjoint(part)
    t = np.asarray(sh.side(data, part)["target_label_marginal"])
    # the target is drawn like a client (C labels, sparsity sampling) and validation = its training rows: marginal T
    assert (t > 0).sum() == 3
    np.testing.assert_allclose(label_marginals(y_tr, [part.validation[0].indices], 10)[0], t)
    np.testing.assert_allclose(label_marginals(y_te, [part.test[0].indices], 10)[0], t, atol=0.02)
    assert all((label_marginals(y_tr, [c.indices], 10)[0] > 0).sum() <= 3 for c in part.clients)


def test_mixture_shift_domain_ids_and_worst_domain_metric(data):
    sh = shift_of("mixture", SHIFTS["mixture"])
    inst = sh.instance(data, 0)
    _disjoint(inst.partition)
    ids = inst.side["domain_ids"]
    assert ids == [0, 0, 0, 1, 2, 2] == [c.domain for c in inst.clients]
    assert [s.dataset for s in inst.partition.clients] == [SHIFTS["mixture"]["domains"][k] for k in ids]
    assert sorted(np.unique(inst.test.group).tolist()) == [0, 1, 2]
    module = cells.model_of("logreg", 28, 10)
    params = {k: v.detach() for k, v in module.named_parameters()}
    m = sh.metric(module, params, inst.test, role="test", seed=0)
    per = [m[f"accuracy_{d}"] for d in SHIFTS["mixture"]["domains"]]
    assert m["worst_domain_accuracy"] == min(per) and m["average_accuracy"] == pytest.approx(np.mean(per))


@pytest.mark.parametrize("attack", ["apgd", "ce"])
def test_adversarial_shift_attacks_the_given_fraction_of_clients(data, attack):
    pgd = {"attack": "apgd", "eps": 0.3, "steps": 5} if attack == "apgd" else {"attack": "ce", "eps": 0.3,
                                                                                   "step": 0.1, "steps": 5}
    sh = shift_of("adversarial", dict(SHIFTS["adversarial"], pgd=pgd))
    inst = sh.instance(data, 2)
    _disjoint(inst.partition)
    assert {s.split for s in inst.partition.validation + inst.partition.test} == {"train"}  # held-out client rows
    assert sh.metrics() == ["accuracy_f0.8", "accuracy_f0.4", "accuracy_f0"]
    module = cells.model_of("logreg", 28, 10)
    (params, _), = train_cell("fedavg", inst, 2, model="logreg", train=SECTION["train"] | {"rounds": 20},
                                    fixed={}, grid=[{"client_lr": 0.5}], device="cpu")
    m = sh.metric(module, params, inst.test, role="test", seed=2)
    assert m[fraction_id(0.0)] >= m[fraction_id(0.4)] >= m[fraction_id(0.8)]
    assert m[fraction_id(0.0)] > m[fraction_id(0.8)]  # PGD at ε = 0.3 hurts
    # by hand: the attacked clients' rows perturbed, the others clean, accuracy over all rows; the attack runs on
    # the rows of the clients attacked at the largest f (4 of 5), APGD seeded by (seed, stream)
    from fedshift.algorithms.adversarial import pgd_linf
    from fedshift.algorithms.robustness import apgd_linf
    from fedshift.models import forward

    hit, every = attacked_clients(5, 0.4, 2, 0), attacked_clients(5, 0.8, 2, 0)
    assert len(hit) == 2 and set(hit) <= set(every)
    x, y = inst.test.x.clone(), inst.test.y
    rows = np.isin(inst.test.group, every)
    if attack == "apgd":
        moved = apgd_linf(module, params, x[rows], y[rows], eps=0.3, steps=5, seed=[2, 0])
    else:
        moved = pgd_linf(module, params, x[rows], y[rows], eps=0.3, step=0.1, steps=5)
    keep = np.isin(inst.test.group[rows], hit)
    x[np.flatnonzero(rows)[keep]] = moved[keep]
    with torch.no_grad():
        acc = float((forward(module, params, x).argmax(1) == y).double().mean())
    assert m[fraction_id(0.4)] == pytest.approx(acc, abs=1e-6)
    flat = dict(SHIFTS["adversarial"], pgd=dict(pgd, eps=0.0, steps=1))
    m0 = shift_of("adversarial", flat).metric(module, params, inst.test, role="test", seed=2)
    assert len(set(m0.values())) == 1  # ε = 0 moves nothing


def test_adversarial_shift_apgd_finds_at_least_what_ce_pgd_finds_and_names_bad_keys(data):
    inst = shift_of("adversarial", SHIFTS["adversarial"]).instance(data, 0)
    module = cells.model_of("logreg", 28, 10)
    (params, _), = train_cell("fedavg", inst, 0, model="logreg", train=SECTION["train"] | {"rounds": 20},
                                    fixed={}, grid=[{"client_lr": 0.5}], device="cpu")
    params = {k: 50 * v for k, v in params.items()}  # saturated: CE-PGD's gradient vanishes
    ce = {"attack": "ce", "eps": 0.1, "step": 0.02, "steps": 10}
    got = {a: shift_of("adversarial", dict(SHIFTS["adversarial"], pgd=p)).metric(module, params, inst.test,
                                                                                   role="test", seed=0)
           for a, p in (("ce", ce), ("apgd", {"attack": "apgd", "eps": 0.1, "steps": 10}))}
    assert got["apgd"][fraction_id(0.8)] < got["ce"][fraction_id(0.8)]
    assert got["apgd"][fraction_id(0.0)] == got["ce"][fraction_id(0.0)]  # f = 0: clean either way
    for bad, key in (({"attack": "ce", "eps": 0.1, "steps": 3}, "pgd.step"), (dict(ce, attack="fgsm"), "pgd.attack")):
        sh = shift_of("adversarial", dict(SHIFTS["adversarial"], pgd=bad))
        with pytest.raises(ValueError, match=f"shift_matrix.shifts.adversarial.{key}"):
            sh.metric(module, params, inst.test, role="test", seed=0)


@pytest.mark.parametrize("placement", ["spread", "one"])
def test_domain_shift_target_never_labelled_at_training(data, placement):
    sh = shift_of("domain_mnist_m", dict(SHIFTS["domain_mnist_m"], placement=placement))
    inst = sh.instance(data, 0)
    part = inst.partition
    _disjoint(part)
    assert {s.dataset for s in part.clients} == {"mnist"} and all(s.labelled for s in part.clients)
    assert {s.dataset for s in part.unlabelled} == {"mnist_m"} and not any(s.labelled for s in part.unlabelled)
    assert {s.dataset for s in part.validation + part.test} == {"mnist_m"}
    side = inst.side["unlabelled_target"]
    holders = [c for c, _ in side]
    assert holders == ([0, 1, 2, 3] if placement == "spread" else [0])
    assert all(isinstance(x, torch.Tensor) and x.shape[1] == 784 for _, x in side)
    assert sum(len(x) for _, x in side) == 200


def test_na_rule_reads_the_declarations_needs_loop_keywords_and_model_parts():
    none, label = shift_of("n", SHIFTS["none_iid"]), shift_of("l", SHIFTS["label"])
    mixture, domain = shift_of("m", SHIFTS["mixture"]), shift_of("d", SHIFTS["domain_mnist_m"])
    assert rows.cell_status("fedavg", none) is None and rows.cell_status("fedpals", label, ["lam"]) is None
    assert rows.cell_status("fedpals", none) == ("n/a: needs target_label_marginal, which the none shift does "
                                                 "not give")
    assert rows.cell_status("fedmm", mixture).startswith("n/a: needs unlabelled_target")
    # the DANN family declares model_parts=("features", "head"): the CNN has both, MLR a head only
    for name in ("fedmm", "fedavg_sgda", "fedprox_sgda", "fedsgda"):
        assert registry.get(name).model_parts == {"features", "head"} and registry.get(name).loop == "own"
        assert rows.cell_status(name, domain, ["nu", "mu"], "cnn2") is None
        assert rows.cell_status(name, domain, ["nu", "mu"], "logreg") == (
            "n/a: needs the model's features (register(..., model_parts=...)); model logreg has head only")
    # a required factory keyword no grid, fixed setting, common round, context or hook gives
    assert rows.cell_status("fedmm", domain, [], "cnn2") == ("n/a: its factory needs mu, which no grid value or "
                                                             "fixed setting gives")
    assert rows.cell_status("afl", mixture).startswith("n/a: its factory needs lambda_lr")
    assert rows.cell_status("afl", mixture, ["lambda_lr"], "logreg") is None
    # an own loop without a cell hook (FedBN) is n/a with the declaration named
    assert rows.cell_status("fedbn", none, [], "logreg").startswith("n/a: it trains through its own loop (loop='own'")
    assert registry.get("fedpals").needs == {"target_label_marginal"} and registry.get("fedavg").needs == set()
    # AgnosticFedAvg: domain ids only under the mixture shift; there, its own knobs must come from grid or fixed
    assert rows.cell_status("agnostic_fedavg", none).startswith("n/a: needs domain_ids")
    assert rows.cell_status("agnostic_fedavg", mixture).startswith("n/a: its factory needs lambda_lr, window_size")
    assert rows.cell_status("agnostic_fedavg", mixture, ["lambda_lr", "window_size"]) is None
    p = paper()
    runs = {(r.experiment, r.run) for r in p.runs()}
    assert ("label", "fedpals") in runs and ("none_iid", "fedpals") not in runs and ("mixture", "afl") not in runs
    assert ("domain_mnist_m", "fedmm") not in runs
    cnn = copy.deepcopy(SECTION) | {"model": "cnn2"}
    cnn["grids"] |= {"afl": [{"lambda_lr": 0.01}, {"lambda_lr": 0.1}], "fedmm": [{"nu": 0.1}, {"nu": 1.0}]}
    cnn["fixed"] = {"fedmm": {"mu": [2.0, 2.0]}}
    runs = {(r.experiment, r.run) for r in paper(cnn).runs()}
    assert {("mixture", "afl"), ("domain_mnist_m", "fedmm"), ("domain_mnist_m", "fedsgda")} <= runs
    assert ("mixture", "fedmm") not in runs
    spec = p.outputs()[0]
    assert spec.params["na"]["logreg"]["fedpals"]["none_iid"].startswith("n/a: needs target_label_marginal")
    assert spec.params["algorithms"][0] == "fedavg" and set(spec.params["algorithms"]) == set(registry.names())


def test_the_matrix_names_no_algorithm():
    """Issue 50: the matrix's modules hold no algorithm name (no name tables, no ``if name == ...`` branches); what
    a cell needs is read from the ``@register`` declarations. Every algorithm with its own loop declares a hook or
    is n/a, and every declared hook resolves to a function."""
    import ast
    from pathlib import Path

    folder = Path(cells.__file__).parent
    names = set(registry.names())
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in names - {"fedavg"}, (path.name, node.value)  # fedavg: only a doc example
    assert not (folder / "adapters.py").exists()
    for name in names:
        spec = registry.get(name)
        if spec.cell is not None:
            assert callable(rows.hook(name)), name


@pytest.fixture
def plugin():
    """tests/toy_algorithm's plug-in, loaded as the workflow loads ``algorithm_plugins``, unloaded after."""
    from pathlib import Path

    from fedshift import plugins

    target = str(Path(__file__).parents[2] / "tests/toy_algorithm/uniform_fedavg.py")
    yield registry.load_plugins([target])
    plugins.unload(target, registry.ALGORITHMS)
    assert "uniform_fedavg" not in registry.ALGORITHMS


def test_agnostic_fedavg_cell_trains_on_the_shifts_domain_ids(data):
    from fedshift.algorithms import agnostic_fedavg

    inst = shift_of("mixture", SHIFTS["mixture"]).instance(data, 0)
    dc = agnostic_fedavg.cell_domain_clients(inst.clients, inst.side["domain_ids"])
    assert dc.num_domains == 3 and dc.domain.tolist() == [d for c in inst.clients for d in [c.domain] * c.num_examples]
    # its α-scaled batch-sum objective is ≈ B / n_k of FedAvg's batch mean: the hook puts the step on FedAvg's scale
    module = cells.model_of("logreg", 28, 10)
    context = cells.cell_context(module, inst)
    alg, _, clients = cells.setup_cell("agnostic_fedavg", module, inst, 0, train=SECTION["train"],
                                       fixed={"window_size": 2}, value={"lambda_lr": 0.5})
    mean_n = sum(c.num_examples for c in inst.clients) / len(inst.clients)
    assert context.num_domains == 3 and context.num_clients == len(inst.clients)
    assert agnostic_fedavg.scaled_client_lr(0.1, [c.num_examples for c in inst.clients], 10) == pytest.approx(
        0.1 * mean_n / 10)
    assert clients.domain.tolist() == dc.domain.tolist()
    ((params, hist),) = train_cell("agnostic_fedavg", inst, 0, model="logreg", train=SECTION["train"],
                                        fixed={"window_size": 2}, grid=[{"lambda_lr": 0.5}], device="cpu")
    assert all(torch.isfinite(v).all() for v in params.values()) and len(hist) == 1
    # its FedAvg baseline on DomainClients is FedAvg
    ((base, _),) = train_cell("domain_fedavg", inst, 0, model="logreg", train=SECTION["train"], fixed={},
                                    grid=[{}], device="cpu")
    ((fedavg, _),) = train_cell("fedavg", inst, 0, model="logreg", train=SECTION["train"], fixed={},
                                      grid=[{}], device="cpu")
    for k in base:
        torch.testing.assert_close(base[k], fedavg[k])


def test_a_registered_plugin_algorithm_appears_in_the_matrix(plugin):
    p = paper()
    assert "uniform_fedavg" in p.algorithms()
    assert {r.experiment for r in p.runs() if r.run == "uniform_fedavg"} == set(SHIFTS)
    assert p.grid("uniform_fedavg") == SECTION["grids"]["default"]


def test_the_rehearsal_budget_caps_every_cells_rounds():
    p = ShiftMatrixPaper({"shift_matrix": copy.deepcopy(SECTION) | {"train": SECTION["train"] | {"rounds": 50}},
                          "budget": {"max_rounds": 2}})
    assert {r.hparams["models"]["logreg"]["rounds"] for r in p.runs()} == {2}
    assert {r.hparams["models"]["logreg"]["rounds"] for r in paper().runs()} == {3}


def test_unequal_grids_and_a_baseline_that_cannot_run_are_refused():
    bad = copy.deepcopy(SECTION)
    bad["grids"]["fedprox"] = [{"mu": 0.1}]
    with pytest.raises(ConfigError, match=r"shift_matrix\.grids\.fedprox: 1 values"):
        paper(bad).validate()
    bad = copy.deepcopy(SECTION) | {"baseline": "fedpals"}
    with pytest.raises(ConfigError, match=r"shift_matrix\.baseline: 'fedpals' does not run under shift none_iid"):
        paper(bad).validate()
    paper().validate()


def test_label_cell_equals_fedpals_own_pipeline(data, tmp_path):
    """FedAvg and FedPALS (λ = 0) on the label shift give the parameters FedPALS's own runner gives at the same
    partition, seed, model and round settings (its model selection checked only at the last round)."""
    from fedshift.io import write_json
    from fedshift.papers import fedpals as core  # its public names: config, data and fit

    torch.save(data["fashion_mnist"], tmp_path / "fmnist.pt")
    sh = shift_of("label", SHIFTS["label"])
    seed, tr = 1, {"rounds": 4, "clients_per_round": 6, "local_epochs": 1, "batch_size": 10, "client_lr": 0.1}
    write_json(tmp_path / "part.json", core.make_partition(sh.fedpals_experiment(),
                                                           data["fashion_mnist"]["y_train"].numpy(),
                                                           data["fashion_mnist"]["y_test"].numpy(), seed))
    section = {"experiments": {"eq": {**sh.fedpals_experiment(), "model": "logreg", "preprocess": {"scale": 255.0},
                                      "seeds": 1, "train": {**tr, "eval_every": 4, "checkpoint_every": 0},
                                      "algorithms": {"fedavg": {}, "fedpals": {"lambdas": [0], "ess_fractions": []}}}}}
    runs = core.resolved_runs(section, "eq")
    inst = sh.instance(data, seed)
    for alg, rid, value in (("fedavg", "fedavg", {}), ("fedpals", "fedpals~lam0", {"lam": 0.0})):
        fit = core.train_run(runs[rid], seed, prepared_path=tmp_path / "fmnist.pt", partition_path=tmp_path / "part.json",
                             device=torch.device("cpu"), checkpoint_path=None, fingerprint="")
        ((ours, _),) = train_cell(alg, inst, seed, model="logreg", train=tr, fixed={}, grid=[value],
                                        device="cpu")
        assert fit.params.keys() == ours.keys()
        for k in ours:
            torch.testing.assert_close(ours[k], fit.params[k], rtol=0, atol=0)


def test_train_evaluate_and_outputs_select_on_validation(data, tmp_path, monkeypatch):
    p = paper()
    spec = next(r for r in p.runs() if (r.experiment, r.run, r.seed) == ("mixture", "fedprox", 1))
    monkeypatch.setattr(matrix_paper, "load_images", lambda files: data)  # the prepared files, loaded once
    inputs = dict.fromkeys(p.shifts["mixture"].datasets(), "-")
    fit = p.train(spec, inputs, device=torch.device("cpu"), checkpoint=None, fingerprint="")
    assert set(fit.artifacts["grid"]) == {"logreg/0", "logreg/1"}
    best = fit.info["models"]["logreg"]["selected_grid"]
    assert best in (0, 1) and fit.artifacts["grid"][f"logreg/{1 - best}"] is None  # eliminated after rung 1
    assert fit.artifacts["tuning"]["logreg"]["rounds"][best] == 3
    torch.save(fit.artifacts, tmp_path / "artifacts.pt")
    rows = p.evaluate(spec, inputs, {"artifacts": str(tmp_path / "artifacts.pt")}, device=torch.device("cpu"))
    assert set(rows["role"]) == {"validation", "test", "tuning"} and set(rows["grid"]) == {-1, 0, 1}
    assert json.loads(rows["value_of"].iloc[0]) == {"mu": 0.01}
    survivor = rows[(rows["grid"] == best) & (rows["role"] != "tuning")]
    assert survivor["value"].notna().all() and (survivor["rounds"] == 3).all()
    out = rows[(rows["grid"] == 1 - best) & (rows["role"] == "validation")
               & (rows["metric"] == "worst_domain_accuracy")]
    assert out["rounds"].tolist() == [1] and out["value"].notna().all()   # its score at the rung it reached
    assert rows.loc[rows["role"] == "tuning", "value"].iloc[0] > 0
    # outputs: grid 1 wins validation but loses test; selection follows validation
    cols = [{"shift": "s", "metric": "acc", "label": "s: acc"}]
    recs = []
    for alg, shift_up in (("fedavg", 0.0), ("b", 0.1)):
        for seed in range(5):
            for g, (val, test) in enumerate(((0.5, 0.9), (0.6, 0.4))):
                for role, v in (("validation", val), ("test", test + shift_up + 0.01 * seed)):
                    recs.append({"shift": "s", "algorithm": alg, "seed": seed, "grid": g, "role": role,
                                 "metric": "acc", "value": v})
    chosen = report.selected(pd.DataFrame(recs), cols)
    assert (chosen["grid"] == 1).all()
    summ = report.summary(chosen, "fedavg").set_index("algorithm")
    assert summ.loc["b", "delta"] == pytest.approx(0.1) and summ.loc["b", "delta_ci"] == pytest.approx(0, abs=1e-9)
    assert summ.loc["b", "best"] and not summ.loc["b", "delta_crosses_zero"]
    params = {"columns": cols, "algorithms": ["fedavg", "b", "c"], "baseline": "fedavg",
              "na": {"c": {"s": "n/a: needs domain_ids, which the none shift does not give"}}}
    table = report.matrix_table(report.summary(chosen, "fedavg"), params)
    assert table.loc["c", "s: acc"].startswith("n/a: needs domain_ids")
    assert table.loc["b", "s: acc"] == "**52.0 ± 2.0 (Δ +10.0 ± 0.0)**"
    assert report.wins_markdown(report.summary(chosen, "fedavg"), params) == (
        "- **s: acc**: best b 52.0 ± 2.0; better than fedavg: b (Δ +10.0 ± 0.0); worse than fedavg: none")


def test_wins_lists_ties_and_both_directions_and_skips_empty_columns():
    rows = [("x", "fedavg", 0.50, 0.01, np.nan, np.nan, True), ("x", "up", 0.60, 0.02, 0.10, 0.03, False),
            ("x", "tie", 0.60, 0.05, 0.10, 0.20, True), ("x", "down", 0.40, 0.01, -0.10, 0.02, False),
            ("y", "fedavg", np.nan, np.nan, np.nan, np.nan, True)]
    summ = pd.DataFrame(rows, columns=["column", "algorithm", "mean", "ci", "delta", "delta_ci", "delta_crosses_zero"])
    summ["best"] = summ["mean"] == summ.groupby("column")["mean"].transform("max")
    params = {"columns": [{"label": "y"}, {"label": "x"}], "baseline": "fedavg"}
    assert report.wins_markdown(summ, params) == (
        "- **x**: best up 60.0 ± 2.0, tie 60.0 ± 5.0; better than fedavg: up (Δ +10.0 ± 3.0); "
        "worse than fedavg: down (Δ -10.0 ± 2.0)")
    assert report.wins_markdown(pd.DataFrame(), params) == ""  # no metrics: summary() gives a frame without columns


def test_afl_cell_equals_the_afl_papers_own_runner(data):
    """Stochastic-AFL's mixture cell is S steps of Fig. 3 per round on one client per domain, S set by the equal
    gradient budget, and gives the parameters the AFL paper's own builder gives for rounds × S steps."""
    from types import SimpleNamespace

    from fedshift.core.training import run_training
    from fedshift.models import init_params
    from fedshift.papers.afl import fit as afl_fit
    from fedshift.algorithms import afl

    inst = shift_of("mixture", SHIFTS["mixture"]).instance(data, 0)
    tr = SECTION["train"]
    steps = afl.steps_per_round(tr, [c.num_examples for c in inst.clients], 3)
    assert steps == 4  # ⌈3 clients · 1 epoch · 40 rows / (3 domains · 10 rows)⌉: FedAvg's 120 gradients a round
    domains = afl.domain_clients(inst.clients, inst.side["domain_ids"])
    assert [c.num_examples for c in domains] == [120, 40, 80]  # clients_per_domain [3, 1, 2] of 40 rows
    ((ours, _),) = train_cell("afl", inst, 2, model="logreg", train=tr, fixed={"w_gradient": "perdomain"},
                                    grid=[{"lambda_lr": 0.1}], device="cpu")
    hp = {"batch_size": tr["batch_size"], "client_lr": tr["client_lr"], "lambda_lr": 0.1, "optimizer": "sgd",
          "w_gradient": "perdomain", "lambda_gradient": "perdomain", "init_lambda": "uniform", "w_radius": None,
          "gamma": 0.0, "mu": 0.0, "average_iterates": True}
    module = cells.model_of("logreg", 28, 10)
    alg = afl_fit.build_algorithm({"hparams": hp}, module, SimpleNamespace(clients=domains,
                                                                            domain_names=["a", "b", "c"]))
    res = run_training(alg, init_params(module, 2), domains, rounds=tr["rounds"] * steps, seed=2, log_every=12)
    ref = alg.eval_params(res.state)
    for k in ours:
        torch.testing.assert_close(ours[k], ref[k], rtol=0, atol=0)
    ((fedavg, _),) = train_cell("fedavg", inst, 2, model="logreg", train=tr, fixed={}, grid=[{}], device="cpu")
    assert not torch.allclose(ours["linear.weight"], fedavg["linear.weight"])


def test_dann_cells_train_the_matrix_cnn_with_a_domain_discriminator(data):
    """The four DANN-family methods train cnn2's conv layers as the feature extractor and its classifier as the
    task head; their cells return cnn2 parameters, differ from FedAvg's, and ν (the discriminator's weight) acts."""
    from fedshift.algorithms import sgda

    inst = shift_of("domain_mnist_m", SHIFTS["domain_mnist_m"]).instance(data, 0)
    cnn = cells.model_of("cnn2", 28, 10)
    net, names = sgda.dann_network(cnn)
    x = inst.clients[0].x[:4]
    torch.testing.assert_close(net(x), cnn(x))  # the same classifier: features = cnn2's conv part
    assert set(names.values()) == {k for k, _ in cnn.named_parameters()}
    assert {k for k, _ in net.named_parameters()} - set(names) == {k for k, _ in net.named_parameters()
                                                                   if k.startswith("adversary.")} != set()
    clients = sgda.adaptation_clients(inst)
    assert [c.num_target for c in clients] == [50] * 4 and all(c.num_source == 50 for c in clients)
    tr = SECTION["train"] | {"rounds": 2}
    ((fedavg, _),) = train_cell("fedavg", inst, 0, model="cnn2", train=tr, fixed={}, grid=[{}], device="cpu")
    fixed = {"fedmm": {"mu": (2.0, 2.0)}, "fedprox_sgda": {"mu": 2.0}}
    for name in ("fedmm", "fedavg_sgda", "fedprox_sgda", "fedsgda"):
        out = train_cell(name, inst, 0, model="cnn2", train=tr, fixed=fixed.get(name, {}),
                               grid=[{"nu": 0.0}, {"nu": 1.0}], device="cpu")
        (p0, hist), (p1, _) = out
        assert p0.keys() == fedavg.keys() and all(torch.isfinite(v).all() for v in p1.values())
        assert not torch.allclose(p0["conv1.weight"], p1["conv1.weight"]), name  # ν moves the features


def test_two_models_train_in_one_job_and_give_one_matrix_each(data, tmp_path, monkeypatch):
    """``model: [logreg, cnn2]``: a cell's job trains every model it can (the DANN family only the CNN), with the
    model's own round (``model_train``); the outputs write one matrix per model, the first at the usual paths."""
    section = copy.deepcopy(SECTION) | {"model": ["logreg", "cnn2"], "model_train": {"cnn2": {"rounds": 1}},
                                        "active_shifts": ["domain_mnist_m"], "algorithms": ["fedavg", "fedmm"]}
    section["grids"]["fedmm"] = [{"nu": 0.1}, {"nu": 1.0}]
    section["fixed"] = {"fedmm": {"mu": [2.0, 2.0]}}
    p = paper(section)
    p.validate()
    runs = {r.run: r for r in p.runs() if r.seed == 0}
    assert runs["fedavg"].hparams["models"] == {"logreg": SECTION["train"], "cnn2": SECTION["train"] | {"rounds": 1}}
    assert list(runs["fedmm"].hparams["models"]) == ["cnn2"]
    with pytest.raises(ConfigError, match=r"shift_matrix\.model_train\.cnn2: not a model"):
        paper(section | {"model": "logreg"}).validate()
    monkeypatch.setattr(matrix_paper, "load_images", lambda files: data)  # the prepared files, loaded once
    inputs = dict.fromkeys(p.shifts["domain_mnist_m"].datasets(), "-")
    metric_files = []
    for alg in ("fedavg", "fedmm"):
        fit = p.train(runs[alg], inputs, device=torch.device("cpu"), checkpoint=None, fingerprint="")
        assert set(fit.info["models"]) == set(runs[alg].hparams["models"])
        assert fit.info["rounds"] == sum(t["rounds"] for t in runs[alg].hparams["models"].values())
        torch.save(fit.artifacts, tmp_path / f"{alg}.pt")
        rows = p.evaluate(runs[alg], inputs, {"artifacts": str(tmp_path / f"{alg}.pt")}, device=torch.device("cpu"))
        best = {m: fit.info["models"][m]["selected_grid"] for m in fit.info["models"]}
        kept = rows[[g == best[m] for m, g in zip(rows["model"], rows["grid"], strict=True)]]
        assert set(rows["model"]) == set(runs[alg].hparams["models"]) and kept["value"].notna().all()
        rows.to_csv(tmp_path / f"{alg}.csv", index=False)
        metric_files.append(str(tmp_path / f"{alg}.csv"))
    spec = p.outputs()[0]
    assert spec.files["md"].endswith("shift_matrix.md") and spec.files["md_cnn2"].endswith("shift_matrix_cnn2.md")
    files = {k: str(tmp_path / f"out_{k}.{k.split('_')[0]}") for k in spec.files}
    p.make_output(spec, metric_files, files)
    mlr, cnn = (tmp_path / "out_md.md").read_text(), (tmp_path / "out_md_cnn2.md").read_text()
    assert "n/a: needs the model's features" in mlr
    assert "n/a" not in cnn and "fedmm" in cnn


@pytest.mark.parametrize(("clients_per_round", "local_steps"), [(4, 5), (2, 2)])
def test_fedmm_cell_equals_the_fedmm_papers_own_builder(data, clients_per_round, local_steps):
    """FedMM's domain cell is the algorithm FedMM's own pipeline builds (``papers.fedmm.fit.build_algorithm``: same
    network, batch split by the client's rows, η's, μ, ν, η₃) on every client in every round (Algorithm 1), trained
    from the same w₀ (equal up to the order of the server's average). With clients_per_round = N its local steps are
    FedAvg's M = 50 rows / B = 5; with 2 of the 4 clients per round it still trains all 4, with M' = round(5 · 2 / 4)
    = 2 local steps (its hook's full participation: the duals of a subset do not cancel)."""
    from fedshift.algorithms import sgda
    from fedshift.core.training import run_training
    from fedshift.papers.fedmm import fit

    inst = shift_of("domain_mnist_m", SHIFTS["domain_mnist_m"]).instance(data, 0)
    tr = SECTION["train"] | {"rounds": 2, "clients_per_round": clients_per_round}
    value = {"mu": [2.0, 2.0], "nu": 1.0, "eta3": 1.0, "eta3_decay": 1.05, "eta3_every": 100}
    ((ours, _),) = train_cell("fedmm", inst, 3, model="cnn2", train=tr, fixed={}, grid=[value], device="cpu")
    net, names = sgda.dann_network(cells.model_of("cnn2", 28, 10))
    _, params0, clients = cells.setup_cell("fedmm", cells.model_of("cnn2", 28, 10), inst, 3, train=tr, fixed={},
                                           value=value)
    resolved = {"optimizer": "fedmm", "nu": 1.0, "train": {"local_steps": local_steps, "batch_size": 10,
                                                          "client_lr": 0.1,
                                                          "client_lr_adversary": 0.1, "batch_split": "client_rows"},
                "optimizer_settings": {"mu": 2.0, "mu_adversary": 2.0, "eta3": 1.0, "eta3_decay": 1.05,
                                       "eta3_every": 100}}
    alg = fit.build_algorithm(resolved, net, [c.client_id for c in clients])
    res = run_training(alg, params0, clients, rounds=2, seed=3, log_every=2)
    ref = sgda.cnn_params(alg.eval_params(res.state), names)
    for k in ours:
        torch.testing.assert_close(ours[k], ref[k], rtol=1e-5, atol=1e-6)



def test_a_dann_cell_hashes_the_modules_its_hook_runs():
    """A cell hook lives in its algorithm's module, so the code hash of a minimax cell's job (the closure of FedMM's
    module) counts what the hook runs: FedAvg's client sampling and the SGDA module."""
    from fedshift.algorithms.registry import algorithm_modules
    from fedshift.codehash import import_closure

    closure = import_closure([algorithm_modules()["fedmm"]])
    assert {"fedshift.algorithms.fedavg", "fedshift.algorithms.sgda"} <= closure


def test_the_runs_of_a_cell_name_its_algorithm_alone():
    """The wiring: every cell's RunSpec.algorithms (the code hash's algorithm list) is its own name."""
    section = copy.deepcopy(SECTION) | {"model": "cnn2", "active_shifts": ["domain_mnist_m"],
                                        "algorithms": ["fedavg", "fedmm"]}
    section["grids"] = section["grids"] | {"fedmm": [{"mu": [2.0, 2.0]}, {"mu": [0.2, 0.2]}]}
    runs = {r.run: r.algorithms for r in paper(section).runs()}
    assert runs == {"fedavg": ("fedavg",), "fedmm": ("fedmm",)}


def test_a_key_no_cell_takes_is_refused_before_any_job():
    """grids / fixed / model_fixed keys are checked by generic validation against what the algorithm's cell takes
    (factory keywords, the common round, the keys its cell hook reads such as ν: ``ShiftMatrixPaper.hparam_extras``),
    naming the key path; keys fixed by the name are refused."""
    from fedshift.validation import check_algorithm_entries

    def validate(section):
        p = paper(section)
        p.validate()
        check_algorithm_entries("shift_matrix", section, p)

    ok = copy.deepcopy(SECTION) | {"fixed": {"fedmm": {"nu": 1.0, "eta3": 1.0}}}
    validate(ok)
    assert paper().hparam_extras("fedmm")["nu"] == {"type": "number", "minimum": 0}
    assert "nu" not in paper().hparam_extras("fedavg") and "client_lr" in paper().hparam_extras("default")
    for section, where in [
        (copy.deepcopy(SECTION) | {"fixed": {"fedmm": {"etaa3": 1.0}}},
         r"shift_matrix\.fixed\.fedmm\.etaa3: unknown key.*'etaa3'"),
        (copy.deepcopy(SECTION) | {"grids": SECTION["grids"] | {"afl": [{"lambda_lr": 0.1}, {"lr_lamda": 0.1}]}},
         r"shift_matrix\.grids\.afl\[1\]\.lr_lamda: unknown key.*'lr_lamda'"),
        (copy.deepcopy(SECTION) | {"grids": SECTION["grids"] | {"default": [{"client_lr": 0.1}, {"mu": 0.1}]}},
         r"shift_matrix\.grids\.default\[1\]\.mu: unknown key.*'mu'"),
        (copy.deepcopy(SECTION) | {"fixed": {"fedpgm": {"kind": "wafl"}}}, r"shift_matrix\.fixed\.fedpgm\.kind: .*'kind'"),
        (copy.deepcopy(SECTION) | {"fixed": {"fedmm": {"nu": -1.0}}}, r"shift_matrix\.fixed\.fedmm\.nu"),
    ]:
        with pytest.raises(ConfigError, match=where):
            validate(section)


def test_the_ranking_orders_each_shift_by_its_primary_metric_and_groups_the_na_methods_by_reason():
    """The Markdown a reader sees: one table per shift, rows by the primary metric's mean (highest first), every
    metric of the shift beside it, and the methods without a value in one line per reason."""
    rows = [("s: f0.8", "fedavg", 0.30, 0.05, np.nan, np.nan, True), ("s: f0.8", "a", 0.60, 0.04, 0.30, 0.10, False),
            ("s: f0.8", "b", 0.20, 0.03, -0.10, 0.05, False), ("s: f0", "fedavg", 0.90, 0.01, np.nan, np.nan, True),
            ("s: f0", "a", 0.80, 0.02, -0.10, 0.02, False), ("s: f0", "b", 0.95, 0.01, 0.05, 0.01, False),
            ("t: acc", "fedavg", 0.70, 0.02, np.nan, np.nan, True)]
    summ = pd.DataFrame(rows, columns=["column", "algorithm", "mean", "ci", "delta", "delta_ci", "delta_crosses_zero"])
    summ["best"] = summ["mean"] == summ.groupby("column")["mean"].transform("max")
    why = "n/a: needs domain_ids, which the t shift does not give"
    params = {"columns": [{"shift": "s", "label": "s: f0.8"}, {"shift": "s", "label": "s: f0"},
                          {"shift": "t", "label": "t: acc"}], "baseline": "fedavg",
              "algorithms": ["fedavg", "a", "b", "c"], "na": {"a": {"t": why}, "c": {"s": "n/a: own loop", "t": why}}}
    md = report.ranking_markdown(summ, params)
    s_part, t_part = md.split("**t**")
    assert "**s** (ranked by f0.8; Δ against fedavg in points)" in s_part and "| rank | algorithm | f0.8 | f0 |" in md
    ranked = [line.split("|")[2].strip() for line in s_part.splitlines() if re.match(r"\| \d", line)]
    assert ranked == ["a", "fedavg", "b"]  # by f0.8, although b leads under f0
    assert "| 1 | a | **60.0 ± 4.0 (Δ +30.0 ± 10.0)** | 80.0 ± 2.0 (Δ -10.0 ± 2.0) |" in s_part
    assert "- c: n/a: own loop" in s_part
    assert f"- a, c: {why}" in t_part and "- b: no value (—)" in t_part  # b ran nowhere in t and has no reason
