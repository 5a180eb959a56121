"""The two added shifts (issue 36): federated domain generalisation (an unseen target domain) and feature shift
(a rotation per client; own and unseen transformations at test), on synthetic images of the real shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_shift_matrix import SHAPES, _disjoint, _fake

from fedshift.papers.shift_matrix import cells, rows
from fedshift.shifts import images, shift_of
from fedshift.shifts.feature import rotate

DG = {"kind": "generalization", "sources": ["mnist", "usps"], "target": "mnist_m", "clients_per_source": [3, 2],
      "samples_per_client": 40, "validation_per_source": 30, "test_size": 100}
FEAT = {"kind": "feature", "dataset": "mnist", "clients": 4, "samples_per_client": 40, "max_angle": 30,
        "validation_angle": 60, "test_angle": -60, "validation_per_client": 10, "validation_size": 30,
        "test_per_client": 20, "test_size": 50}


@pytest.fixture(scope="module")
def data():
    return {name: _fake(name) for name in SHAPES}


def test_generalization_never_shows_the_target_and_validates_on_sources(data):
    sh = shift_of("dg", DG)
    inst = sh.instance(data, 1)
    part = inst.partition
    _disjoint(part)
    assert [s.dataset for s in part.clients] == ["mnist"] * 3 + ["usps"] * 2
    assert {s.dataset for s in part.validation} == {"mnist", "usps"}            # held-out source rows only
    assert [(s.dataset, s.split) for s in part.test] == [("mnist_m", "test")] and not part.unlabelled
    assert inst.side == {"domain_ids": [0, 0, 0, 1, 1]} and sh.side_information == {"domain_ids"}
    assert sh.datasets() == ["mnist", "usps", "mnist_m"]
    assert sh.partition(data, 1).rows("clients") == part.rows("clients") != sh.partition(data, 2).rows("clients")
    # the DANN family needs unlabelled target data, which this shift never gives; AFL (domain ids) runs
    assert rows.cell_status("fedmm", sh, ["mu"], "cnn2").startswith("n/a: needs unlabelled_target")
    assert rows.cell_status("afl", sh, ["lambda_lr"], "logreg") is None
    with pytest.raises(ValueError, match="is a source domain"):
        shift_of("dg", DG | {"target": "usps"}).partition(data, 0)


def test_rotate_by_a_quarter_turn_is_rot90_and_zero_is_identity():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 784, generator=g, dtype=torch.float64)
    img = x.reshape(3, 28, 28)
    # counter-clockwise as displayed, as np.rot90 / torch.rot90(k=1); at 90° pixel centres land on pixel centres
    np.testing.assert_allclose(rotate(x, 90.0).reshape(3, 28, 28).numpy(), torch.rot90(img, 1, (1, 2)).numpy(),
                               atol=1e-12)
    assert torch.equal(rotate(x, 0.0), x)
    assert not torch.allclose(rotate(x, 30.0), x)


def test_feature_shift_rotates_each_client_and_scores_own_and_unseen_angles(data):
    sh = shift_of("feat", FEAT)
    inst = sh.instance(data, 3)
    part = inst.partition
    _disjoint(part)
    angles = part.info["angles"]
    assert len(angles) == 4 and all(abs(a) <= 30 for a in angles) and len(set(angles)) == 4
    assert angles != sh.partition(data, 4).info["angles"] and inst.side == {}
    for i, c in enumerate(inst.clients):
        raw = images(data["mnist"], "train", part.clients[i].indices)
        np.testing.assert_allclose(c.x.numpy(), rotate(raw, angles[i]).numpy(), atol=1e-6)
    for role, unseen in (("validation", 60), ("test", -60)):
        pop = getattr(inst, role)
        seg = getattr(part, role)
        assert [s.group for s in seg] == [0, 1, 2, 3, 4]
        raw = images(data["mnist"], seg[-1].split, seg[-1].indices)
        np.testing.assert_allclose(pop.x[pop.group == 4].numpy(), rotate(raw, unseen).numpy(), atol=1e-6)
        raw0 = images(data["mnist"], seg[0].split, seg[0].indices)
        np.testing.assert_allclose(pop.x[pop.group == 0].numpy(), rotate(raw0, angles[0]).numpy(), atol=1e-6)
    # the metric by hand: accuracy on group 4, and the mean of the four clients' accuracies
    module = cells.model_of("logreg", 28, 10)
    params = {k: v.detach() for k, v in module.named_parameters()}
    m = sh.metric(module, params, inst.test, role="test", seed=3)
    with torch.no_grad():
        ok = (module(inst.test.x).argmax(1) == inst.test.y).numpy()
    g = inst.test.group
    assert m["unseen_accuracy"] == pytest.approx(ok[g == 4].mean())
    assert m["own_accuracy"] == pytest.approx(np.mean([ok[g == k].mean() for k in range(4)]))
    assert sh.metrics()[0] == "unseen_accuracy"
    with pytest.raises(ValueError, match="not outside"):
        shift_of("feat", FEAT | {"test_angle": 20}).partition(data, 0)
