"""q-FFL by q-FedAvg (Li et al. 2020, Algorithm 2, L = 1/η) against a NumPy computation of the algorithm."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedshift.algorithms import registry
from fedshift.core.rng import RoundKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import ce_loss_grad, local_gd, to_numpy, toy_clients, toy_model, toy_params  # noqa: E402

SIZES = [4, 6, 5]
LR, EPOCHS = 0.2, 3


def reference(q: float, rounds: int) -> dict[str, np.ndarray]:
    """Algorithm 2 by hand, every client selected, E full-batch GD steps, L = 1/η, F_k + 1e-10."""
    clients = toy_clients(SIZES)
    w = to_numpy(toy_params())
    L = 1 / LR
    for _ in range(rounds):
        num = {k: np.zeros_like(v) for k, v in w.items()}
        den = 0.0
        for c in clients:
            f = ce_loss_grad(w, c)[0] + 1e-10
            wbar = local_gd(w, c, LR, EPOCHS)[-1]
            dw = {k: L * (w[k] - wbar[k]) for k in w}
            for k in w:
                num[k] += f**q * dw[k]
            den += q * f ** (q - 1) * sum((v**2).sum() for v in dw.values()) + L * f**q
        w = {k: w[k] - num[k] / den for k in w}
    return w


def run(q: float, rounds: int, seed: int = 0):
    alg = registry.get("qffl").build(toy_model(), q=q, clients_per_round=3, local_epochs=EPOCHS, batch_size=10,
                                     client_lr=LR, path="sequential")
    clients = toy_clients(SIZES)
    state = alg.init(toy_params())
    diag = None
    for t in range(rounds):
        state, diag = alg.apply(state, clients, RoundKey(seed, t))
    return state, diag


@pytest.mark.parametrize("q", [0.5, 2.0])
def test_three_rounds_match_algorithm_2_computed_by_hand(q):
    state, diag = run(q, 3)
    want = reference(q, 3)
    for k, v in want.items():
        np.testing.assert_allclose(state.params[k].numpy(), v, rtol=1e-10, atol=1e-12)
    # the fairness weights F_k^q / Σ F_j^q differ from uniform: q > 0 tilts the step toward lossier clients
    w = diag["weights"].numpy()
    assert w.sum() == pytest.approx(1.0) and not np.allclose(w, 1 / 3, atol=1e-3)


def test_q_zero_is_the_uniform_average_of_the_local_models():
    state, _ = run(0.0, 1)
    clients = toy_clients(SIZES)
    w0 = to_numpy(toy_params())
    finals = [local_gd(w0, c, LR, EPOCHS)[-1] for c in clients]
    for k in w0:
        np.testing.assert_allclose(state.params[k].numpy(), np.mean([f[k] for f in finals], 0), rtol=1e-10)
    # and larger q moves the model elsewhere
    assert not np.allclose(run(2.0, 1)[0].params["linear.weight"].numpy(), state.params["linear.weight"].numpy())


def test_same_seed_same_result_and_bad_q():
    a, b = run(1.0, 2, seed=3)[0], run(1.0, 2, seed=3)[0]
    assert all(np.array_equal(a.params[k].numpy(), b.params[k].numpy()) for k in a.params)
    with pytest.raises(ValueError, match="q must be"):
        registry.get("qffl").build(toy_model(), q=-1.0, clients_per_round=1, local_epochs=1, batch_size=1,
                                   client_lr=0.1)
