"""FedPALS aggregation (eq. 7), FedProx, SCAFFOLD, label-shift partitioners and the paper's config checks."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedshift.algorithms.fedavg import build_fedavg, sample_clients
from fedshift.algorithms.fedpals import (
    build_fedpals,
    effective_sample_size,
    fedpals_weights,
    lambda_for_ess,
    projection_distance,
)
from fedshift.algorithms.fedprox import build_fedprox
from fedshift.algorithms.scaffold import build_scaffold
from fedshift.errors import ConfigError, load_yaml
from fedshift.core.base import ClientData
from fedshift.core.rng import RoundKey
from fedshift.core.selection import with_model_selection, with_monitor
from fedshift.core.training import run_training
from fedshift.models import LogisticRegression, init_params
from fedshift.partition import dirichlet_partition, label_marginals, sparsity_partition

S4 = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1.0]])
N4 = np.array([10, 10, 30, 10])
T4 = np.array([0.5, 0.25, 0.25])


def random_instance(rng, m=6, k=5):
    s = rng.dirichlet(np.full(k, 0.5), size=m)
    t = rng.dirichlet(np.full(k, 0.5))
    n = rng.integers(5, 200, size=m)
    return t, s, n


def test_large_lambda_gives_fedavg_weights():  # Prop. 2
    rng = np.random.default_rng(0)
    t, s, n = random_instance(rng)
    np.testing.assert_allclose(fedpals_weights(t, s, n, 1e9), n / n.sum(), atol=1e-5)
    np.testing.assert_allclose(fedpals_weights(t, s, n, math.inf), n / n.sum(), atol=0)
    assert effective_sample_size(n / n.sum(), n) == pytest.approx(n.sum())


def test_zero_lambda_matches_target_with_largest_ess():
    alpha = fedpals_weights(T4, S4, N4, 0.0)
    np.testing.assert_allclose(S4.T @ alpha, T4, atol=1e-7)
    # exact matches are (a, .25, .5 − a, .25), a ∈ [0, .5]; the ESS is largest at a = .5 · 10 / 40
    np.testing.assert_allclose(alpha, [0.125, 0.25, 0.375, 0.25], atol=1e-6)
    for a in np.linspace(0, 0.5, 11):
        other = np.array([a, 0.25, 0.5 - a, 0.25])
        assert effective_sample_size(other, N4) <= effective_sample_size(alpha, N4) + 1e-6
    assert projection_distance(T4, S4) == pytest.approx(0.0, abs=1e-9)


def test_small_lambda_tends_to_the_zero_lambda_solution():
    np.testing.assert_allclose(fedpals_weights(T4, S4, N4, 1e-6), fedpals_weights(T4, S4, N4, 0.0), atol=1e-4)


@pytest.mark.parametrize("lam", [0.01, 1.0, 37.0, 1e3])
def test_solution_satisfies_kkt(lam):
    rng = np.random.default_rng(int(lam * 10))
    t, s, n = random_instance(rng)
    alpha = fedpals_weights(t, s, n, lam)
    assert alpha.min() >= 0 and alpha.sum() == pytest.approx(1.0)
    grad = -2 * s @ (t - s.T @ alpha) + 2 * lam * alpha / n
    active = alpha > 1e-6
    nu = grad[active].mean()
    np.testing.assert_allclose(grad[active], nu, atol=1e-5)  # stationarity on the support
    assert (grad[~active] >= nu - 1e-5).all()  # dual feasibility of the bounds


def test_projection_distance_of_the_synthetic_task():
    s = np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5]])
    for delta in (0.0, 0.5, 1.0):
        t = (1 - delta) * np.array([0.5, 0.25, 0.25]) + delta * np.array([0.0, 0.5, 0.5])
        # conv S = {(.5, a, .5 − a)}: the distance is (T_0 − .5)² + 2·((T_1 + T_2 − .5)/2)²
        want = (t[0] - 0.5) ** 2 + 2 * ((t[1] + t[2] - 0.5) / 2) ** 2
        assert projection_distance(t, s) == pytest.approx(want, abs=1e-7)


def test_lambda_for_ess_hits_the_fraction():
    rng = np.random.default_rng(3)
    t, s, n = random_instance(rng, m=8)
    ess0 = effective_sample_size(fedpals_weights(t, s, n, 0.0), n) / n.sum()
    for frac in (0.5 * (1 + ess0), 0.9):
        lam = lambda_for_ess(t, s, n, frac)
        got = effective_sample_size(fedpals_weights(t, s, n, lam), n) / n.sum()
        assert got == pytest.approx(frac, rel=2e-3)
    assert lambda_for_ess(t, s, n, ess0 / 2) == 0.0
    assert lambda_for_ess(t, s, n, 1.0) == math.inf


@pytest.mark.parametrize("bad", [[0.5, 0.6, 0.0], [1.2, -0.2, 0.0], [np.nan, 0.5, 0.5]])
def test_target_must_be_a_probability_vector(bad):
    with pytest.raises(ValueError, match="target label marginal"):
        fedpals_weights(bad, S4, N4, 1.0)


def test_negative_lambda_is_rejected():
    with pytest.raises(ValueError, match="lambda must be >= 0"):
        fedpals_weights(T4, S4, N4, -1.0)
    with pytest.raises(ValueError, match="lam must be >= 0"):
        build_fedpals(LogisticRegression(2, 3), target_label_marginal=T4, client_label_marginals=S4, lam=-0.1,
                      clients_per_round=4, local_epochs=1, batch_size=4, client_lr=0.1)


# ---------------------------------------------------------------------------------------------
# Algorithms on toy clients


def toy_clients(sizes=(12, 12, 12), dim=4, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [ClientData(i, torch.randn(n, dim, generator=g, dtype=torch.float64),
                       torch.randint(0, k, (n,), generator=g), 0) for i, n in enumerate(sizes)]


def run_rounds(alg, params, clients, rounds, seed=5):
    state = alg.init(params)
    for r in range(rounds):
        state, _ = alg.apply(state, clients, RoundKey(seed, r))
    return state


def common(m):
    return {"clients_per_round": m, "local_epochs": 2, "batch_size": 5, "client_lr": 0.1, "path": "sequential"}


def test_fedprox_with_zero_mu_equals_fedavg_and_positive_mu_differs():
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients((12, 7, 20))
    avg = run_rounds(build_fedavg(module, **common(3)), w0, clients, 2)
    prox0 = run_rounds(build_fedprox(module, mu=0.0, **common(3)), w0, clients, 2)
    prox = run_rounds(build_fedprox(module, mu=1.0, **common(3)), w0, clients, 2)
    for k in w0:
        assert torch.equal(avg.params[k], prox0.params[k])
    dist = lambda s: sum(((s.params[k] - w0[k]) ** 2).sum() for k in w0)  # noqa: E731
    assert dist(prox) < dist(avg)  # the proximal term pulls the clients towards the global model


def test_fedprox_unsquared_variant_is_finite_and_differs():
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients()
    sq = run_rounds(build_fedprox(module, mu=0.5, **common(3)), w0, clients, 1)
    un = run_rounds(build_fedprox(module, mu=0.5, squared=False, **common(3)), w0, clients, 1)
    assert all(torch.isfinite(un.params[k]).all() for k in w0)
    assert not torch.equal(sq.params["linear.weight"], un.params["linear.weight"])


def test_scaffold_first_round_is_fedavg_and_controls_follow_option_ii():
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients((12, 12, 12))  # equal sizes: FedAvg's n_i weights are SCAFFOLD's uniform ones
    avg = run_rounds(build_fedavg(module, **common(3)), w0, clients, 1)
    sc_alg = build_scaffold(module, num_clients=3, **common(3))
    sc = run_rounds(sc_alg, w0, clients, 1)
    for k in w0:
        torch.testing.assert_close(sc.params[k], avg.params[k], rtol=0, atol=1e-12)
    # c_i = (x − y_i)/(K η) with K = 2 epochs · ⌈12/5⌉ = 6 steps; c = mean of the c_i (all sampled)
    for k in w0:
        torch.testing.assert_close(sc.control[k], sc.client_controls[k].mean(0), rtol=0, atol=1e-12)
    from fedshift.core.engine import ClientPool, local_sgd

    res = local_sgd(module, w0, ClientPool.from_clients(clients), [0, 1, 2], RoundKey(5, 0), epochs=2, batch_size=5,
                    lr=0.1, path="sequential")
    for i in range(3):  # res holds client i at position i (a client's batches depend only on its id)
        want = (w0["linear.weight"] - res.params["linear.weight"][i]) / (6 * 0.1)
        torch.testing.assert_close(sc.client_controls["linear.weight"][i], want, rtol=0, atol=1e-12)
    # later rounds use the corrections and differ from FedAvg
    avg2 = run_rounds(build_fedavg(module, **common(3)), w0, clients, 2)
    sc2 = run_rounds(sc_alg, w0, clients, 2)
    assert not torch.allclose(sc2.params["linear.weight"], avg2.params["linear.weight"], atol=1e-9)


@pytest.mark.parametrize("path", ["sequential", "batched"])
def test_scaffold_round_equals_algorithm_1_out_of_place_bit_for_bit(path):
    # The round updates the client models into c_i⁺ in place and reads the sampled c_i without a copy;
    # Algorithm 1 (option II) written out of place, on gathered copies, gives the same bits. Partial
    # participation and unequal sizes: K differs per client, unsampled c_i stay as they were.
    from fedshift.core.engine import ClientPool, local_sgd

    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients((12, 7, 20, 9))
    kw = {**common(2), "path": path}
    alg = build_scaffold(module, num_clients=4, server_lr=0.7, **kw)
    state = alg.init(w0)
    pool = ClientPool.from_clients(clients)
    for r in range(3):
        key = RoundKey(5, r)
        new, diag = alg.apply(state, clients, key)
        ids = diag["clients"].tolist()
        c_i = {k: v[ids].clone() for k, v in state.client_controls.items()}
        res = local_sgd(module, state.params, pool, ids, key, epochs=2, batch_size=5, lr=0.1, path=path,
                        grad_transform=lambda g, ctx: {k: g[k] - ctx["per_client"]["c_i"][k] + ctx["shared"]["c"][k]
                                                       for k in g},
                        shared={"c": state.control}, per_client={"c_i": c_i})
        K = torch.as_tensor(res.steps, dtype=torch.float64)
        for k, x in state.params.items():
            y = res.params[k]
            c_new = c_i[k] - state.control[k] + (x - y) / (K.reshape(-1, *[1] * x.dim()) * 0.1)
            assert torch.equal(new.params[k], x + 0.7 * (y - x).mean(0)), (r, k)
            assert torch.equal(new.control[k], state.control[k] + (c_new - c_i[k]).sum(0) / 4), (r, k)
            want = state.client_controls[k].clone()
            want[ids] = c_new
            assert torch.equal(new.client_controls[k], want), (r, k)
        assert r == 0 or sorted(ids) != [0, 1, 2, 3]
        state = new


class _Rows(torch.utils.data.Dataset):
    """Item ``(row, seed) -> (x, y)`` of fixed float64 tensors (a FilePool over ``toy_clients``' data)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, item):
        return self.x[item[0]], self.y[item[0]]


def test_scaffold_on_a_file_pool_reduces_client_by_client_and_equals_algorithm_1():
    # The streamed reduction (FilePool: PACS, iWildCam) adds each client's y_i − x and c_i⁺ − c_i to sums as
    # it finishes and writes c_i⁺ over c_i in the state it consumes. Against Algorithm 1 written out of place
    # on the same client models: c_i⁺ the same bits, x and c equal up to the summation order. Partial
    # participation and unequal sizes (K differs per client); unsampled c_i stay as they were.
    from fedshift.core.engine import FilePool, local_sgd

    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients((12, 7, 20, 9))
    offsets = np.cumsum([0] + [c.num_examples for c in clients])
    pool = FilePool(_Rows(torch.cat([c.x for c in clients]), torch.cat([c.y for c in clients])), offsets,
                    torch.device("cpu"))
    alg = build_scaffold(module, num_clients=4, server_lr=0.7, **common(2))
    state = alg.init(w0)
    for r in range(3):
        key = RoundKey(5, r)
        before = {k: v.clone() for k, v in state.client_controls.items()}
        x, c = {k: v.clone() for k, v in state.params.items()}, {k: v.clone() for k, v in state.control.items()}
        ids = sample_clients(key, 4, 2)  # the round's sample, as SCAFFOLD draws it
        c_i = {k: v[ids].clone() for k, v in before.items()}
        res = local_sgd(module, x, pool, ids, key, epochs=2, batch_size=5, lr=0.1,
                        grad_transform=lambda g, ctx: {k: g[k] - ctx["per_client"]["c_i"][k] + ctx["shared"]["c"][k]
                                                       for k in g},
                        shared={"c": c}, per_client={"c_i": c_i})
        new, diag = alg.apply(state, pool, key)
        assert diag["clients"].tolist() == ids
        K = torch.as_tensor(res.steps, dtype=torch.float64)
        for k in x:
            y = res.params[k]
            c_new = c_i[k] - c[k] + (x[k] - y) / (K.reshape(-1, *[1] * x[k].dim()) * 0.1)
            want = before[k].clone()
            want[ids] = c_new
            assert torch.equal(new.client_controls[k], want), (r, k)
            assert new.client_controls[k] is state.client_controls[k]  # written in place: the state is consumed
            torch.testing.assert_close(new.params[k], x[k] + 0.7 * (y - x[k]).mean(0), rtol=0, atol=1e-14)
            torch.testing.assert_close(new.control[k], c[k] + (c_new - c_i[k]).sum(0) / 4, rtol=0, atol=1e-14)
            assert not torch.equal(new.control[k], c[k])
        assert r == 0 or sorted(ids) != [0, 1, 2, 3]
        state = new


def test_fedpals_with_infinite_lambda_is_fedavg_and_weights_follow_alpha():
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients((12, 7, 20))
    s = label_marginals(np.concatenate([c.y.numpy() for c in clients]),
                        np.split(np.arange(39), [12, 19]), 3)
    t = np.array([0.2, 0.3, 0.5])
    avg = run_rounds(build_fedavg(module, **common(3)), w0, clients, 2)
    inf = run_rounds(build_fedpals(module, target_label_marginal=t, client_label_marginals=s, lam=math.inf,
                                   **common(3)), w0, clients, 2)
    for k in w0:
        torch.testing.assert_close(inf.params[k], avg.params[k], rtol=0, atol=1e-12)
    alg = build_fedpals(module, target_label_marginal=t, client_label_marginals=s, lam=0.0, **common(3))
    _, diag = alg.apply(alg.init(w0), clients, RoundKey(5, 0))
    ids = diag["clients"].tolist()
    want = fedpals_weights(t, s[ids], [clients[i].num_examples for i in ids], 0.0)
    np.testing.assert_allclose(diag["weights"].numpy(), want / want.sum(), atol=1e-9)


def test_fedpals_partial_participation_solves_alpha_over_participants():
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients((10, 10, 10, 10))
    s = S4
    alg = build_fedpals(module, target_label_marginal=T4, client_label_marginals=s, lam=0.0, **common(2))
    _, diag = alg.apply(alg.init(w0), clients, RoundKey(1, 3))
    ids = diag["clients"].tolist()
    np.testing.assert_allclose(diag["weights"].numpy(), fedpals_weights(T4, s[ids], [10, 10], 0.0), atol=1e-9)


def test_model_selection_keeps_the_best_checked_model_and_resumes(tmp_path):
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients()
    scores = iter([0.3, 0.9, 0.5, 0.1, 0.2, 0.95])  # checks at rounds 2, 4, 6, 8, 10 (+ 1 spare)
    seen = {}

    def score(p):
        v = next(scores)
        seen[v] = {k: x.clone() for k, x in p.items()}
        return v

    alg = with_model_selection(build_fedavg(module, **common(3)), score=score, every=2, rounds=10)
    res = run_training(alg, w0, clients, rounds=10, seed=1, log_every=2)
    assert res.state.best_round == 4 and res.state.best_score == 0.9
    for k in w0:
        assert torch.equal(alg.eval_params(res.state)[k], seen[0.9][k])
    assert [r["eval/score"] for r in res.history] == [0.3, 0.9, 0.5, 0.1, 0.2]
    # a resumed run selects what the uninterrupted one selected
    val = lambda p: float(p["linear.bias"].sum())  # noqa: E731
    ckpt = tmp_path / "c.pt"
    full = run_training(with_model_selection(build_fedavg(module, **common(3)), score=val, every=2, rounds=10),
                        w0, clients, rounds=10, seed=1, log_every=2)
    alg2 = with_model_selection(build_fedavg(module, **common(3)), score=val, every=2, rounds=10)
    run_training(alg2, w0, clients, rounds=10, seed=1, log_every=2, checkpoint_path=ckpt, checkpoint_every=4,
                 stop_after=6)
    resumed = run_training(alg2, w0, clients, rounds=10, seed=1, log_every=2, checkpoint_path=ckpt,
                           checkpoint_every=4)
    assert resumed.resumed_from == 4 and resumed.state.best_round == full.state.best_round
    for k in w0:
        assert torch.equal(resumed.state.best_params[k], full.state.best_params[k])


def test_monitor_records_the_current_model_and_changes_nothing_else():
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients = toy_clients()
    seen = []

    def monitor(p):
        seen.append({k: x.clone() for k, x in p.items()})
        return {"bias_sum": float(p["linear.bias"].sum())}

    plain = run_training(build_fedavg(module, **common(3)), w0, clients, rounds=7, seed=1, log_every=1)
    alg = with_monitor(build_fedavg(module, **common(3)), monitor, every=3, rounds=7)
    res = run_training(alg, w0, clients, rounds=7, seed=1, log_every=1)
    assert type(res.state) is type(plain.state)  # noqa: E721 (nothing is wrapped into the state)
    for k in w0:
        assert torch.equal(res.state.params[k], plain.state.params[k])
        assert torch.equal(alg.eval_params(res.state)[k], seen[-1][k])
    logged = [r["round"] for r in res.history if "eval/bias_sum" in r]
    assert logged == [3, 6, 7] and len(seen) == 3
    assert res.history[2]["eval/bias_sum"] == float(seen[0]["linear.bias"].sum())
    assert [r["loss"] for r in res.history] == [r["loss"] for r in plain.history]


def test_a_checkpoint_of_another_state_type_is_ignored_not_misread(tmp_path):
    module = LogisticRegression(4, 3).to(torch.float64)
    w0 = init_params(module, 0, dtype=torch.float64)
    clients, ckpt = toy_clients(), tmp_path / "c.pt"
    selected = with_model_selection(build_fedavg(module, **common(3)), score=lambda p: 0.0, every=2, rounds=6)
    run_training(selected, w0, clients, rounds=6, seed=1, log_every=2, checkpoint_path=ckpt, checkpoint_every=2,
                 fingerprint="f", stop_after=4)
    monitored = with_monitor(build_fedavg(module, **common(3)), lambda p: {}, every=2, rounds=6)
    assert monitored.name == selected.name  # same name and fingerprint: only the state layout differs
    res = run_training(monitored, w0, clients, rounds=6, seed=1, log_every=2, checkpoint_path=ckpt,
                       checkpoint_every=2, fingerprint="f")
    assert res.resumed_from == 0 and res.state.round == 6


# ---------------------------------------------------------------------------------------------
# Partitioners


def labels_pool(per_label=60, k=10):
    return np.repeat(np.arange(k), per_label)


def test_sparsity_partition_invariants():
    y = labels_pool()
    parts, sets = sparsity_partition(y, num_clients=10, labels_per_client=3, num_labels=10, seed=4)
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # no example held twice
    sizes = {len(p) for p in parts}
    assert len(sizes) == 1  # equal sizes
    for p, ls in zip(parts, sets, strict=True):
        assert len(ls) == 3 and sorted(set(y[p])) == ls
        counts = np.bincount(y[p], minlength=10)[ls]
        assert len(set(counts)) == 1  # equally many examples of each of its labels
    again, sets2 = sparsity_partition(y, num_clients=10, labels_per_client=3, num_labels=10, seed=4)
    assert sets2 == sets and all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    _, other = sparsity_partition(y, num_clients=10, labels_per_client=3, num_labels=10, seed=5)
    assert other != sets
    capped, _ = sparsity_partition(y, num_clients=10, labels_per_client=3, num_labels=10, seed=4, samples_per_label=2)
    assert {len(p) for p in capped} == {6}


def test_sparsity_rejects_more_labels_than_exist():
    with pytest.raises(ValueError, match="labels_per_client .* must be in \\[1, 10\\]"):
        sparsity_partition(labels_pool(), num_clients=3, labels_per_client=11, num_labels=10, seed=0)


def test_dirichlet_partition_invariants_and_errors():
    y = labels_pool(200)
    parts = dirichlet_partition(y, num_clients=10, beta=0.5, num_labels=10, seed=2, samples_per_client=150)
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)
    assert all(0 < len(p) <= 150 for p in parts)
    again = dirichlet_partition(y, num_clients=10, beta=0.5, num_labels=10, seed=2, samples_per_client=150)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    sparse = label_marginals(y, dirichlet_partition(y, num_clients=10, beta=0.05, num_labels=10, seed=2), 10)
    dense = label_marginals(y, dirichlet_partition(y, num_clients=10, beta=100.0, num_labels=10, seed=2), 10)
    assert sparse.max(1).mean() > dense.max(1).mean() + 0.3  # small β: concentrated marginals
    with pytest.raises(ValueError, match="beta must be > 0"):
        dirichlet_partition(y, num_clients=3, beta=0.0, num_labels=10, seed=0)
    with pytest.raises(ValueError, match="without examples"):
        dirichlet_partition(np.arange(3) % 3, num_clients=50, beta=0.1, num_labels=3, seed=0, samples_per_client=1)


# ---------------------------------------------------------------------------------------------
# The paper's experiment configuration


@pytest.fixture()
def section(repo_root):
    return load_yaml(repo_root / "config/papers/fedpals.yaml")["fedpals"]


@pytest.fixture()
def datasets(repo_root):
    return load_yaml(repo_root / "config/datasets.yaml")["datasets"]


def test_paper_config_is_valid(section, datasets):
    from fedshift.papers.fedpals import algorithm_ids, check_section, experiments_of, resolve_run

    check_section(section, datasets)
    experiments = experiments_of(section)
    ids = algorithm_ids(experiments["fedpals_fmnist_c3"])
    assert "fedpals~lam0" in ids and "fedpals~ess25" in ids and "scaffold" in ids
    r = resolve_run(section, "fedpals_fmnist_c3", "fedpals~ess25")
    assert r["variant"] == {"ess_fraction": 0.25} and r["kind"] == "fedpals"
    assert resolve_run(section, "fedpals_cifar10_m100", "fedpals~lam1000")["variant"] == {"lambda": 1000.0}
    # defaults merged: an entry `false` is not trained, the experiment's own entries come first
    assert "oracle" not in experiments["fedpals_cifar10_m100"]["algorithms"]
    assert algorithm_ids(experiments["fedpals_iwildcam"])[:6] == [
        "fedpals~lam0", "fedpals~lam600", "fedpals~lam2500", "fedpals~lam5800", "fedprox_fedpals~lam5800", "fedavg"]
    assert experiments["fedpals_cifar10_e5"]["train"]["rounds"] == 30
    assert experiments["fedpals_cifar10_e5"]["train"]["batch_size"] == 32  # from the defaults
    with pytest.raises(ConfigError, match="no algorithm"):
        resolve_run(section, "fedpals_fmnist_c3", "fedpals~lam7")


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["experiments"]["fedpals_fmnist_c3"]["label_shift"].update(labels_per_client=11),
     "labels_per_client: C = 11 must be given and at most the number of labels of fashion_mnist"),
    (lambda s: s["experiments"]["fedpals_fmnist_c3"]["label_shift"].update(target=[0.5] * 10),
     "label_shift.target: target is not a probability vector"),
    (lambda s: s["experiments"]["fedpals_fmnist_c3"].update(algorithms={"fedpals": {"lambdas": [],
                                                                                       "ess_fractions": []}}),
     "algorithms.fedpals: give lambdas"),
    (lambda s: s["experiments"]["fedpals_fmnist_c3"].update(algorithms={k: False for k in s["defaults"]["algorithms"]}),
     "fedpals_fmnist_c3.algorithms: no algorithm left to train"),
    (lambda s: s["defaults"].pop("seeds"), "fedpals.experiments.fedpals_fmnist_c3.seeds: required"),
    (lambda s: s["tables"]["fedpals_table1"]["rows"][0].update(experiment="nope"), "unknown experiment 'nope'"),
])
def test_bad_paper_config_is_rejected(section, datasets, edit, message):
    from fedshift.papers.fedpals import check_section

    bad = copy.deepcopy(section)
    edit(bad)
    with pytest.raises(ConfigError, match=message.replace("(", "\\(")):
        check_section(bad, datasets)


def test_client_lr_grid_makes_one_run_per_step_for_every_algorithm(section, datasets, repo_root):
    """train.select.client_lr: every algorithm (and every λ candidate) gets one run per step; the run's train
    carries the step, the grid itself is not passed on; an algorithm's own client_lr beside a grid is refused."""
    from fedshift.config import validate_section
    from fedshift.papers.fedpals import check_section, resolved_runs

    s = copy.deepcopy(section)
    exp = s["experiments"]["fedpals_fmnist_c3"]
    exp["train"] = {**exp.get("train", {}), "select": {"client_lr": [0.01, 0.1]}}
    exp["algorithms"] = {"fedpals": {"lambdas": [0], "ess_fractions": [0.5]}, "fedavg": {}}
    validate_section(s, repo_root / "src/fedshift/papers/fedpals/schema.yaml", "fedpals")
    check_section(s, datasets)
    runs = resolved_runs(s, "fedpals_fmnist_c3")
    kinds = {r: (h["kind"], h["variant"], h["train"]["client_lr"]) for r, h in runs.items()}
    assert {k: v for k, v in kinds.items() if k.startswith("fedpals~lam0")} == {
        "fedpals~lam0~lr0p01": ("fedpals", {"lambda": 0.0}, 0.01),
        "fedpals~lam0~lr0p1": ("fedpals", {"lambda": 0.0}, 0.1)}
    assert kinds["fedavg~lr0p1"] == ("fedavg", None, 0.1)
    base = {r.rsplit("~", 1)[0] for r in runs}  # the defaults' algorithms (fedprox, scaffold, oracle) too
    assert {"fedpals~lam0", "fedpals~ess50", "fedavg", "oracle"} <= base
    assert sorted(runs) == sorted(f"{b}~{lr}" for b in base for lr in ("lr0p01", "lr0p1"))
    assert all("select" not in h["train"] for h in runs.values())
    exp["algorithms"]["fedavg"] = {"train": {"client_lr": 0.5}}
    with pytest.raises(ConfigError, match=r"algorithms\.fedavg\.train\.client_lr: set while .*select\.client_lr"):
        check_section(s, datasets)
    bad = copy.deepcopy(s)
    bad["experiments"]["fedpals_fmnist_c3"]["train"]["select"] = {"client_lr": [0]}
    with pytest.raises(ConfigError, match=r"fedpals\.experiments\.fedpals_fmnist_c3\.train\.select\.client_lr"):
        validate_section(bad, repo_root / "src/fedshift/papers/fedpals/schema.yaml", "fedpals")


def test_negative_lambda_fails_schema(section, repo_root):
    from fedshift.config import validate_section

    bad = copy.deepcopy(section)
    bad["experiments"]["fedpals_fmnist_c3"]["algorithms"] = {"fedpals": {"lambdas": [-1]}}
    with pytest.raises(ConfigError, match="fedpals.experiments.fedpals_fmnist_c3.algorithms.fedpals"):
        validate_section(bad, repo_root / "src/fedshift/papers/fedpals/schema.yaml", "fedpals")


def test_make_partition_target_validation_test_and_oracle():
    from fedshift.papers.fedpals import make_partition

    y_train, y_test = labels_pool(300), labels_pool(100)
    exp = {"dataset": "fashion_mnist", "num_clients": 10, "samples_per_label": 20,
           "label_shift": {"kind": "sparsity", "labels_per_client": 3}, "algorithms": {"oracle": {}}}
    p = make_partition(exp, y_train, y_test, seed=3)
    t = np.array(p["target"])
    support = set(np.flatnonzero(t > 0))
    assert len(p["clients"]) == 9 and len(support) == 3
    assert set(y_train[p["validation"]]) == support and set(y_test[p["test"]]) == support
    np.testing.assert_allclose(label_marginals(y_test, [np.array(p["test"])], 10)[0], t, atol=1e-12)
    oracle = np.concatenate(p["oracle"])
    assert len(np.intersect1d(p["validation"], oracle)) == 0 and len(np.unique(oracle)) == len(oracle)
    assert {len(o) for o in p["oracle"]} == {min(p["sizes"])}
    for o in p["oracle"]:
        np.testing.assert_allclose(label_marginals(y_train, [np.array(o)], 10)[0], t, atol=0.05)
    assert p["projection_distance"] == pytest.approx(projection_distance(t, p["marginals"]))
    assert make_partition(exp, y_train, y_test, seed=3) == p


def test_tables_choose_lambda_per_seed_on_validation():
    from fedshift.papers.fedpals.report import select_per_seed, table, table_runs

    rows = []
    for seed, (v0, t0, v1, t1) in enumerate([(0.9, 0.80, 0.7, 0.95), (0.6, 0.50, 0.8, 0.70)]):
        for alg, v, t in (("fedpals~lam0", v0, t0), ("fedpals~ess50", v1, t1), ("fedavg", 0.5, 0.4 + seed / 10)):
            kind = alg.split("~")[0]
            rows += [{"experiment": "e", "algorithm": alg, "kind": kind, "seed": seed, "split": "validation",
                      "metric": "accuracy", "value": v},
                     {"experiment": "e", "algorithm": alg, "kind": kind, "seed": seed, "split": "test",
                      "metric": "accuracy", "value": t}]
    import pandas as pd

    df = pd.DataFrame(rows)
    chosen = select_per_seed(df).set_index(["kind", "seed"])
    assert chosen.loc[("fedpals", 0), "algorithm"] == "fedpals~lam0"  # best validation, not best test
    assert chosen.loc[("fedpals", 1), "algorithm"] == "fedpals~ess50"
    spec = {"metric": "accuracy", "rows": [{"label": "E", "experiment": "e"}], "columns": ["fedpals", "fedavg"],
            "reference": {"E": {"fedpals": "1 ± 0"}}}
    tidy = table(df, spec).set_index("column")
    assert tidy.loc["fedpals", "mean"] == pytest.approx(75.0) and tidy.loc["fedpals", "seeds"] == 2
    per_seed = table_runs(df, spec).set_index(["column", "seed"])  # what the paired claims read
    assert per_seed.loc[("fedpals", 0), "value"] == pytest.approx(80.0)
    assert per_seed.loc[("fedpals", 1), "algorithm"] == "fedpals~ess50"
    assert per_seed.loc[("fedavg", 1), "value"] == pytest.approx(50.0) and set(per_seed["row"]) == {"E"}
    assert tidy.loc["fedpals", "std"] == pytest.approx(np.std([80, 70], ddof=1))
    assert tidy.loc["fedavg", "mean"] == pytest.approx(45.0) and tidy.loc["fedpals", "reference"] == "1 ± 0"
    # a macro-F1 table (iWildCam) chooses λ on validation macro-F1, the metric its runs stop early on
    f1 = df.assign(metric="macro_f1", value=lambda d: np.where(d["split"] == "validation", 1 - d["value"], d["value"]))
    both = pd.concat([df, f1], ignore_index=True)
    chosen_f1 = select_per_seed(both, "macro_f1").set_index(["kind", "seed"])
    assert chosen_f1.loc[("fedpals", 0), "algorithm"] == "fedpals~ess50"
    assert chosen_f1.loc[("fedpals", 1), "algorithm"] == "fedpals~lam0"
    assert select_per_seed(both).set_index(["kind", "seed"]).loc[("fedpals", 0), "algorithm"] == "fedpals~lam0"
    with pytest.raises(ValueError, match="lack"):
        select_per_seed(df, "macro_f1")


def test_accuracy_and_macro_f1_by_hand():
    from fedshift.papers.fedpals import accuracy_and_f1

    class Fixed(torch.nn.Module):  # logits = the inputs themselves
        def forward(self, x):
            return x

    y = torch.tensor([0, 0, 1, 1, 2])
    pred = torch.tensor([0, 1, 1, 1, 0])
    logits = torch.nn.functional.one_hot(pred, 4).double()
    out = accuracy_and_f1(Fixed(), {}, logits, y, num_labels=4)
    # class 0: tp 1, fp 1, fn 1 → F1 .5; class 1: tp 2, fp 1, fn 0 → .8; class 2: tp 0 → 0; class 3 absent
    assert out["accuracy"] == pytest.approx(3 / 5)
    assert out["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_images_are_channel_first_for_the_cnn():
    from fedshift.papers.fedpals import images as _images

    hwc = torch.arange(2 * 4 * 4 * 3, dtype=torch.uint8).reshape(2, 4, 4, 3)
    x, y = _images({"x_train": hwc, "y_train": torch.tensor([1, 2])}, "train", [1], {}, torch.device("cpu"))
    torch.testing.assert_close(x[0], hwc[1].permute(2, 0, 1).flatten().float())
    assert y.tolist() == [2]


def test_plugin_runs_carry_lambda_in_hparams_and_outputs_keep_their_paths(repo_root):
    """FedpalsPaper: typed runs whose hparams (not the id) carry λ to the QP; tables/figures at their paths."""

    from snakemake.utils import update_config

    from fedshift.contract import load_paper
    from fedshift.papers.fedpals import build_run_algorithm as _build

    cfg: dict = {}
    for f in ("config/datasets.yaml", "config/papers/fedpals.yaml", "config/quick.yaml"):
        update_config(cfg, load_yaml(repo_root / f))
    paper = load_paper("fedpals", cfg["papers"]["fedpals"], cfg)
    runs = {s.path: s for s in paper.runs()}
    s = runs["fedpals/fedpals_fmnist_c3/fedpals~ess50/seed~2"]
    assert s.hparams["variant"] == {"ess_fraction": 0.5} and s.algorithms == ("fedpals",)
    assert runs["fedpals/fedpals_fmnist_c2/oracle/seed~0"].algorithms == ("fedavg",)
    assert paper.inputs(s) == {"prepared": "data/prepared/fashion_mnist.pt",
                               "partition": "data/partitions/fedpals/fedpals_fmnist_c3/seed~2.json"}
    # the λ the QP gets is the hparams' value, whatever the id says
    part = {"target": [0.5, 0.5, 0.0], "marginals": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], "sizes": [30, 10]}
    relabelled = {**s.hparams, "algorithm": "fedpals~lam0", "variant": {"lambda": 3.0}}
    _, info = _build(relabelled, LogisticRegression(4, 3), part, num_clients=2)
    assert info["lambda"] == 3.0
    outs = {o.name: o for o in paper.outputs()}
    assert outs["fedpals_table1"].files == {**{x: f"results/tables/fedpals/table1.{x}" for x in ("csv", "md", "tex")},
                                            "runs": "results/tables/fedpals/table1_runs.csv"}
    assert outs["fedpals_fig4"].files["csv"] == "results/tables/fedpals/fig4_synthetic.csv"  # claims read these
    assert outs["fedpals_fig4"].inputs == [f"results/runs/fedpals/synthetic/seed~{k}/metrics.csv" for k in range(5)]
    # a report edit reruns the outputs, never a training job: the report module is an output-only module
    from fedshift.codehash import import_closure

    paper_file = Path(paper.module_file)
    assert "fedshift.papers.fedpals.report" in import_closure([paper_file])  # an output job's code covers it
    assert "fedshift.papers.fedpals.report" not in import_closure([paper_file], cut=paper.output_modules)
