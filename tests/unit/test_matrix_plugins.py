"""Issue 50: an algorithm with its own training loop joins the shift matrix by itself.

``tests/toy_algorithm/toy_dann.py`` (a toy federated DANN with a gradient-reversal layer) declares on its one
``@register`` line what it needs (unlabelled target images), that it runs its own loop and through which hook, and
which model parts it needs (features and head). Switching it on by ``algorithm_plugins`` alone makes it a row of
the quick matrix: run where the shift and model allow, n/a elsewhere with the reason, trained on the common budget,
its keys validated — with no edit of the matrix.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml
from test_shift_matrix import SECTION, SHAPES, SHIFTS, _fake

from fedshift.algorithms import registry
from fedshift.contract import deep_merge, load_papers
from fedshift.papers.shift_matrix import paper as matrix_paper

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = str(ROOT / "tests/toy_algorithm/toy_dann.py")


def _quick_section() -> dict:
    """The quick matrix's section: config/papers/shift_matrix.yaml with config/quick.yaml's part over it."""
    paper = yaml.safe_load((ROOT / "config/papers/shift_matrix.yaml").read_text())["shift_matrix"]
    quick = yaml.safe_load((ROOT / "config/quick.yaml").read_text())["shift_matrix"]
    return deep_merge(paper, quick)


@pytest.fixture
def toy():
    """The plug-in loaded as the workflow loads ``algorithm_plugins``, unloaded after."""
    from fedshift import plugins

    yield
    plugins.unload(PLUGIN, registry.ALGORITHMS)
    assert "toy_dann" not in registry.ALGORITHMS


def _papers(section: dict, with_plugin: bool) -> matrix_paper.ShiftMatrixPaper:
    config = {"papers": {"shift_matrix": "fedshift.papers.shift_matrix.paper:ShiftMatrixPaper"},
              "shift_matrix": section} | ({"algorithm_plugins": [PLUGIN]} if with_plugin else {})
    return load_papers(config)["shift_matrix"]


def test_the_toy_own_loop_plugin_joins_the_quick_matrix_through_algorithm_plugins_alone(toy):
    section = _quick_section()
    without = _papers(copy.deepcopy(section), with_plugin=False)
    assert "toy_dann" not in without.algorithms()
    p = _papers(copy.deepcopy(section), with_plugin=True)
    p.validate()
    spec = registry.get("toy_dann")
    assert (spec.loop, spec.model_parts, spec.needs) == ("own", {"features", "head"}, {"unlabelled_target"})
    assert "toy_dann" in p.algorithms() and p.grid("toy_dann") == p.grid("fedavg") and len(p.grid("fedavg")) == 9
    runs = [r for r in p.runs() if r.run == "toy_dann"]
    domain_columns = {n for n, s in p.shifts.items() if "unlabelled_target" in s.side_information}
    assert domain_columns and {r.experiment for r in runs} == domain_columns
    assert all(list(r.hparams["models"]) == ["cnn2"] for r in runs)      # MLR has no feature extractor
    assert {r.seed for r in runs} == set(range(section["seeds"])) and all(r.algorithms == ("toy_dann",) for r in runs)
    na = p.outputs()[0].params["na"]
    assert na["logreg"]["toy_dann"]["domain_usps"].startswith("n/a: needs the model's features")
    assert na["cnn2"]["toy_dann"]["none_iid"].startswith("n/a: needs unlabelled_target")
    assert p.hparam_extras("toy_dann").keys() >= {"client_lr", "clients_per_round"}


def test_the_toy_plugin_trains_a_domain_cell_on_the_common_budget(toy, monkeypatch):
    """Its job trains the matrix's CNN through its own hook, from FedAvg's w₀, and gives another model than
    FedAvg's (the discriminator acts); the evaluation scores that CNN."""
    # one grid value for both rows: the two CNNs compared below differ in the method only (with two values each
    # row keeps the one better on validation, ties to the lower validation loss: not necessarily the same value)
    section = copy.deepcopy(SECTION) | {"model": ["logreg", "cnn2"], "model_train": {"cnn2": {"rounds": 2}},
                                        "active_shifts": ["domain_mnist_m"], "algorithms": ["fedavg", "toy_dann"],
                                        "grid_size": 1, "grids": {"default": [{"client_lr": 0.05}]}}
    p = _papers(section, with_plugin=True)
    p.validate()
    data = {n: _fake(n) for n in SHAPES}
    monkeypatch.setattr(matrix_paper, "load_images", lambda files: data)
    inputs = dict.fromkeys(p.shifts["domain_mnist_m"].datasets(), "-")
    runs = {r.run: r for r in p.runs() if r.seed == 0}
    assert list(runs["toy_dann"].hparams["models"]) == ["cnn2"]
    fits = {a: p.train(runs[a], inputs, device=torch.device("cpu"), checkpoint=None, fingerprint="")
            for a in ("fedavg", "toy_dann")}
    toy_params = fits["toy_dann"].artifacts["grid"]["cnn2/0"]
    base = fits["fedavg"].artifacts["grid"]["cnn2/0"]
    assert toy_params.keys() == base.keys() and all(torch.isfinite(v).all() for v in toy_params.values())
    assert not torch.allclose(toy_params["conv1.weight"], base["conv1.weight"])
    assert SHIFTS["domain_mnist_m"]["kind"] == "domain"
