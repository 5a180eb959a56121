"""Batched vs sequential local training: identical batches, equal results (float64 to 1e-10)."""

import numpy as np
import pytest
import torch

from fedshift.algorithms.fedavg import build_fedavg, sample_clients
from fedshift.core.aggregate import weighted_mean
from fedshift.core.base import ClientData
from fedshift.core.engine import ClientPool, FilePool, local_sgd, make_batches
from fedshift.core.rng import RoundKey
from fedshift.models import LogisticRegression, McMahanCNN, init_params


def make_clients(sizes, dtype, d=784, classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [ClientData(i, torch.randn(n, d, generator=g).to(dtype), torch.randint(0, classes, (n,), generator=g), 0)
            for i, n in enumerate(sizes)]


def run_fedavg(module, clients, path, dtype, rounds=3, **kw):
    alg = build_fedavg(module, path=path, **kw)
    state = alg.init(init_params(module, 0, dtype=dtype))
    for r in range(rounds):
        state, _ = alg.apply(state, clients, RoundKey(11, r))
    return state.params


@pytest.mark.parametrize(
    ("model", "dtype", "tol"),
    [("mlr", torch.float64, 1e-10), ("cnn", torch.float64, 1e-10), ("mlr", torch.float32, 1e-5)],
)
def test_fedavg_batched_equals_sequential(model, dtype, tol):
    # unequal client sizes: partial last batches and different step counts per client
    sizes = [23, 17, 30, 12, 25] if model == "mlr" else [9, 6, 11]
    clients = make_clients(sizes, dtype)
    module = (LogisticRegression(784, 10) if model == "mlr" else McMahanCNN(10)).to(dtype)
    kw = dict(clients_per_round=3, local_epochs=2, batch_size=5, client_lr=0.05)
    a = run_fedavg(module, clients, "batched", dtype, **kw)
    b = run_fedavg(module, clients, "sequential", dtype, **kw)
    for k in a:
        assert (a[k] - b[k]).abs().max() <= tol * max(1.0, float(b[k].abs().max())), k
    # and the model did move
    init = init_params(module, 0, dtype=dtype)
    assert any((a[k] - init[k]).abs().max() > 1e-3 for k in a)


def test_hooks_per_client_state_agree_on_both_paths():
    clients = make_clients([14, 9, 20], torch.float64, d=6, classes=3)
    pool = ClientPool.from_clients(clients)
    module = LogisticRegression(6, 3).to(torch.float64)
    w0 = init_params(module, 1, dtype=torch.float64)
    ids = [2, 0]
    control = {k: torch.randn(2, *v.shape, dtype=torch.float64) for k, v in w0.items()}  # per-client c_i
    mu = 0.3

    def prox(p, ctx):  # FedProx: μ/2 ||w − w_g||²
        return 0.5 * mu * sum(((p[k] - ctx["shared"]["global"][k]) ** 2).sum() for k in p)

    def correct(g, ctx):  # SCAFFOLD-like: g − c_i; keys deliberately in reverse order
        return {k: g[k] - ctx["per_client"]["c"][k] for k in reversed(list(g))}

    out = {}
    for path in ("batched", "sequential"):
        out[path] = local_sgd(module, w0, pool, ids, RoundKey(3, 0), epochs=1, batch_size=4, lr=0.1, path=path,
                              regularizer=prox, grad_transform=correct, shared={"global": w0},
                              per_client={"c": control})
    for k in w0:
        torch.testing.assert_close(out["batched"].params[k], out["sequential"].params[k], rtol=0, atol=1e-12)
    torch.testing.assert_close(out["batched"].loss, out["sequential"].loss, rtol=0, atol=1e-12)
    assert out["batched"].steps.tolist() == [5, 4]
    with pytest.raises(ValueError, match="leading size"):
        local_sgd(module, w0, pool, [0], RoundKey(3, 0), epochs=1, batch_size=4, lr=0.1,
                  per_client={"c": control})


def test_per_client_rows_read_in_place_give_the_gathered_result_on_every_path():
    # SCAFFOLD's state keeps c_i for all N clients; the round reads the sampled rows instead of a copy
    clients = make_clients([14, 9, 20, 6], torch.float64, d=6, classes=3)
    pool = ClientPool.from_clients(clients)
    module = LogisticRegression(6, 3).to(torch.float64)
    w0 = init_params(module, 1, dtype=torch.float64)
    ids = [3, 0, 2]
    everyone = {k: torch.randn(4, *v.shape, dtype=torch.float64) for k, v in w0.items()}  # (N, ...)
    gathered = {k: v[ids].clone() for k, v in everyone.items()}                         # (C, ...)
    before = {k: v.clone() for k, v in everyone.items()}

    def correct(g, ctx):
        return {k: g[k] - ctx["per_client"]["c"][k] for k in g}

    for path in ("batched", "sequential"):
        kw = dict(epochs=1, batch_size=4, lr=0.1, path=path, grad_transform=correct)
        want = local_sgd(module, w0, pool, ids, RoundKey(3, 0), per_client={"c": gathered}, **kw)
        got = local_sgd(module, w0, pool, ids, RoundKey(3, 0), per_client={"c": everyone}, per_client_rows=ids, **kw)
        for k in w0:
            assert torch.equal(got.params[k], want.params[k]), (path, k)
        # the rows matter: another assignment of rows gives another result
        other = local_sgd(module, w0, pool, ids, RoundKey(3, 0), per_client={"c": everyone},
                          per_client_rows=[0, 3, 2], **kw)
        assert not torch.equal(other.params["linear.weight"], want.params["linear.weight"])
    for k in w0:  # read, never written
        assert torch.equal(everyone[k], before[k])
    with pytest.raises(ValueError, match="per_client_rows has 2 rows"):
        local_sgd(module, w0, pool, ids, RoundKey(3, 0), epochs=1, batch_size=4, lr=0.1,
                  per_client={"c": everyone}, per_client_rows=[3, 0])
    with pytest.raises(ValueError, match="outside the 4 rows"):
        local_sgd(module, w0, pool, ids, RoundKey(3, 0), epochs=1, batch_size=4, lr=0.1,
                  per_client={"c": everyone}, per_client_rows=[3, 0, 4])


class _SeededVectors(torch.utils.data.Dataset):
    """Item ``(row, seed) -> (x, y)``: a 6-vector drawn from ``seed`` (the augmentation), label ``row`` mod 3."""

    def __getitem__(self, item):
        row, seed = item
        return torch.randn(6, generator=torch.Generator().manual_seed(seed)) + row % 3, row % 3


def _one_client_alone(module, w0, dataset, lo, n, c, key, epochs, batch_size, lr):
    """The streamed path's definition for one client, trained on its own: batches of ``key.numpy(c, e)``'s order,
    augmentation seeds from ``key.numpy(c, e, 1)``, a fresh Adam, the loss averaged over steps in Python floats."""
    with torch.no_grad():
        for k, v in module.named_parameters():
            v.copy_(w0[k])
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    total, steps = 0.0, 0
    for e in range(epochs):
        perm = key.numpy(c, e).permutation(n)
        seeds = key.numpy(c, e, 1).integers(0, 2**31 - 1, size=n)
        for b in range(0, n, batch_size):
            x, y = torch.utils.data.default_collate([dataset[(lo + int(j), int(seeds[j]))]
                                                     for j in perm[b : b + batch_size]])
            loss = torch.nn.functional.cross_entropy(module(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, steps = total + float(loss.detach()), steps + 1
    return {k: v.detach().clone() for k, v in module.named_parameters()}, total / steps, steps


def test_streamed_round_with_one_loader_equals_each_client_trained_alone():
    # One DataLoader per round (workers start once, not per client) must not mix clients' batches or seeds.
    dataset, offsets = _SeededVectors(), np.array([0, 7, 10, 21, 26])
    module = LogisticRegression(6, 3)
    w0 = init_params(module, 2)
    ids, key = [2, 0, 3], RoundKey(5, 1)
    want = [_one_client_alone(module, w0, dataset, int(offsets[c]), int(offsets[c + 1] - offsets[c]), c, key,
                              2, 4, 0.05) for c in ids]
    for workers in (0, 2):
        pool = FilePool(dataset, offsets, torch.device("cpu"), client_optimizer="adam", num_workers=workers)
        got = local_sgd(module, w0, pool, ids, key, epochs=2, batch_size=4, lr=0.05)
        assert list(got.steps) == [w[2] for w in want] == [6, 4, 4]
        for i, (params, loss, _) in enumerate(want):
            for k in w0:
                assert torch.equal(got.params[k][i], params[k]), (workers, i, k)
            assert got.loss[i] == torch.tensor(loss, dtype=torch.float32), (workers, i)
    assert not torch.equal(got.params["linear.weight"][0], got.params["linear.weight"][1])


@pytest.mark.parametrize("path", ["batched", "sequential", "streamed"])
def test_on_client_hands_over_each_client_model_once_in_order_and_keeps_none(path):
    # A reduction that needs each client model once (SCAFFOLD on a FilePool) gets exactly the rows the
    # stacked result holds, with each client's K_i, and the round keeps no (C, ...) copy of them.
    dataset, offsets = _SeededVectors(), np.array([0, 7, 10, 21, 26])
    module = LogisticRegression(6, 3)
    w0 = init_params(module, 2)
    ids, key = [2, 0, 3], RoundKey(5, 1)
    if path == "streamed":
        pool = FilePool(dataset, offsets, torch.device("cpu"))
    else:
        xs, ys = zip(*(dataset[(j, j)] for j in range(26)), strict=True)
        pool = ClientPool(torch.stack(xs), torch.as_tensor(ys), offsets)
    kw = dict(epochs=2, batch_size=4, lr=0.05, path="sequential" if path == "streamed" else path)
    want = local_sgd(module, w0, pool, ids, key, **kw)
    seen = []

    def on_client(i, params, steps):
        assert not torch.is_grad_enabled()
        seen.append((i, {k: v.clone() for k, v in params.items()}, steps))

    got = local_sgd(module, w0, pool, ids, key, on_client=on_client, **kw)
    assert got.params == {}
    assert [i for i, _, _ in seen] == [0, 1, 2] and [s for _, _, s in seen] == list(want.steps) == [6, 4, 4]
    for i, params, _ in seen:
        for k in w0:
            assert torch.equal(params[k], want.params[k][i]), (i, k)
    assert torch.equal(got.loss, want.loss)


def test_batches_cover_each_client_once_per_epoch_and_depend_on_the_key():
    clients = make_clients([7, 12], torch.float32, d=2)
    pool = ClientPool.from_clients(clients)
    b = make_batches(pool, [1, 0], RoundKey(0, 5), epochs=2, batch_size=3)
    assert b.index.shape == (2, 8, 3) and b.steps.tolist() == [8, 6]
    for i, (c, n) in enumerate([(1, 12), (0, 7)]):
        per_epoch = -(-n // 3)
        for e in range(2):
            rows = b.index[i, e * per_epoch:(e + 1) * per_epoch][b.weight[i, e * per_epoch:(e + 1) * per_epoch] > 0]
            assert sorted(rows.tolist()) == list(range(int(pool.offsets[c]), int(pool.offsets[c]) + n))
    again = make_batches(pool, [1, 0], RoundKey(0, 5), epochs=2, batch_size=3)
    other = make_batches(pool, [1, 0], RoundKey(0, 6), epochs=2, batch_size=3)
    assert torch.equal(b.index, again.index) and not torch.equal(b.index, other.index)


def test_client_sampling_and_weighted_mean():
    ids = sample_clients(RoundKey(0, 3), 100, 10)
    assert len(set(ids)) == 10 and ids == sample_clients(RoundKey(0, 3), 100, 10)
    assert ids != sample_clients(RoundKey(0, 4), 100, 10)
    stacked = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}
    torch.testing.assert_close(weighted_mean(stacked, torch.tensor([1.0, 3.0]))["w"], torch.tensor([2.5, 5.0]))
    with pytest.raises(ValueError):
        weighted_mean(stacked, torch.tensor([0.0, 0.0]))
