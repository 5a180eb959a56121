"""FedNova (Wang et al. 2020, §4) against a NumPy computation, on clients that take different numbers of steps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedshift.algorithms import registry
from fedshift.core.rng import RoundKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import local_minibatch_sgd, to_numpy, toy_clients, toy_model, toy_params  # noqa: E402

SIZES = [4, 9, 5]            # B = 3: τ_i = E·(2, 3, 2) local steps
LR, EPOCHS, B = 0.2, 2, 3


def reference(mu: float, rounds: int, seed: int = 0) -> dict[str, np.ndarray]:
    """§4 by hand: ‖a_i‖₁ = τ_i, or Σ_k (1 − ημ)^k with the proximal term, counted from the iterates."""
    clients = toy_clients(SIZES)
    x = to_numpy(toy_params())
    n = np.array(SIZES, dtype=float)
    p = n / n.sum()
    for t in range(rounds):
        def prox(w, x=x):
            return {k: mu * (w[k] - x[k]) for k in w}
        runs = [local_minibatch_sgd(x, c, LR, EPOCHS, B, RoundKey(seed, t), prox if mu else None) for c in clients]
        a1 = np.array([sum((1 - LR * mu) ** k for k in range(len(r))) for r in runs])   # ‖a_i‖₁ summed term by term
        tau_eff = (p * a1).sum()
        x = {k: x[k] - tau_eff * sum(p[i] * (x[k] - runs[i][-1][k]) / a1[i] for i in range(3)) for k in x}
    return x


def run(rounds: int, seed: int = 0, **kw):
    alg = registry.get("fednova").build(toy_model(), clients_per_round=3, local_epochs=EPOCHS, batch_size=B,
                                        client_lr=LR, path="sequential", **kw)
    clients = toy_clients(SIZES)
    state, diag = alg.init(toy_params()), None
    for t in range(rounds):
        state, diag = alg.apply(state, clients, RoundKey(seed, t))
    return state, diag


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_three_rounds_match_normalized_averaging_by_hand(mu):
    state, diag = run(3, prox_mu=mu)
    want = reference(mu, 3)
    for k, v in want.items():
        np.testing.assert_allclose(state.params[k].numpy(), v, rtol=1e-10, atol=1e-12)
    # τ_eff = Σ p_i ‖a_i‖₁ with τ = (4, 6, 4): plain SGD gives (4·4 + 9·6 + 5·4) / 18 = 5
    if mu == 0.0:
        assert float(diag["tau_eff"]) == pytest.approx(5.0)


def test_differs_from_fedavg_when_step_counts_differ_and_equals_it_when_they_do_not():
    def fedavg(sizes, batch):
        alg = registry.get("fedavg").build(toy_model(), clients_per_round=3, local_epochs=EPOCHS, batch_size=batch,
                                           client_lr=LR, path="sequential")
        return alg.apply(alg.init(toy_params()), toy_clients(sizes), RoundKey(0, 0))[0].params

    nova = run(1)[0].params
    assert not np.allclose(nova["linear.weight"].numpy(), fedavg(SIZES, B)["linear.weight"].numpy(), atol=1e-6)
    alg = registry.get("fednova").build(toy_model(), clients_per_round=3, local_epochs=EPOCHS, batch_size=3,
                                        client_lr=LR, path="sequential")
    same = alg.apply(alg.init(toy_params()), toy_clients([6, 6, 6]), RoundKey(0, 0))[0].params
    for k, v in fedavg([6, 6, 6], 3).items():
        np.testing.assert_allclose(same[k].numpy(), v.numpy(), rtol=1e-10, atol=1e-13)


def test_same_seed_same_result_and_bad_mu():
    a, b = run(2, seed=5)[0], run(2, seed=5)[0]
    assert all(np.array_equal(a.params[k].numpy(), b.params[k].numpy()) for k in a.params)
    with pytest.raises(ValueError, match=r"client_lr \* prox_mu must be in \[0, 1\)"):
        registry.get("fednova").build(toy_model(), clients_per_round=1, local_epochs=1, batch_size=1,
                                      client_lr=0.5, prox_mu=2.0)
