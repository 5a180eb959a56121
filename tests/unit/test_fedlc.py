"""FedLC (Zhang et al. 2022, §4): calibrated local losses against a NumPy computation, τ = 0 is FedAvg."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedshift.algorithms import registry
from fedshift.core.base import ClientData
from fedshift.core.rng import RoundKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import CLASSES, local_gd, to_numpy, toy_clients, toy_model, toy_params  # noqa: E402

LR, EPOCHS, TAU = 0.3, 3, 0.7


def skewed_clients() -> list[ClientData]:
    """Three clients, label-skewed: client 0 lacks class 2, client 1 holds class 0 once, client 2 all classes."""
    base = toy_clients([5, 6, 6])
    labels = [[0, 0, 1, 1, 1], [0, 1, 1, 2, 2, 2], [0, 1, 2, 0, 1, 2]]
    return [ClientData(c.client_id, c.x, torch.as_tensor(y), 0) for c, y in zip(base, labels, strict=True)]


def reference(tau: float, rounds: int) -> dict[str, np.ndarray]:
    """§4 by hand: logits − τ n_{i,y}^{−1/4} (absent class: +∞ shift), E full-batch steps, n_i average."""
    clients = skewed_clients()
    w = to_numpy(toy_params())
    n = np.array([c.num_examples for c in clients], dtype=float)
    for _ in range(rounds):
        finals = []
        for c in clients:
            counts = np.bincount(c.y.numpy(), minlength=CLASSES).astype(float)
            with np.errstate(divide="ignore"):
                shift = tau * np.where(counts > 0, counts, 0.0) ** -0.25 if tau else np.zeros(CLASSES)
            finals.append(local_gd(w, c, LR, EPOCHS, logit_shift=shift)[-1])
        w = {k: sum(n[i] * finals[i][k] for i in range(3)) / n.sum() for k in w}
    return w


def run(tau: float, rounds: int, seed: int = 0):
    alg = registry.get("fedlc").build(toy_model(), tau=tau, clients_per_round=3, local_epochs=EPOCHS, batch_size=10,
                                      client_lr=LR)
    clients = skewed_clients()
    state = alg.init(toy_params())
    for t in range(rounds):
        state, _ = alg.apply(state, clients, RoundKey(seed, t))
    return state


def test_three_rounds_match_calibrated_training_by_hand():
    state = run(TAU, 3)
    want = reference(TAU, 3)
    for k, v in want.items():
        np.testing.assert_allclose(state.params[k].numpy(), v, rtol=1e-10, atol=1e-12)
        assert np.isfinite(state.params[k].numpy()).all()   # the −∞ logit of an absent class leaves no NaN


def test_tau_zero_is_fedavg_and_tau_changes_the_model():
    fedlc = run(0.0, 2)
    alg = registry.get("fedavg").build(toy_model(), clients_per_round=3, local_epochs=EPOCHS, batch_size=10,
                                       client_lr=LR, path="sequential")
    state = alg.init(toy_params())
    for t in range(2):
        state, _ = alg.apply(state, skewed_clients(), RoundKey(0, t))
    for k in state.params:
        np.testing.assert_allclose(fedlc.params[k].numpy(), state.params[k].numpy(), rtol=1e-11, atol=1e-13)
    assert not np.allclose(run(TAU, 2).params["linear.bias"].numpy(), state.params["linear.bias"].numpy(), atol=1e-4)


def test_same_seed_same_result_and_bad_tau():
    a, b = run(TAU, 2, seed=3), run(TAU, 2, seed=3)
    assert all(np.array_equal(a.params[k].numpy(), b.params[k].numpy()) for k in a.params)
    with pytest.raises(ValueError, match="tau"):
        registry.get("fedlc").build(toy_model(), tau=-0.1, clients_per_round=1, local_epochs=1, batch_size=1,
                                    client_lr=0.1)
