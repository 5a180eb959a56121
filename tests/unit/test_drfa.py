"""DRFA (Deng et al. 2020, Algorithm 1) against a NumPy computation: λ-weighted draws, τ local steps, the random
snapshot t', the uniform loss draws and the projected ascent on λ."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fedshift.algorithms import registry
from fedshift.algorithms.fedavg import SERVER_STREAM
from fedshift.core.rng import RoundKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import ce_loss_grad, local_gd, to_numpy, toy_clients, toy_model, toy_params  # noqa: E402

SIZES = [4, 6, 5, 3]
N, M, TAU, LR, GAMMA, B = 4, 3, 4, 0.2, 0.05, 10   # B >= n_i: every local step and loss batch is the whole client


def simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the simplex by the sort rule (Duchi et al. 2008), written here independently."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1
    rho = np.nonzero(u - css / np.arange(1, len(v) + 1) > 0)[0][-1]
    return np.maximum(v - css[rho] / (rho + 1), 0)


def reference(rounds: int, seed: int = 0):
    clients = toy_clients(SIZES)
    w = to_numpy(toy_params())
    lam = np.full(N, 1 / N)
    for s in range(rounds):
        key = RoundKey(seed, s)
        d = key.numpy(SERVER_STREAM, 1).choice(N, size=M, replace=True, p=lam / lam.sum())
        tp = int(key.numpy(SERVER_STREAM, 2).integers(1, TAU + 1))
        u = key.numpy(SERVER_STREAM, 3).choice(N, size=M, replace=False)
        runs = {i: local_gd(w, clients[i], LR, TAU) for i in set(d.tolist())}
        w_new = {k: np.mean([runs[i][-1][k] for i in d], 0) for k in w}
        w_snap = {k: np.mean([runs[i][tp - 1][k] for i in d], 0) for k in w}
        v = np.zeros(N)
        for i in u:
            v[i] = N / M * ce_loss_grad(w_snap, clients[i])[0]
        lam = simplex(lam + TAU * GAMMA * v)
        w = w_new
    return w, lam


def run(rounds: int, seed: int = 0, gamma: float = GAMMA):
    alg = registry.get("drfa").build(toy_model(), lambda_lr=gamma, num_clients=N, clients_per_round=M, local_epochs=1,
                                     batch_size=B, client_lr=LR, local_steps=TAU)
    clients = toy_clients(SIZES)
    state, diags = alg.init(toy_params()), []
    for t in range(rounds):
        state, diag = alg.apply(state, clients, RoundKey(seed, t))
        diags.append(diag)
    return state, diags


def test_five_rounds_match_algorithm_1_by_hand():
    state, diags = run(5)
    w, lam = reference(5)
    for k in w:
        np.testing.assert_allclose(state.params[k].numpy(), w[k], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(state.lam.numpy(), lam, rtol=1e-9, atol=1e-12)
    assert lam.sum() == pytest.approx(1.0) and not np.allclose(lam, 1 / N)   # λ moved off uniform
    snaps = {int(d["snapshot"]) for d in diags}
    assert snaps <= set(range(1, TAU + 1)) and len(snaps) > 1                 # t' is drawn, not fixed at τ


def test_gamma_zero_keeps_lambda_uniform_and_lambda_rises_on_the_lossiest_client():
    state, _ = run(3, gamma=0.0)
    np.testing.assert_array_equal(state.lam.numpy(), np.full(N, 1 / N))
    state, _ = run(1, seed=2, gamma=0.5)
    key = RoundKey(2, 0)
    u = key.numpy(SERVER_STREAM, 3).choice(N, size=M, replace=False)
    assert int(np.argmax(state.lam.numpy())) in u.tolist()                    # only U's losses push λ up


def test_same_seed_same_result_and_bad_arguments():
    a, b = run(2, seed=9)[0], run(2, seed=9)[0]
    assert all(np.array_equal(a.params[k].numpy(), b.params[k].numpy()) for k in a.params)
    assert np.array_equal(a.lam.numpy(), b.lam.numpy())
    with pytest.raises(ValueError, match="lambda_lr"):
        registry.get("drfa").build(toy_model(), lambda_lr=-1.0, num_clients=N, clients_per_round=M, local_epochs=1,
                                   batch_size=B, client_lr=LR)
