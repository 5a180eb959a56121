"""Functional optimisers against torch.optim on the same gradients."""

import pytest
import torch

from fedshift.core.optim import build_optimizer

CASES = [
    ("sgd", {"lr": 0.1}, torch.optim.SGD, {"lr": 0.1}),
    ("sgd", {"lr": 0.1, "momentum": 0.9}, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    ("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True}, torch.optim.SGD,
     {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("adagrad", {"lr": 0.1}, torch.optim.Adagrad, {"lr": 0.1}),
    ("adam", {"lr": 0.01}, torch.optim.Adam, {"lr": 0.01}),
]


@pytest.mark.parametrize(("name", "ours", "ref_cls", "ref_kw"), CASES)
def test_matches_torch_optim(name, ours, ref_cls, ref_kw):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 3, dtype=torch.float64, generator=g)
    target = torch.randn(4, 3, dtype=torch.float64, generator=g)
    params = {"w": a.clone(), "b": torch.zeros(3, dtype=torch.float64)}
    ref = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    opt = build_optimizer(name, **ours)
    ref_opt = ref_cls(list(ref.values()), **ref_kw)
    state = opt.init(params)

    def loss(p):
        return ((p["w"] + p["b"] - target) ** 4).sum()

    for _ in range(6):
        pr = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        grads = dict(zip(pr, torch.autograd.grad(loss(pr), list(pr.values())), strict=True))
        params, state = opt.step(params, grads, state)
        ref_opt.zero_grad()
        loss(ref).backward()
        ref_opt.step()
    for k in params:
        torch.testing.assert_close(params[k], ref[k].detach(), rtol=1e-12, atol=1e-12)


def test_step_is_pure():
    p = {"w": torch.ones(2)}
    opt = build_optimizer("adam", lr=0.1)
    s = opt.init(p)
    new, s2 = opt.step(p, {"w": torch.ones(2)}, s)
    assert torch.equal(p["w"], torch.ones(2)) and s["t"] == 0 and s2["t"] == 1
    assert not torch.equal(new["w"], p["w"])


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_optimizer("rmsprop", lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        build_optimizer("sgd", lr=0.0)
    with pytest.raises(ValueError, match="nesterov"):
        build_optimizer("sgd", lr=0.1, nesterov=True)
