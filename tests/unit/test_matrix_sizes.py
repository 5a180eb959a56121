"""Issue 50, item 2: clients of unequal sizes in the shift matrix (quantity skew, and label skew with drawn sizes).

NIID-Bench's quantity skew (Li et al. 2022, §III-C) draws the clients' shares q ~ Dir(β); the matrix's
``sizes: {law: dirichlet, beta, min_size}`` does, on the no-shift kind (i.i.d. or Dirichlet labels). There FedNova's
normalisation acts: it must differ from FedAvg, which it equals (up to float rounding) when sizes are equal.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_shift_matrix import SECTION, SHIFTS, _fake, train_cell

from fedshift.shifts import shift_of
from fedshift.shifts.none import client_sizes

LAW = {"law": "dirichlet", "beta": 0.5, "min_size": 10}
QUANTITY = SHIFTS["none_iid"] | {"sizes": LAW}
LABEL_SIZES = SHIFTS["none_dirichlet"] | {"sizes": LAW}


@pytest.fixture(scope="module")
def data():
    return {"fashion_mnist": _fake("fashion_mnist")}


def test_client_sizes_follow_the_stated_law():
    sizes = [client_sizes(LAW, 6, 300, seed) for seed in range(20)]
    assert all(sum(s) == 300 and min(s) >= 10 for s in sizes)
    assert all(len(set(s)) > 1 for s in sizes)                          # unequal, every seed
    assert sizes[0] == client_sizes(LAW, 6, 300, 0) and sizes[0] != sizes[1]
    # a smaller β gives more unequal sizes (the Dirichlet's concentration), over seeds
    spread = {b: np.mean([np.std(client_sizes(LAW | {"beta": b}, 6, 300, s)) for s in range(50)]) for b in (0.3, 5.0)}
    assert spread[0.3] > 2 * spread[5.0]
    with pytest.raises(ValueError, match="min_size"):
        client_sizes(LAW | {"min_size": 60}, 6, 300, 0)
    with pytest.raises(ValueError, match="unknown law"):
        client_sizes({"law": "zipf", "beta": 1.0}, 6, 300, 0)


def test_quantity_skew_and_label_skew_columns_give_unequal_clients(data):
    for params in (QUANTITY, LABEL_SIZES):
        part = shift_of("q", params).partition(data, 2)
        got = [len(c.indices) for c in part.clients]
        assert got == part.info["sizes"] and len(set(got)) > 1, params["split"]
        rows = part.rows("clients")
        assert len(rows) == sum(got) and not rows & part.rows("validation")
    # i.i.d. labels under quantity skew alone; label skew under the Dirichlet split
    y = data["fashion_mnist"]["y_train"].numpy()
    iid = shift_of("q", QUANTITY).partition(data, 2)
    skew = shift_of("l", LABEL_SIZES).partition(data, 2)

    def spread(part):  # mean total-variation distance of the clients' label marginals from the pooled one
        pooled = np.bincount(np.concatenate([y[c.indices] for c in part.clients]), minlength=10) / sum(
            len(c.indices) for c in part.clients)
        return np.mean([0.5 * np.abs(np.bincount(y[c.indices], minlength=10) / len(c.indices) - pooled).sum()
                        for c in part.clients])

    assert spread(skew) > 2 * spread(iid)
    # equal sizes without ``sizes``: the draw of the column before issue 50
    assert [len(c.indices) for c in shift_of("n", SHIFTS["none_iid"]).partition(data, 2).clients] == [50] * 6


def test_fednova_differs_from_fedavg_under_unequal_sizes_and_equals_it_under_equal_sizes(data):
    """FedNova divides each client's update by its τ_i = ⌈n_i / B⌉ steps and rescales by τ_eff: with unequal sizes
    its model differs from FedAvg's by far more than float rounding; with equal sizes it is FedAvg up to the order of
    the floating-point operations (the identity its module states)."""
    train = copy.deepcopy(SECTION["train"]) | {"rounds": 5}

    def both(params):
        inst = shift_of("s", params).instance(data, 1)
        out = {}
        for name in ("fedavg", "fednova"):
            ((p, _),) = train_cell(name, inst, 1, model="logreg", train=train, fixed={}, grid=[{}],
                                         device="cpu")
            out[name] = p["linear.weight"]
        return out, inst

    unequal, inst = both(QUANTITY)
    assert len({c.num_examples for c in inst.clients}) > 1
    gap = float((unequal["fednova"] - unequal["fedavg"]).abs().max())
    equal, _ = both(SHIFTS["none_iid"])
    rounding = float((equal["fednova"] - equal["fedavg"]).abs().max())
    assert rounding < 1e-5 and gap > 1e-3 and gap > 100 * rounding
    torch.testing.assert_close(equal["fednova"], equal["fedavg"], rtol=0, atol=1e-5)
