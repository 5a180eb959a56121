"""FedAdagrad / FedYogi / FedAdam (Reddi et al. 2021, Algorithm 2) against a NumPy computation of the algorithm."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedshift.algorithms import registry
from fedshift.core.rng import RoundKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import local_gd, to_numpy, toy_clients, toy_model, toy_params  # noqa: E402

SIZES = [4, 6, 5]
LR, EPOCHS, ETA, B1, B2, TAU = 0.3, 2, 0.05, 0.9, 0.99, 1e-2


def reference(kind: str, rounds: int) -> dict[str, np.ndarray]:
    """Algorithm 2 by hand: every client sampled, E full-batch GD steps, n_i-weighted Δ_t, the kind's v_t."""
    clients = toy_clients(SIZES)
    x = to_numpy(toy_params())
    m = {k: np.zeros_like(v) for k, v in x.items()}
    v = {k: np.full_like(a, TAU**2) for k, a in x.items()}
    n = np.array(SIZES, dtype=float)
    for _ in range(rounds):
        finals = [local_gd(x, c, LR, EPOCHS)[-1] for c in clients]
        for k in x:
            delta = sum(n[i] * (finals[i][k] - x[k]) for i in range(3)) / n.sum()
            m[k] = B1 * m[k] + (1 - B1) * delta
            if kind == "adagrad":
                v[k] = v[k] + delta**2
            elif kind == "yogi":
                v[k] = v[k] - (1 - B2) * delta**2 * np.sign(v[k] - delta**2)
            else:
                v[k] = B2 * v[k] + (1 - B2) * delta**2
            x[k] = x[k] + ETA * m[k] / (np.sqrt(v[k]) + TAU)
    return x


def run(name: str, rounds: int, seed: int = 0):
    alg = registry.get(name).build(toy_model(), clients_per_round=3, local_epochs=EPOCHS, batch_size=10,
                                   client_lr=LR, server_lr=ETA, beta1=B1, beta2=B2, tau=TAU, path="sequential")
    clients = toy_clients(SIZES)
    state = alg.init(toy_params())
    for t in range(rounds):
        state, _ = alg.apply(state, clients, RoundKey(seed, t))
    return alg, state


@pytest.mark.parametrize("name,kind", [("fedadagrad", "adagrad"), ("fedyogi", "yogi"), ("fedadam", "adam")])
def test_three_rounds_match_algorithm_2_computed_by_hand(name, kind):
    alg, state = run(name, 3)
    want = reference(kind, 3)
    assert alg.name == name and state.round == 3
    for k, w in want.items():
        np.testing.assert_allclose(state.params[k].numpy(), w, rtol=1e-10, atol=1e-12)
    # the three second moments differ on this data: each kind is its own rule, not one shared
    others = {"adagrad", "yogi", "adam"} - {kind}
    for other in others:
        assert not np.allclose(reference(other, 3)["linear.weight"], want["linear.weight"], atol=1e-6)


def test_first_round_moves_every_coordinate_by_eta_sign_for_adam_when_tau_is_tiny():
    """With v_{−1} = τ² → 0, FedAdam's first step is η(1−β₁)Δ/(√(1−β₂)|Δ|): η(1−β₁)/√(1−β₂) · sign(Δ)."""
    alg = registry.get("fedadam").build(toy_model(), clients_per_round=3, local_epochs=1, batch_size=10,
                                        client_lr=LR, server_lr=ETA, tau=1e-12, path="sequential")
    clients = toy_clients(SIZES)
    p0 = toy_params()
    state, _ = alg.apply(alg.init(p0), clients, RoundKey(0, 0))
    step = {k: state.params[k].numpy() - p0[k].numpy() for k in p0}
    for s in step.values():
        np.testing.assert_allclose(np.abs(s), ETA * 0.1 / np.sqrt(0.01), rtol=1e-6)


def test_same_seed_same_result_and_names_fix_the_kind():
    _, a = run("fedyogi", 2, seed=4)
    _, b = run("fedyogi", 2, seed=4)
    for k in a.params:
        assert np.array_equal(a.params[k].numpy(), b.params[k].numpy())
    assert registry.get("fedyogi").fixed == {"kind": "yogi"} and "server_lr" in registry.get("fedadam").hparams
    with pytest.raises(ValueError, match="fixed"):
        registry.get("fedadam").build(toy_model(), kind="yogi", clients_per_round=1, local_epochs=1,
                                      batch_size=1, client_lr=0.1)
