"""FedDyn (Acar et al. 2021, Algorithm 1) against a NumPy computation, with partial participation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedshift.algorithms import registry
from fedshift.algorithms.fedavg import sample_clients
from fedshift.core.rng import RoundKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import local_gd, to_numpy, toy_clients, toy_model, toy_params  # noqa: E402

SIZES = [4, 6, 5, 3]
LR, EPOCHS, ALPHA, PER_ROUND = 0.2, 3, 0.5, 2


def reference(rounds: int, seed: int = 0):
    """Algorithm 1 by hand: client objective L_k − ⟨g_k, θ⟩ + α/2‖θ − θ^{t−1}‖² by E full-batch GD steps."""
    clients = toy_clients(SIZES)
    theta = to_numpy(toy_params())
    h = {k: np.zeros_like(v) for k, v in theta.items()}
    g = [{k: np.zeros_like(v) for k, v in theta.items()} for _ in SIZES]
    for t in range(rounds):
        ids = sample_clients(RoundKey(seed, t), len(SIZES), PER_ROUND)   # the documented server draw
        new = {}
        for i in ids:
            def extra(w, i=i, theta=theta):
                return {k: -g[i][k] + ALPHA * (w[k] - theta[k]) for k in w}
            new[i] = local_gd(theta, clients[i], LR, EPOCHS, extra)[-1]
        for i in ids:
            g[i] = {k: g[i][k] - ALPHA * (new[i][k] - theta[k]) for k in theta}
        h = {k: h[k] - ALPHA / len(SIZES) * sum(new[i][k] - theta[k] for i in ids) for k in theta}
        theta = {k: np.mean([new[i][k] for i in ids], 0) - h[k] / ALPHA for k in theta}
    return theta, h, g


def run(rounds: int, seed: int = 0):
    alg = registry.get("feddyn").build(toy_model(), alpha=ALPHA, num_clients=len(SIZES), clients_per_round=PER_ROUND,
                                       local_epochs=EPOCHS, batch_size=10, client_lr=LR, path="sequential")
    clients = toy_clients(SIZES)
    state = alg.init(toy_params())
    for t in range(rounds):
        state, _ = alg.apply(state, clients, RoundKey(seed, t))
    return alg, state


@pytest.mark.parametrize("path", ["sequential", "batched"])
def test_four_rounds_match_algorithm_1_by_hand(path):
    alg = registry.get("feddyn").build(toy_model(), alpha=ALPHA, num_clients=len(SIZES), clients_per_round=PER_ROUND,
                                       local_epochs=EPOCHS, batch_size=10, client_lr=LR, path=path)
    clients = toy_clients(SIZES)
    state = alg.init(toy_params())
    for t in range(4):
        state, _ = alg.apply(state, clients, RoundKey(0, t))
    theta, h, g = reference(4)
    for k in theta:
        np.testing.assert_allclose(state.params[k].numpy(), theta[k], rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(state.h[k].numpy(), h[k], rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(state.client_grads[k].numpy(), np.stack([gi[k] for gi in g]), rtol=1e-9,
                                   atol=1e-11)
    # a client never sampled keeps ∇L_k = 0; a sampled one does not; the server model is not the plain average
    seen = {i for t in range(4) for i in sample_clients(RoundKey(0, t), len(SIZES), PER_ROUND)}
    for i in range(len(SIZES)):
        assert (np.abs(g[i]["linear.weight"]).sum() > 0) == (i in seen)
    assert np.abs(h["linear.weight"]).sum() > 0


def test_same_seed_same_result_and_wrong_client_count():
    _, a = run(2, seed=7)
    _, b = run(2, seed=7)
    assert all(np.array_equal(a.params[k].numpy(), b.params[k].numpy()) for k in a.params)
    alg, _ = run(0)
    with pytest.raises(ValueError, match="built for 4 clients"):
        alg.apply(alg.init(toy_params()), toy_clients([3, 3]), RoundKey(0, 0))
