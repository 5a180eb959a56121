"""WAFL's inner maximisation, PGD and FGSM, and the robust FedAvg server (issue 6 tests)."""

import pytest
import torch

from fedshift.algorithms import adversarial as adv
from fedshift.algorithms.wafl import build_robust_fedavg
from fedshift.core.base import ClientData
from fedshift.core.training import run_training
from fedshift.models import LogisticRegression, McMahanCNN, init_params

D64 = torch.float64


def mlr_setup(n=32, d=20, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    module = LogisticRegression(d, k).to(D64)
    params = {kk: v * 5 for kk, v in init_params(module, seed, dtype=D64).items()}  # a confident model
    return module, params, torch.randn(n, d, generator=g, dtype=D64), torch.randint(0, k, (n,), generator=g)


def test_input_grad_closed_form_matches_autograd():
    module, params, x, y = mlr_setup()
    auto = torch.func.grad(lambda xx: adv.summed_loss(module, params, xx, y))(x)
    assert torch.allclose(adv.input_grad(module, params, x, y), auto, atol=1e-12)
    assert auto.abs().max() > 1e-3


@pytest.mark.parametrize("cost", ["paper", "code"])
def test_inner_maximisation_increases_the_surrogate_objective(cost):
    module, params, x, y = mlr_setup()
    gamma = 2.0
    before = adv.inner_objective(module, params, x, x, y, gamma, cost)
    z = adv.wasserstein_ascent(module, params, x, y, gamma=gamma, lr=1.0, steps=10, cost=cost)
    after = adv.inner_objective(module, params, z, x, y, gamma, cost)
    assert (after >= before - 1e-12).all()
    assert (after - before).mean() > 1e-3  # it really moved uphill
    # and more steps do not go downhill (the step rule keeps the ascent stable)
    z20 = adv.wasserstein_ascent(module, params, x, y, gamma=gamma, lr=1.0, steps=20, cost=cost)
    assert (adv.inner_objective(module, params, z20, x, y, gamma, cost) >= after - 1e-9).all()


def test_inner_maximisation_stops_moving_when_gamma_is_large():
    module, params, x, y = mlr_setup()
    moves = [(adv.wasserstein_ascent(module, params, x, y, gamma=g, lr=1.0, steps=10) - x).norm().item()
             for g in (0.5, 5.0, 50.0, 1e6)]
    assert moves[0] > moves[1] > moves[2] > moves[3]
    assert moves[3] < 1e-4 * moves[0]
    # γ = 0.5 with ρ² the mean squared move: the larger γ, the smaller ρ (paper Fig. 2)


def test_fixed_step_diverges_where_the_stable_rule_does_not():
    module, params, x, y = mlr_setup()
    fixed = adv.wasserstein_ascent(module, params, x, y, gamma=5.0, lr=1.0, steps=30, step_rule="fixed")
    stable = adv.wasserstein_ascent(module, params, x, y, gamma=5.0, lr=1.0, steps=30, step_rule="stable")
    assert (fixed - x).norm() > 1e3 * (stable - x).norm()  # |1 − 2αγ| = 9 > 1: the perturbation explodes
    with pytest.raises(ValueError):
        adv.wasserstein_ascent(module, params, x, y, gamma=-1.0, lr=1.0, steps=1)


def test_pgd_stays_in_the_eps_ball_and_raises_the_loss():
    module, params, x, y = mlr_setup()
    eps = 0.3
    xa = adv.pgd_linf(module, params, x, y, eps=eps, step=0.05, steps=40)
    assert (xa - x).abs().max() <= eps + 1e-12
    assert (xa - x).abs().max() > eps - 1e-9  # 40 × 0.05 ≥ ε: it reaches the boundary
    loss = adv.summed_loss
    assert loss(module, params, xa, y) > loss(module, params, x, y)
    assert loss(module, params, xa, y) >= loss(module, params, adv.fgsm(module, params, x, y, eps=0.01), y)


def test_fgsm_is_one_pgd_step_of_size_eps():
    module, params, x, y = mlr_setup()
    a = adv.fgsm(module, params, x, y, eps=0.2)
    b = adv.pgd_linf(module, params, x, y, eps=0.2, step=0.2, steps=1)
    assert torch.equal(a, b)
    cnn = McMahanCNN(10).to(D64)
    p = init_params(cnn, 0, dtype=D64)
    xi, yi = torch.randn(3, 784, dtype=D64), torch.tensor([1, 2, 3])
    assert torch.equal(adv.fgsm(cnn, p, xi, yi, eps=0.1), adv.pgd_linf(cnn, p, xi, yi, eps=0.1, step=0.1, steps=1))


def make_clients(sizes, d=12, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [ClientData(i, torch.randn(n, d, generator=g, dtype=D64), torch.randint(0, k, (n,), generator=g), 0)
            for i, n in enumerate(sizes)]


def train(kind, clients, rounds=4, path="auto", **kw):
    module = LogisticRegression(12, 3).to(D64)
    alg = build_robust_fedavg(module, kind=kind, clients_per_round=3, local_epochs=2, batch_size=5,
                              client_lr=0.1, path=path, **kw)
    return run_training(alg, init_params(module, 0, dtype=D64), clients, rounds=rounds, seed=3, log_every=2)


def test_wafl_with_infinite_gamma_equals_fedavg():
    clients = make_clients([13, 9, 20, 7])
    fedavg = train("fedavg", clients).state.params
    wafl_inf = train("wafl", clients, gamma=1e12, inner_lr=1.0, inner_steps=10).state.params
    wafl = train("wafl", clients, gamma=0.5, inner_lr=1.0, inner_steps=10).state.params
    for k in fedavg:
        assert torch.allclose(wafl_inf[k], fedavg[k], atol=1e-9), k
    assert max((wafl[k] - fedavg[k]).abs().max() for k in fedavg) > 1e-4  # a finite γ does change θ


@pytest.mark.parametrize(("kind", "kw"), [("wafl", dict(gamma=0.5, inner_lr=1.0, inner_steps=5)),
                                          ("fedpgm", dict(eps=0.3, step=0.05, steps=5)), ("fedfgsm", dict(eps=0.3))])
def test_batched_and_sequential_paths_agree(kind, kw):
    clients = make_clients([13, 9, 20, 7])
    a, b = train(kind, clients, path="batched", **kw), train(kind, clients, path="sequential", **kw)
    for k in a.state.params:
        assert torch.allclose(a.state.params[k], b.state.params[k], atol=1e-10), k
    assert a.history[-1]["metric/rho2"] == pytest.approx(b.history[-1]["metric/rho2"], rel=1e-9)
    assert a.history[-1]["metric/rho2"] > 0


@pytest.mark.parametrize("path", ["batched", "sequential"])
@pytest.mark.parametrize("kind", ["fedavg", "wafl"])
def test_l2_term_is_one_weight_decay_step_on_the_weights_only(kind, path):
    (client,) = make_clients([11])
    module = LogisticRegression(12, 3).to(D64)
    w0 = init_params(module, 0, dtype=D64)
    kw = dict(gamma=0.5, inner_lr=1.0, inner_steps=3) if kind == "wafl" else {}

    def one_step(l2):  # one client, one full-batch step
        alg = build_robust_fedavg(module, kind=kind, clients_per_round=1, local_epochs=1, batch_size=11,
                                  client_lr=0.1, l2=l2, path=path, **kw)
        return run_training(alg, w0, [client], rounds=1, seed=0, log_every=1).state.params

    plain, decayed = one_step(0.0), one_step(0.3)
    assert torch.allclose(decayed["linear.weight"], plain["linear.weight"] - 0.1 * 0.3 * w0["linear.weight"],
                          atol=1e-12)
    assert torch.allclose(decayed["linear.bias"], plain["linear.bias"], atol=1e-12)
    with pytest.raises(ValueError, match="l2 must be >= 0"):
        build_robust_fedavg(module, kind=kind, clients_per_round=1, local_epochs=1, batch_size=1, client_lr=0.1,
                            l2=-1.0, **kw)


def test_snapshots_survive_a_resume(tmp_path):
    clients = make_clients([13, 9, 20, 7])
    module = LogisticRegression(12, 3).to(D64)
    alg = build_robust_fedavg(module, kind="wafl", clients_per_round=2, local_epochs=1, batch_size=5, client_lr=0.1,
                              snapshot_every=2, gamma=1.0, inner_lr=1.0, inner_steps=3)
    kw = dict(rounds=6, seed=5, log_every=2, checkpoint_every=2, checkpoint_path=tmp_path / "c.pt", fingerprint="x")
    w0 = init_params(module, 0, dtype=D64)
    run_training(alg, w0, clients, stop_after=4, **kw)
    resumed = run_training(alg, w0, clients, **kw)
    full = run_training(alg, w0, clients, **{**kw, "checkpoint_path": None})
    assert resumed.resumed_from == 4
    assert sorted(full.state.snapshots, key=int) == ["0", "2", "4", "6"]
    for r in full.state.snapshots:
        for k in w0:
            assert torch.equal(resumed.state.snapshots[r][k], full.state.snapshots[r][k])
    assert torch.equal(full.state.snapshots["6"]["linear.weight"], full.state.params["linear.weight"])


def test_build_rejects_bad_arguments():
    module = LogisticRegression(12, 3)
    with pytest.raises(ValueError, match="'kind' = 'fedprox' is not one of"):
        build_robust_fedavg(module, kind="fedprox", clients_per_round=1, local_epochs=1, batch_size=1, client_lr=0.1)
    with pytest.raises(ValueError):
        build_robust_fedavg(module, kind="wafl", clients_per_round=1, local_epochs=1, batch_size=1, client_lr=0.0)
