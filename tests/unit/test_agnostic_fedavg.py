"""AgnosticFedAvg (Ro et al. 2021): FedJAX's unit-test vectors (papers spec §2.4), the toy regression's
convergence to its closed-form minimax point, the FedAvg baselines, resumption and bad input."""

import numpy as np
import pytest
import torch
from torch import nn

from fedshift.algorithms.agnostic_fedavg import build_agnostic_fedavg, build_domain_fedavg
from fedshift.algorithms.agnostic_fedavg_steps import (
    DomainClients,
    client_message,
    local_train,
    scaling_vector,
    update_domain_weights,
)
from fedshift.algorithms.fedavg import build_fedavg
from fedshift.core.base import ClientData
from fedshift.core.rng import RoundKey
from fedshift.core.training import run_training
from fedshift.models import LogisticRegression, init_params
from fedshift.papers.agnostic_fedavg.data import spread_over_clients, toy_regression
from fedshift.papers.agnostic_fedavg.models import ToyRegression, squared_loss


class Scalar(nn.Module):
    """FedJAX's test model: one scalar parameter, per-example loss x·w."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))


def linear_loss(module, params, x, y):
    return x * params["w"]


def fedjax_clients() -> DomainClients:
    # agnostic_fed_avg_test.py: cid0 x=[1,2,4,3,6,1], d=[1,0,0,0,2,2]; cid1 x=[8,10,5], d=[1,3,1]
    x = [torch.tensor([1.0, 2, 4, 3, 6, 1], dtype=torch.float64), torch.tensor([8.0, 10, 5], dtype=torch.float64)]
    return DomainClients.from_clients(x, [torch.zeros(6), torch.zeros(3)],
                                      [torch.tensor([1, 0, 0, 0, 2, 2]), torch.tensor([1, 3, 1])], 4)


def fedjax_algorithm(**kw):
    hp = dict(num_domains=4, clients_per_round=2, local_epochs=1, batch_size=3, client_lr=1.0, lambda_lr=0.01,
              window_size=2, init_domain_weights=[0.1, 0.2, 0.3, 0.4], init_domain_window=[1, 2, 3, 4],
              server_optimizer="sgd", server_lr=0.1, loss_fn=linear_loss)
    return build_agnostic_fedavg(Scalar(), **{**hp, **kw})


def test_fedjax_vectors_one_round():
    alg = fedjax_algorithm()
    state = alg.init({"w": torch.tensor(4.0, dtype=torch.float64)})
    state, diag = alg.apply(state, fedjax_clients(), RoundKey(0, 0))
    assert state.params["w"].item() == pytest.approx(3.5555556, abs=1e-6)
    np.testing.assert_allclose(state.lam.numpy(), [0.08702461, 0.18604803, 0.2663479, 0.46057943], atol=1e-7)
    np.testing.assert_allclose(state.window.numpy(), [[1, 2, 3, 4], [3, 3, 2, 1]])
    np.testing.assert_allclose(diag["domain_loss"].numpy(), [12, 56 / 3, 14, 40], rtol=1e-6)
    assert state.round == 1


def test_fedjax_vectors_client_deltas():
    data = fedjax_clients()
    params = {"w": torch.tensor(4.0, dtype=torch.float64)}
    alpha = scaling_vector(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64),
                           torch.tensor([[1.0, 2, 3, 4]] * 2, dtype=torch.float64))
    np.testing.assert_allclose(alpha.numpy(), [0.1] * 4)
    for k, beta, delta in ((0, 0.6, 2.8333335), (1, 0.3, 7.666667)):
        m = client_message(Scalar(), params, linear_loss, data, k, alpha, RoundKey(0, 0), epochs=1, batch_size=3,
                           lr=1.0)
        assert m.weight.item() == pytest.approx(beta)
        assert (m.weighted_delta["w"] / m.weight).abs().item() == pytest.approx(delta, rel=1e-6)


def test_fedjax_update_domain_weights():
    lam = update_domain_weights(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64),
                                torch.tensor([10.0, 0, 5, 0], dtype=torch.float64), 0.1)
    np.testing.assert_allclose(lam.numpy(), [0.198931, 0.14636526, 0.36197326, 0.2927305], rtol=1e-6)


def test_fedjax_scaled_loss():
    # α=[.1,.2,.3,.4], β=0.5, x=[1,2,4], d=[1,0,0], w=4 -> 6.4 (the value of the first and only step)
    data = DomainClients.from_clients([torch.tensor([1.0, 2, 4], dtype=torch.float64)], [torch.zeros(3)],
                                      [torch.tensor([1, 0, 0])], 4)
    a = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    _, loss = local_train(Scalar(), {"w": torch.tensor(4.0, dtype=torch.float64)}, linear_loss, data, 0,
                          lambda d, nb: a[d] / 0.5, RoundKey(0, 0), epochs=1, batch_size=3, lr=1.0)
    assert loss.item() == pytest.approx(6.4)


def test_empty_domain_keeps_its_weight():
    # no client holds domain 3: its factor exp(0) = 1, so it shrinks only by the renormalisation
    data = DomainClients.from_clients([torch.tensor([1.0, 2.0], dtype=torch.float64)], [torch.zeros(2)],
                                      [torch.tensor([0, 1])], 4)
    alg = build_agnostic_fedavg(Scalar(), num_domains=4, clients_per_round=1, local_epochs=1, batch_size=2,
                                client_lr=0.1, lambda_lr=0.5, window_size=1, loss_fn=linear_loss)
    state = alg.init({"w": torch.tensor(1.0, dtype=torch.float64)})
    state, diag = alg.apply(state, data, RoundKey(0, 0))
    assert diag["domain_loss"][2:].abs().sum() == 0
    z = 0.25 * (np.exp(0.5) + np.exp(1.0) + 2)
    np.testing.assert_allclose(state.lam.numpy(), [0.25 * np.exp(0.5) / z, 0.25 * np.exp(1.0) / z, 0.25 / z, 0.25 / z])
    np.testing.assert_allclose(state.window.numpy(), [[1, 1, 0, 0]])


@pytest.mark.parametrize("domain_type", ["client", "data"])
def test_toy_regression_converges_to_minimax_point(domain_type):
    t = toy_regression(num_domains=5, dim=2, points_per_domain=40, radius=3.0, seed=0)
    parts = spread_over_clients(t["domain"], 10, domain_type, seed=0)
    y, d = torch.tensor(t["y"]), torch.tensor(t["domain"])
    data = DomainClients.from_clients([torch.zeros(len(p), 1) for p in parts], [y[p] for p in parts],
                                      [d[p] for p in parts], 5)
    assert (domain_type == "client") == all(len(set(t["domain"][p])) == 1 for p in parts)
    module = ToyRegression(2, [2.0, -1.5])
    alg = build_agnostic_fedavg(module, num_domains=5, clients_per_round=10, local_epochs=1, batch_size=1000,
                                client_lr=0.3, lambda_lr=0.1, window_size=1, loss_fn=squared_loss)
    res = run_training(alg, init_params(module, 0), data, rounds=400, seed=0, log_every=100)
    assert res.state.params["w"].abs().max().item() < 1e-3
    np.testing.assert_allclose(res.state.lam.numpy(), t["lambda_star"], atol=1e-2)
    np.testing.assert_allclose(t["lambda_star"], [1 / 3, 1 / 3, 1 / 3, 0, 0])
    # the inner domains' centres really are inside: the max of the domain losses at w* is on the vertices
    assert (np.linalg.norm(t["centres"][3:], axis=1) < 3.0 - 1e-9).all()


def test_domain_fedavg_matches_engine_fedavg_for_cross_entropy():
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 5, generator=gen, dtype=torch.float64) for n in (7, 12, 5, 9)]
    ys = [torch.randint(0, 3, (len(x),), generator=gen) for x in xs]
    module = LogisticRegression(5, 3).double()
    params = {k: v.double() for k, v in init_params(module, 1).items()}
    hp = dict(clients_per_round=3, local_epochs=2, batch_size=4, client_lr=0.2, server_optimizer="sgd",
              server_lr=1.0, server_optimizer_kwargs={"momentum": 0.9, "nesterov": True})
    ours = build_domain_fedavg(module, **hp)
    ref = build_fedavg(module, path="sequential", **hp)
    data = DomainClients.from_clients(xs, ys, [torch.zeros(len(x), dtype=torch.long) for x in xs], 1)
    clients = [ClientData(i, x, y, 0) for i, (x, y) in enumerate(zip(xs, ys, strict=True))]
    s1, s2 = ours.init(params), ref.init(params)
    for r in range(3):
        s1, d1 = ours.apply(s1, data, RoundKey(5, r))
        s2, d2 = ref.apply(s2, clients, RoundKey(5, r))
        assert d1["clients"].tolist() == d2["clients"].tolist()
    for k in params:
        torch.testing.assert_close(s1.params[k], s2.params[k], rtol=1e-10, atol=1e-12)


def test_resume_from_checkpoint_is_exact(tmp_path):
    t = toy_regression(num_domains=3, dim=1, points_per_domain=8, radius=2.0, seed=1)
    parts = spread_over_clients(t["domain"], 6, "data", seed=1)
    y, d = torch.tensor(t["y"]), torch.tensor(t["domain"])
    data = DomainClients.from_clients([torch.zeros(len(p), 1) for p in parts], [y[p] for p in parts],
                                      [d[p] for p in parts], 3)
    module = ToyRegression(1, [1.0])

    def alg():
        return build_agnostic_fedavg(module, num_domains=3, clients_per_round=3, local_epochs=2, batch_size=2,
                                     client_lr=0.1, lambda_lr=0.2, window_size=3, server_optimizer="adam",
                                     server_lr=0.05, loss_fn=squared_loss)

    full = run_training(alg(), init_params(module, 0), data, rounds=20, seed=3, log_every=5)
    ckpt = tmp_path / "c.pt"
    run_training(alg(), init_params(module, 0), data, rounds=20, seed=3, log_every=5, checkpoint_path=ckpt,
                 checkpoint_every=10, stop_after=10)
    resumed = run_training(alg(), init_params(module, 0), data, rounds=20, seed=3, log_every=5,
                           checkpoint_path=ckpt, checkpoint_every=10)
    assert resumed.resumed_from == 10
    torch.testing.assert_close(resumed.state.params["w"], full.state.params["w"], rtol=0, atol=0)
    torch.testing.assert_close(resumed.state.lam, full.state.lam, rtol=0, atol=0)
    torch.testing.assert_close(resumed.state.window, full.state.window, rtol=0, atol=0)


@pytest.mark.parametrize("kw, match", [
    ({"window_size": 0}, "window_size must be >= 1"),
    ({"lambda_lr": 0.0}, "lambda_lr"),
    ({"lambda_lr": -0.1}, "lambda_lr"),
    ({"init_domain_weights": [0.5, 0.5, 0.5, 0.5]}, "simplex"),
    ({"init_domain_window": [1, 1]}, "init_domain_window"),
    ({"domain_algorithm": "md"}, "domain_algorithm"),
    ({"client_lr": 0.0}, "client_lr"),
])
def test_bad_hyper_parameters_fail_before_training(kw, match):
    with pytest.raises(ValueError, match=match):
        fedjax_algorithm(**kw)


def test_fixed_lambda_needs_no_domain_lr():
    alg = fedjax_algorithm(domain_algorithm="none", lambda_lr=0.0)
    state, _ = alg.apply(alg.init({"w": torch.tensor(4.0, dtype=torch.float64)}), fedjax_clients(), RoundKey(0, 0))
    np.testing.assert_allclose(state.lam.numpy(), [0.1, 0.2, 0.3, 0.4])


def test_unknown_domain_ids_are_rejected():
    with pytest.raises(ValueError, match=r"unknown domain id\(s\) \[4\]"):
        DomainClients.from_clients([torch.zeros(2)], [torch.zeros(2)], [torch.tensor([0, 4])], 4)
    with pytest.raises(ValueError, match=r"unknown domain id\(s\) \[-1\]"):
        DomainClients.from_clients([torch.zeros(2)], [torch.zeros(2)], [torch.tensor([-1, 0])], 4)
    alg = fedjax_algorithm()
    data = DomainClients.from_clients([torch.ones(2)], [torch.zeros(2)], [torch.tensor([0, 1])], 2)
    with pytest.raises(ValueError, match="2 domains"):
        alg.apply(alg.init({"w": torch.tensor(1.0)}), data, RoundKey(0, 0))


def test_spread_over_clients_domain_types():
    dom = np.repeat([0, 1, 2], [50, 30, 20])
    client = spread_over_clients(dom, 10, "client", seed=0)
    data = spread_over_clients(dom, 10, "data", seed=0)
    for parts in (client, data):
        assert len(parts) == 10 and all(len(p) for p in parts)
        assert sorted(np.concatenate(parts).tolist()) == list(range(100))
    assert [len(set(dom[p])) for p in client] == [1] * 10
    assert sorted(dom[p[0]] for p in client) == [0] * 5 + [1] * 3 + [2] * 2
    assert sum(len(set(dom[p])) > 1 for p in data) >= 8
    with pytest.raises(ValueError, match="at least one client per domain"):
        spread_over_clients(dom, 2, "client", seed=0)
    with pytest.raises(ValueError, match="domain_type"):
        spread_over_clients(dom, 2, "mixed", seed=0)


def test_one_domain_equal_clients_is_fedavg_with_rescaled_client_lr():
    # one domain, equal n_k: α = 1/N̄, β^k = n_k/N̄, f_k = (batch sum)/n_k, weights ∝ n_k: AgnosticFedAvg with
    # client lr η·n_k/B takes exactly FedAvg's steps (batch means at lr η)
    gen = torch.Generator().manual_seed(2)
    xs = [torch.randn(8, 4, generator=gen, dtype=torch.float64) for _ in range(5)]
    ys = [torch.randint(0, 3, (8,), generator=gen) for _ in range(5)]
    data = DomainClients.from_clients(xs, ys, [torch.zeros(8, dtype=torch.long)] * 5, 1)
    module = LogisticRegression(4, 3).double()
    params = {k: v.double() for k, v in init_params(module, 0).items()}
    hp = dict(clients_per_round=3, local_epochs=2, batch_size=4, server_optimizer="adam", server_lr=0.1)
    fedavg = build_domain_fedavg(module, client_lr=0.3, **hp)
    agn = build_agnostic_fedavg(module, num_domains=1, client_lr=0.3 * 8 / 4, lambda_lr=1.0, window_size=2, **hp)
    s1, s2 = fedavg.init(params), agn.init(params)
    for r in range(4):
        s1, _ = fedavg.apply(s1, data, RoundKey(1, r))
        s2, _ = agn.apply(s2, data, RoundKey(1, r))
    for k in params:
        torch.testing.assert_close(s2.params[k], s1.params[k], rtol=1e-10, atol=1e-12)
    assert s2.lam.item() == 1.0
