"""FedBN (Li et al. 2021, Algorithm 1) against a plain PyTorch training loop of the same clients (nn.Module,
torch.optim.SGD, load_state_dict: no fedshift code), on a small MLP with a batch-norm layer."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedshift.algorithms import registry
from fedshift.algorithms.fedbn import bn_names, client_model
from fedshift.core.rng import RoundKey

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from toy_federation import DIM, toy_clients, toy_model, toy_params  # noqa: E402

SIZES = [4, 6, 5]
LR, EPOCHS = 0.2, 3
BN = {"1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"}


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(DIM, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3)).double()


def params_of(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.named_parameters()}


def reference(rounds: int, ids_per_round: list[list[int]]):
    """Algorithm 1 by hand: each client trains a copy of the module (its own BN state loaded), E full-batch SGD steps
    in training mode; the server averages every non-BN parameter with weights n_i."""
    base = model()
    clients = toy_clients(SIZES)
    shared = {k: v for k, v in base.state_dict().items() if k not in BN}
    local = [{k: v.clone() for k, v in base.state_dict().items() if k in BN} for _ in SIZES]
    for t in range(rounds):
        trained = {}
        for i in ids_per_round[t]:
            m = copy.deepcopy(base)
            m.load_state_dict(shared | local[i])
            m.train()
            opt = torch.optim.SGD(m.parameters(), lr=LR)
            for _ in range(EPOCHS):
                opt.zero_grad()
                nn.functional.cross_entropy(m(clients[i].x), clients[i].y).backward()
                opt.step()
            trained[i] = m.state_dict()
            local[i] = {k: v.clone() for k, v in trained[i].items() if k in BN}
        n = {i: SIZES[i] for i in trained}
        shared = {k: sum(n[i] * trained[i][k] for i in trained) / sum(n.values()) for k in shared}
    return shared, local


def run(rounds: int, per_round: int, seed: int = 0):
    m = model()
    alg = registry.get("fedbn").build(m, num_clients=3, clients_per_round=per_round, local_epochs=EPOCHS,
                                      batch_size=10, client_lr=LR)
    state, ids = alg.init(params_of(m)), []
    for t in range(rounds):
        state, diag = alg.apply(state, toy_clients(SIZES), RoundKey(seed, t))
        ids.append(diag["clients"].tolist())
    return alg, state, ids


@pytest.mark.parametrize("per_round", [3, 2])
def test_rounds_match_local_bn_training_by_hand(per_round):
    alg, state, ids = run(3, per_round)
    shared, local = reference(3, ids)
    for k, v in shared.items():
        np.testing.assert_allclose(state.params[k].numpy(), v.numpy(), rtol=1e-10, atol=1e-12)
    for i in range(3):
        p, b = client_model(state, i)
        for k in BN:
            got = (p | b)[k]
            np.testing.assert_allclose(got.numpy(), local[i][k].numpy(), rtol=1e-10, atol=1e-12)
    # the clients' BN layers differ from one another (kept local), and a client never sampled keeps the initial ones
    trained = {i for r in ids for i in r}
    if len(trained) > 1:
        a, b = sorted(trained)[:2]
        assert not np.allclose(client_model(state, a)[0]["1.weight"], client_model(state, b)[0]["1.weight"])
    for i in set(range(3)) - trained:
        assert int(client_model(state, i)[1]["1.num_batches_tracked"]) == 0


def test_bn_names_and_a_model_without_bn_is_fedavg():
    assert bn_names(model()) == (["1.weight", "1.bias"], ["1.running_mean", "1.running_var", "1.num_batches_tracked"])
    kw = dict(clients_per_round=3, local_epochs=EPOCHS, batch_size=10, client_lr=LR)
    bn = registry.get("fedbn").build(toy_model(), num_clients=3, **kw)
    avg = registry.get("fedavg").build(toy_model(), path="sequential", **kw)
    s1, s2 = bn.init(toy_params()), avg.init(toy_params())
    for t in range(2):
        s1, _ = bn.apply(s1, toy_clients(SIZES), RoundKey(0, t))
        s2, _ = avg.apply(s2, toy_clients(SIZES), RoundKey(0, t))
    for k in s2.params:
        np.testing.assert_allclose(bn.eval_params(s1)[k].numpy(), s2.params[k].numpy(), rtol=1e-11, atol=1e-13)


def test_same_seed_same_result():
    _, a, _ = run(2, 2, seed=4)
    _, b, _ = run(2, 2, seed=4)
    for k in a.local:
        assert torch.equal(a.local[k], b.local[k])
