"""FedSR (Nguyen et al. 2022, §3): two rounds of regularised local training against a hand-written computation (raw
tensors, the loss written from the paper's formula, SGD by hand; ε from the documented RoundKey stream), and the
mean-representation predictor mapped back onto the model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedshift.algorithms import registry
from fedshift.algorithms.fedsr import FEDSR_STREAM
from fedshift.core.rng import RoundKey
from fedshift.models import forward

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import toy_clients, toy_model, toy_params  # noqa: E402

SIZES = [4, 6, 5]
LR, EPOCHS, Z, L2R, CMI = 0.1, 2, 2, 0.05, 0.3


def build(l2r=L2R, cmi=CMI):
    return registry.get("fedsr").build(toy_model(), l2r=l2r, cmi=cmi, clients_per_round=3, local_epochs=EPOCHS,
                                       batch_size=10, client_lr=LR, z_dim=Z)


def softplus(t):
    return torch.log1p(torch.exp(t))


def loss_by_hand(p, x, y, eps):
    h = x @ p["enc.weight"].T + p["enc.bias"]
    mu, sigma = h[:, :Z], softplus(h[:, Z:])
    z = mu + sigma * eps
    logits = z @ p["cls.weight"].T + p["cls.bias"]
    ce = (torch.logsumexp(logits, 1) - logits[torch.arange(len(y)), y]).mean()
    rm, rs = p["r_mu"][y], softplus(p["r_sigma"])[y]
    kl = (torch.log(rs) - torch.log(sigma) + (sigma**2 + (mu - rm) ** 2) / (2 * rs**2) - 0.5).sum(1).mean()
    return ce + L2R * (z**2).sum(1).mean() + CMI * kl


def reference(p0, rounds, seed=0):
    clients = toy_clients(SIZES)
    p = {k: v.clone() for k, v in p0.items()}
    n = torch.tensor(SIZES, dtype=torch.float64)
    for t in range(rounds):
        finals = []
        for c in clients:
            gen = RoundKey(seed, t).torch(FEDSR_STREAM, c.client_id)
            w = {k: v.clone().requires_grad_(True) for k, v in p.items()}
            for e in range(EPOCHS):     # B >= n_i: one full-batch step per epoch, rows in the epoch's order
                perm = torch.as_tensor(RoundKey(seed, t).numpy(c.client_id, e).permutation(c.num_examples))
                eps = torch.randn(c.num_examples, Z, generator=gen, dtype=torch.float64)   # row j: ε of row perm[j]
                g = torch.autograd.grad(loss_by_hand(w, c.x[perm], c.y[perm], eps), list(w.values()))
                w = {k: (v - LR * gi).detach().requires_grad_(True) for (k, v), gi in zip(w.items(), g, strict=True)}
            finals.append({k: v.detach() for k, v in w.items()})
        p = {k: sum(n[i] * finals[i][k] for i in range(3)) / n.sum() for k in p}
    return p


def test_two_rounds_match_the_regularised_objective_by_hand():
    alg = build()
    state = s0 = alg.init(toy_params())
    for t in range(2):
        state, _ = alg.apply(state, toy_clients(SIZES), RoundKey(0, t))
    want = reference(s0.params, 2)
    assert set(state.params) == {"enc.weight", "enc.bias", "cls.weight", "cls.bias", "r_mu", "r_sigma"}
    for k, v in want.items():
        np.testing.assert_allclose(state.params[k].numpy(), v.numpy(), rtol=1e-10, atol=1e-12)
    assert not torch.allclose(state.params["r_mu"], s0.params["r_mu"])   # the CMI term trains r(z|y)


def test_eval_params_are_the_models_own_at_the_mean_representation():
    alg = build()
    state, _ = alg.apply(alg.init(toy_params()), toy_clients(SIZES), RoundKey(0, 0))
    p, x = state.params, toy_clients(SIZES)[1].x
    mu = x @ p["enc.weight"][:Z].T + p["enc.bias"][:Z]
    by_hand = mu @ p["cls.weight"].T + p["cls.bias"]
    np.testing.assert_allclose(forward(toy_model(), alg.eval_params(state), x).detach().numpy(), by_hand.numpy(),
                               rtol=1e-12)


def test_init_is_seeded_by_w0_and_the_regularisers_matter():
    a, b = build().init(toy_params(1)), build().init(toy_params(1))
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    assert not torch.equal(build().init(toy_params(2)).params["enc.weight"], a.params["enc.weight"])
    runs = {}
    for coeffs in ((L2R, CMI), (0.0, 0.0)):
        alg = build(*coeffs)
        runs[coeffs] = alg.apply(alg.init(toy_params()), toy_clients(SIZES), RoundKey(0, 0))[0].params
    assert not torch.allclose(runs[(L2R, CMI)]["enc.weight"], runs[(0.0, 0.0)]["enc.weight"])
    assert torch.equal(runs[(0.0, 0.0)]["r_mu"], build().init(toy_params()).params["r_mu"])   # unused: not moved
    with pytest.raises(ValueError, match="l2r must be >= 0"):
        build(l2r=-1.0)
