"""Stochastic-AFL (Mohri et al. 2019): exact values on two toy clients, unbiased stochastic gradients,
convergence to the minimax value a convex solver finds, fixed-mixture baselines, checkpoint/resume."""

import math

import cvxpy as cp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedshift.algorithms.afl import build_stochastic_afl, stochastic_gradients
from fedshift.core.base import ClientData
from fedshift.core.rng import RoundKey
from fedshift.core.training import NonFiniteLossError, run_training
from fedshift.models import LogisticRegression, forward


@pytest.fixture(autouse=True)
def float64_default():
    """These exact-value tests compute in float64; the default is restored for the other test modules."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def zero_params(d, c):
    return {"linear.weight": torch.zeros(c, d), "linear.bias": torch.zeros(c)}


def test_one_step_exact_values_on_two_single_example_clients():
    # Each domain holds one example, so every draw is deterministic and the step is computable by hand.
    x1, x2 = torch.tensor([[1.0, 2.0]]), torch.tensor([[-1.0, 0.5]])
    clients = [ClientData(0, x1, torch.tensor([0]), 0), ClientData(1, x2, torch.tensor([1]), 1)]
    module = LogisticRegression(2, 2)
    alg = build_stochastic_afl(module, num_domains=2, domain_sizes=[1, 1], batch_size=3, client_lr=0.5,
                               lambda_lr=0.2, init_lambda=[0.75, 0.25])
    state, diag = alg.apply(alg.init(zero_params(2, 2)), clients, RoundKey(0, 0))
    # zero weights: p = (1/2, 1/2); loss = log 2; dℓ/dW = (p − e_y) xᵀ, dℓ/db = p − e_y.
    g1_w = torch.tensor([[-0.5], [0.5]]) @ x1
    g2_w = torch.tensor([[0.5], [-0.5]]) @ x2
    g_w = 0.75 * g1_w + 0.25 * g2_w
    g_b = 0.75 * torch.tensor([-0.5, 0.5]) + 0.25 * torch.tensor([0.5, -0.5])
    torch.testing.assert_close(state.params["linear.weight"], -0.5 * g_w)
    torch.testing.assert_close(state.params["linear.bias"], -0.5 * g_b)
    # λ ascent: [0.75, 0.25] + 0.2 * [log 2, log 2], projected: the shift is uniform, so λ is unchanged.
    torch.testing.assert_close(state.lam, torch.tensor([0.75, 0.25]))
    torch.testing.assert_close(diag["domain_loss"], torch.full((2,), math.log(2)))
    # averaged iterate after one step is w_1 itself
    torch.testing.assert_close(state.avg_params["linear.weight"], state.params["linear.weight"])
    # second step: losses differ now, so λ moves towards the domain with the larger loss
    state2, diag2 = alg.apply(state, clients, RoundKey(0, 1))
    l1, l2 = diag2["domain_loss"].tolist()
    expected = torch.tensor([0.75 + 0.2 * l1, 0.25 + 0.2 * l2])
    expected = expected + (1 - expected.sum()) / 2  # interior of the simplex: projection shifts uniformly
    torch.testing.assert_close(state2.lam, expected)
    torch.testing.assert_close(state2.avg_lam, (state.lam + state2.lam) / 2)


def toy_domains(seed=0, sizes=(6, 9, 4), d=3):
    g = torch.Generator().manual_seed(seed)
    clients = []
    for k, n in enumerate(sizes):
        x = torch.randn(n, d, generator=g) + k
        y = torch.randint(0, 2, (n,), generator=g)
        clients.append(ClientData(k, x, y, k))
    return clients


def full_gradients(module, params, lam, clients):
    losses = []
    for c in clients:
        losses.append(F.cross_entropy(forward(module, params, c.x), c.y))
    total = sum(l_k * lam[k] for k, l_k in enumerate(losses))
    grads = torch.autograd.grad(total, list(params.values()))
    return dict(zip(params, grads, strict=True)), torch.stack(losses).detach()


@pytest.mark.parametrize("w_gradient", ["perdomain", "weighted"])
@pytest.mark.parametrize("lambda_gradient", ["perdomain", "uniform"])
def test_stochastic_gradients_are_unbiased(w_gradient, lambda_gradient):
    clients = toy_domains()
    module = LogisticRegression(3, 2)
    g = torch.Generator().manual_seed(1)
    params = {"linear.weight": torch.randn(2, 3, generator=g, requires_grad=True),
              "linear.bias": torch.randn(2, generator=g, requires_grad=True)}
    lam = torch.tensor([0.5, 0.3, 0.2])
    exact_w, exact_lam = full_gradients(module, params, lam, clients)
    detached = {k: v.detach() for k, v in params.items()}
    draws = 4000
    sum_w = {k: torch.zeros_like(v) for k, v in detached.items()}
    sum_sq = 0.0
    sum_lam = torch.zeros(3)
    for r in range(draws):
        gw, gl, _ = stochastic_gradients(module, detached, lam, clients, RoundKey(7, r), batch_size=2,
                                         w_gradient=w_gradient, lambda_gradient=lambda_gradient)
        for k in sum_w:
            sum_w[k] += gw[k]
        sum_sq += float(sum((v * v).sum() for v in gw.values()))
        sum_lam += gl
    # tolerance: 5 standard errors of the mean (from the empirical second moment)
    se = math.sqrt(sum_sq / draws / draws)
    for k in sum_w:
        assert (sum_w[k] / draws - exact_w[k]).abs().max() < 5 * se, k
    assert (sum_lam / draws - exact_lam).abs().max() < 0.1 * exact_lam.max()


def test_stochastic_afl_reaches_the_minimax_value_of_a_convex_solver():
    # min_w max_k L_k(w) for binary logistic regression on three overlapping domains.
    rng = np.random.default_rng(3)
    clients, data = [], []
    for k, (n, shift) in enumerate([(40, 0.0), (25, 1.0), (15, -1.5)]):
        x = rng.normal(size=(n, 2)) + shift
        y = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=1.5, size=n) > shift).astype(np.int64)
        clients.append(ClientData(k, torch.tensor(x), torch.tensor(y), k))
        data.append((x, y))
    v, c, t = cp.Variable(2), cp.Variable(), cp.Variable()
    cons = [cp.sum(cp.logistic(cp.multiply(-(2.0 * y - 1), x @ v + c))) / len(y) <= t for x, y in data]
    value = cp.Problem(cp.Minimize(t), cons).solve(solver=cp.CLARABEL)

    module = LogisticRegression(2, 2)
    alg = build_stochastic_afl(module, num_domains=3, domain_sizes=[40, 25, 15], batch_size=20, client_lr=0.5,
                               lambda_lr=0.05, optimizer="sgd")
    res = run_training(alg, zero_params(2, 2), clients, rounds=3000, seed=0, log_every=1000)
    w = alg.eval_params(res.state)
    with torch.no_grad():
        worst = max(float(F.cross_entropy(forward(module, w, cl.x), cl.y)) for cl in clients)
    assert worst == pytest.approx(value, abs=5e-3)
    # and the uniform (pooled) model is clearly worse in its worst domain on this problem
    base = build_stochastic_afl(module, num_domains=3, domain_sizes=[40, 25, 15], batch_size=20, client_lr=0.5,
                                lambda_lr=0.0, init_lambda="empirical")
    wb = base.eval_params(run_training(base, zero_params(2, 2), clients, rounds=3000, seed=0, log_every=1000).state)
    with torch.no_grad():
        worst_b = max(float(F.cross_entropy(forward(module, wb, cl.x), cl.y)) for cl in clients)
    assert worst_b > value + 1e-3


def test_fixed_mixture_never_touches_other_domains():
    clients = toy_domains()
    poisoned = ClientData(1, torch.full_like(clients[1].x, float("nan")), clients[1].y, 1)
    clients = [clients[0], poisoned, clients[2]]
    module = LogisticRegression(3, 2)
    alg = build_stochastic_afl(module, num_domains=3, domain_sizes=[6, 9, 4], batch_size=4, client_lr=0.1,
                               lambda_lr=0.0, init_lambda=[0.0, 0.0, 1.0])
    res = run_training(alg, zero_params(3, 2), clients, rounds=50, seed=0, log_every=10)
    torch.testing.assert_close(res.state.lam, torch.tensor([0.0, 0.0, 1.0]))
    assert all(torch.isfinite(v).all() for v in res.state.params.values())


def test_nan_loss_stops_the_run_with_a_clear_message():
    clients = toy_domains()
    bad = ClientData(0, torch.full_like(clients[0].x, float("inf")), clients[0].y, 0)
    alg = build_stochastic_afl(LogisticRegression(3, 2), num_domains=3, domain_sizes=[6, 9, 4], batch_size=2,
                               client_lr=0.1, lambda_lr=0.1)
    with pytest.raises(NonFiniteLossError, match="round 5"):
        run_training(alg, zero_params(3, 2), [bad, *clients[1:]], rounds=20, seed=0, log_every=5)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_resume_from_checkpoint_gives_the_same_result(tmp_path, optimizer):
    clients = toy_domains()
    module = LogisticRegression(3, 2)

    def build():
        return build_stochastic_afl(module, num_domains=3, domain_sizes=[6, 9, 4], batch_size=3, client_lr=0.05,
                                    lambda_lr=0.1, optimizer=optimizer)

    full = run_training(build(), zero_params(3, 2), clients, rounds=60, seed=4, log_every=10)
    ckpt = tmp_path / "ckpt.pt"
    part = run_training(build(), zero_params(3, 2), clients, rounds=60, seed=4, log_every=10,
                        checkpoint_path=ckpt, checkpoint_every=20, fingerprint="a", stop_after=40)
    assert part.state.round == 40 and ckpt.exists()
    resumed = run_training(build(), zero_params(3, 2), clients, rounds=60, seed=4, log_every=10,
                           checkpoint_path=ckpt, checkpoint_every=20, fingerprint="a")
    assert resumed.resumed_from == 40
    for k, v in full.state.avg_params.items():
        assert torch.equal(v, resumed.state.avg_params[k])
    assert torch.equal(full.state.lam, resumed.state.lam)
    assert [r["loss"] for r in full.history] == [r["loss"] for r in resumed.history]
    # a checkpoint of another configuration is ignored
    other = run_training(build(), zero_params(3, 2), clients, rounds=60, seed=4, log_every=10,
                         checkpoint_path=ckpt, checkpoint_every=20, fingerprint="b")
    assert other.resumed_from == 0


def test_invalid_hyperparameters_fail_before_training():
    m = LogisticRegression(3, 2)
    with pytest.raises(ValueError, match="batch_size"):
        build_stochastic_afl(m, num_domains=2, domain_sizes=[1, 1], batch_size=0, client_lr=0.1, lambda_lr=0.1)
    with pytest.raises(ValueError, match="simplex"):
        build_stochastic_afl(m, num_domains=2, domain_sizes=[1, 1], batch_size=1, client_lr=0.1, lambda_lr=0.1,
                             init_lambda=[0.7, 0.7])
    with pytest.raises(ValueError, match="optimizer"):
        build_stochastic_afl(m, num_domains=2, domain_sizes=[1, 1], batch_size=1, client_lr=0.1, lambda_lr=0.1,
                             optimizer="lbfgs")


@pytest.mark.parametrize(
    ("w_gradient", "lambda_gradient", "optimizer", "extra"),
    [("perdomain", "perdomain", "adagrad", {}),
     ("weighted", "uniform", "adam", {"gamma": 0.01, "w_radius": 2.0, "mu": 0.1})],
)
def test_several_runs_at_once_equal_the_single_runs(w_gradient, lambda_gradient, optimizer, extra):
    clients = toy_domains(sizes=(6, 9, 4))
    module = LogisticRegression(3, 2)
    seeds = [0, 5, 9]
    kw = dict(num_domains=3, domain_sizes=[6, 9, 4], batch_size=3, client_lr=0.1, lambda_lr=0.1, optimizer=optimizer,
              w_gradient=w_gradient, lambda_gradient=lambda_gradient, **extra)
    inits = [{k: v + 0.1 * s for k, v in zero_params(3, 2).items()} for s in seeds]
    multi = build_stochastic_afl(module, seeds=seeds, **kw)
    stacked = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    res_m = run_training(multi, stacked, clients, rounds=40, seed=-1, log_every=10)
    for r, seed in enumerate(seeds):
        single = build_stochastic_afl(module, **kw)
        res_s = run_training(single, inits[r], clients, rounds=40, seed=seed, log_every=10)
        for k, v in single.eval_params(res_s.state).items():
            assert (multi.eval_params(res_m.state)[k][r] - v).abs().max() < 1e-10, (seed, k)
        assert (res_m.state.lam[r] - res_s.state.lam).abs().max() < 1e-10
        assert res_m.history[-1]["loss"][r] == pytest.approx(res_s.history[-1]["loss"], abs=1e-10)


def test_chi2_term_follows_the_sign_of_eq_6():
    # equal domain losses (identical data), so only the μ χ²(λ||m̄) term moves λ: eq. (6) adds it inside the
    # max over λ, so ascent pushes λ away from m̄ = (1/2, 1/2).
    x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    clients = [ClientData(0, x, y, 0), ClientData(1, x.clone(), y.clone(), 1)]
    alg = build_stochastic_afl(LogisticRegression(2, 2), num_domains=2, domain_sizes=[1, 1], batch_size=1,
                               client_lr=0.1, lambda_lr=0.1, mu=1.0, init_lambda=[0.6, 0.4])
    state, _ = alg.apply(alg.init(zero_params(2, 2)), clients, RoundKey(0, 0))
    # λ + 0.1·2μ(λ − m̄)/m̄ = (0.6 + 0.04, 0.4 − 0.04); the equal loss terms shift both coordinates alike
    torch.testing.assert_close(state.lam, torch.tensor([0.64, 0.36]))


def test_checkpoint_must_fall_on_a_log_boundary(tmp_path):
    clients = toy_domains()
    alg = build_stochastic_afl(LogisticRegression(3, 2), num_domains=3, domain_sizes=[6, 9, 4], batch_size=2,
                               client_lr=0.1, lambda_lr=0.1)
    with pytest.raises(ValueError, match="multiple of log_every"):
        run_training(alg, zero_params(3, 2), clients, rounds=20, seed=0, log_every=10, checkpoint_every=15,
                     checkpoint_path=tmp_path / "c.pt")


def test_cached_client_pool_follows_a_new_client_list():
    module = LogisticRegression(3, 2)
    alg = build_stochastic_afl(module, num_domains=3, domain_sizes=[6, 9, 4], batch_size=3, client_lr=0.1,
                               lambda_lr=0.1, seeds=[0])
    params = {k: v.unsqueeze(0) for k, v in zero_params(3, 2).items()}
    a, b = toy_domains(seed=0), toy_domains(seed=1)
    sa, _ = alg.apply(alg.init(params), a, RoundKey(0, 0))
    sb, _ = alg.apply(alg.init(params), b, RoundKey(0, 0))
    fresh = build_stochastic_afl(module, num_domains=3, domain_sizes=[6, 9, 4], batch_size=3, client_lr=0.1,
                                 lambda_lr=0.1, seeds=[0])
    sf, _ = fresh.apply(fresh.init(params), b, RoundKey(0, 0))
    assert torch.equal(sb.params["linear.weight"], sf.params["linear.weight"])
    assert not torch.equal(sa.params["linear.weight"], sb.params["linear.weight"])
