"""The non-masking robust accuracy (fedshift.algorithms.robustness): APGD against the exact ℓ∞ value of an MLR.

On real MNIST (the data mirror): an MLR trained briefly, then its weights scaled ×50 and ×100 so that float32's
softmax saturates (p_y = 1 exactly on most rows, the input gradient of the cross-entropy exactly 0). The APGD of the
shift matrix's adversarial column must stay within 2 points of the exact robust accuracy there; the plain CE-PGD
(``pgd_linf``, WAFL's official attack) does not, which is the gradient masking these tests document.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fedshift.algorithms.adversarial import pgd_linf
from fedshift.algorithms.robustness import (
    accuracy,
    apgd_linf,
    dlr_loss,
    masking_report,
    mlr_robust_accuracy,
    mlr_robust_correct,
    targeted_margin,
)
from fedshift.data.mnist import load_mnist
from fedshift.models import LogisticRegression, TwoLayerCNN

GAP = 0.02  # the attack may sit at most 2 points above the exact robust accuracy


@pytest.fixture(scope="module")
def mnist(mirror_dir):
    d = load_mnist(mirror_dir / "mnist")
    x = torch.from_numpy(d["x_train"][:1000]).float().flatten(1) / 255
    y = torch.from_numpy(d["y_train"][:1000])
    xt = torch.from_numpy(d["x_test"][:400]).float().flatten(1) / 255
    yt = torch.from_numpy(d["y_test"][:400])
    return x, y, xt, yt


@pytest.fixture(scope="module")
def mlr(mnist):
    x, y, _, _ = mnist
    torch.manual_seed(0)
    m = LogisticRegression(784, 10)
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return m, {k: v.detach().clone() for k, v in m.named_parameters()}


def _scaled(params, scale):
    return {k: v * scale for k, v in params.items()}


def _ce_pgd(module, params, x, y, *, eps, steps, **_):
    """The matrix's former attack: CE-PGD, no random start, step ε/5 (the quick scale's 0.02 at ε = 0.1)."""
    return pgd_linf(module, params, x, y, eps=eps, step=eps / 5, steps=steps)


# ---- the exact value ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("box", [None, (0.0, 1.0)])
def test_exact_mlr_matches_every_vertex_of_the_ball(box):
    # a linear margin is smallest at a vertex of the (box ∩ ball), so a row is robust iff every vertex is classified
    # correctly; enumerate the 2^d vertices of a small problem
    g = torch.Generator().manual_seed(3)
    d, c, n, eps = 5, 4, 300, 0.2
    W, b = torch.randn(c, d, generator=g, dtype=torch.float64), 0.1 * torch.randn(c, generator=g, dtype=torch.float64)
    x = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = (x @ W.T + b + 0.3 * torch.randn(n, c, generator=g, dtype=torch.float64)).argmax(1)
    lo, hi = (x - eps, x + eps) if box is None else ((x - eps).clamp(min=box[0]), (x + eps).clamp(max=box[1]))
    want = torch.ones(n, dtype=torch.bool)
    for corner in itertools.product([0, 1], repeat=d):
        v = torch.where(torch.tensor(corner, dtype=torch.bool), hi, lo)
        z = v @ W.T + b
        zy = z.gather(1, y[:, None])
        want &= (zy > z.scatter(1, y[:, None], float("-inf"))).all(1)
    got = mlr_robust_correct(W, b, x, y, eps=eps, box=box)
    assert torch.equal(got, want)
    assert 0.5 < want.double().mean() < 0.7  # a mix of robust and broken rows (and the box matters: 0.57 vs 0.65)


def test_exact_mlr_at_eps_zero_is_the_clean_accuracy_and_the_box_only_helps(mlr, mnist):
    m, p = mlr
    _, _, xt, yt = mnist
    W, b = p["linear.weight"], p["linear.bias"]
    assert mlr_robust_accuracy(W, b, xt, yt, eps=0.0) == pytest.approx(accuracy(m, p, xt, yt))
    free = mlr_robust_correct(W, b, xt, yt, eps=0.03)
    boxed = mlr_robust_correct(W, b, xt, yt, eps=0.03, box=(0.0, 1.0))
    assert bool((boxed | ~free).all()) and boxed.sum() > free.sum()  # robust without the box ⇒ robust with it


def test_exact_mlr_rejects_bad_input(mlr, mnist):
    _, p = mlr
    _, _, xt, yt = mnist
    W, b = p["linear.weight"], p["linear.bias"]
    with pytest.raises(ValueError, match="eps"):
        mlr_robust_accuracy(W, b, xt, yt, eps=-0.1)
    with pytest.raises(ValueError, match="shapes"):
        mlr_robust_accuracy(W, b, xt[:, :100], yt, eps=0.1)
    with pytest.raises(ValueError, match="box"):
        mlr_robust_accuracy(W, b, xt, yt, eps=0.1, box=(0.0, 0.5))  # pixels above 0.5 lie outside


# ---- the attack against it ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [1, 50, 100])
@pytest.mark.parametrize("eps", [0.03, 0.1])
def test_apgd_is_within_two_points_of_the_exact_mlr_robust_accuracy(mlr, mnist, scale, eps):
    m, p = mlr
    _, _, xt, yt = mnist
    p = _scaled(p, scale)
    exact = mlr_robust_accuracy(p["linear.weight"], p["linear.bias"], xt, yt, eps=eps)
    got = accuracy(m, p, apgd_linf(m, p, xt, yt, eps=eps, steps=10, seed=1), yt)
    assert exact - 1e-9 <= got <= exact + GAP, (scale, eps, got, exact)


@pytest.mark.parametrize("scale", [1, 50, 100])
def test_the_quick_matrix_attack_is_within_two_points_too(mlr, mnist, scale):
    # config/quick.yaml: APGD-DLR then APGD-CE, no targeted runs (their cost on the CNN), 10 steps, ε = 0.1 and 0.03
    m, p = mlr
    _, _, xt, yt = mnist
    p = _scaled(p, scale)
    for eps in (0.03, 0.1):
        exact = mlr_robust_accuracy(p["linear.weight"], p["linear.bias"], xt, yt, eps=eps)
        got = accuracy(m, p, apgd_linf(m, p, xt, yt, eps=eps, steps=10, targets=0, seed=2), yt)
        assert exact - 1e-9 <= got <= exact + GAP, (scale, eps, got, exact)


@pytest.mark.parametrize("scale", [50, 100])
def test_ce_pgd_masks_on_a_saturated_mlr(mlr, mnist, scale):
    m, p = mlr
    _, _, xt, yt = mnist
    p = _scaled(p, scale)
    with torch.no_grad():
        prob = torch.softmax(xt @ p["linear.weight"].T + p["linear.bias"], 1)
    assert float((prob.gather(1, yt[:, None]) == 1.0).double().mean()) > 0.5  # float32 softmax saturates
    exact = mlr_robust_accuracy(p["linear.weight"], p["linear.bias"], xt, yt, eps=0.03)
    ce = accuracy(m, p, _ce_pgd(m, p, xt, yt, eps=0.03, steps=10), yt)
    apgd = accuracy(m, p, apgd_linf(m, p, xt, yt, eps=0.03, steps=10, seed=0), yt)
    # the matrix page quotes these (pytest -s -k ce_pgd_masks tests/unit/test_robustness.py prints them)
    print(f"weights x{scale}, eps 0.03: exact {exact:.1%}, APGD {apgd:.1%}, CE-PGD {ce:.1%}")
    assert ce > exact + GAP  # the masking: the old attack fails the check the new one passes
    assert ce - exact > 0.3


def test_apgd_respects_the_box_and_the_boxed_exact_value(mlr, mnist):
    m, p = mlr
    _, _, xt, yt = mnist
    p = _scaled(p, 50)
    box = (0.0, 1.0)
    xa = apgd_linf(m, p, xt, yt, eps=0.05, steps=10, box=box)
    assert float((xa - xt).abs().max()) <= 0.05 + 1e-7 and float(xa.min()) >= 0.0 and float(xa.max()) <= 1.0
    exact = mlr_robust_accuracy(p["linear.weight"], p["linear.bias"], xt, yt, eps=0.05, box=box)
    assert exact - 1e-9 <= accuracy(m, p, xa, yt) <= exact + GAP
    free = apgd_linf(m, p, xt, yt, eps=0.05, steps=10)
    assert float(free.min()) < 0.0  # no box by default (the matrix's threat model): pixels leave [0, 1]


def test_apgd_stays_in_the_ball_is_seeded_and_leaves_numpy_alone(mlr, mnist):
    m, p = mlr
    _, _, xt, yt = mnist
    x, y = xt[:100], yt[:100]
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a = apgd_linf(m, p, x, y, eps=0.02, steps=5, seed=[4, 1])
    assert np.array_equal(np.random.get_state()[1], before)
    b = apgd_linf(m, p, x, y, eps=0.02, steps=5, seed=[4, 1])
    assert torch.equal(a, b) and a.dtype == x.dtype
    assert float((a - x).abs().max()) <= 0.02 + 1e-7
    assert torch.equal(apgd_linf(m, p, x, y, eps=0.0, steps=5), x)
    xd, pd = x.double(), {k: v.double() for k, v in p.items()}  # float64 models: cast through ART's float32
    assert apgd_linf(m, pd, xd, y, eps=0.02, steps=5).dtype == torch.float64


def test_apgd_rejects_bad_input(mlr, mnist):
    m, p = mlr
    _, _, xt, yt = mnist
    for kw, match in (({"eps": -1.0}, "eps"), ({"steps": 0}, "steps"), ({"losses": ["cw"]}, "unknown"),
                      ({"box": (1.0, 0.0)}, "box"), ({"targets": -1}, "targets")):
        with pytest.raises(ValueError, match=match):
            apgd_linf(m, p, xt, yt, **({"eps": 0.1, "steps": 3} | kw))
    with pytest.raises(ValueError, match="y must"):
        apgd_linf(m, p, xt, yt[:-1], eps=0.1, steps=3)


def test_dlr_is_scale_invariant_and_its_gradient_survives_saturation():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(8, 10, generator=g)
    y = torch.randint(0, 10, (8,), generator=g)
    assert torch.allclose(dlr_loss(100 * z + 3, y), dlr_loss(z, y), atol=1e-5)
    assert torch.allclose(targeted_margin(100 * z, y), targeted_margin(z, y), atol=1e-5)
    assert bool(((targeted_margin(z, y) < 0) == (z.argmax(1) == y)).all())
    big = (1000 * z).requires_grad_(True)
    yy = big.argmax(1).detach()  # correctly classified and saturated: softmax(p_y) == 1 in float32
    torch.nn.functional.cross_entropy(big, yy, reduction="sum").backward()
    assert float(big.grad.abs().max()) == 0.0
    big.grad = None
    dlr_loss(big, yy).sum().backward()
    assert bool((big.grad.abs().sum(1) > 0).all())
    with pytest.raises(ValueError, match="C >= 3"):
        dlr_loss(z[:, :2], torch.zeros(8, dtype=torch.long))


# ---- gradient-masking checks (Carlini et al. 2019) ----------------------------------------------------------------

def test_masking_report_passes_apgd_and_fails_ce_pgd_on_a_saturated_mlr(mlr, mnist):
    m, p = mlr
    _, _, xt, yt = mnist
    p = _scaled(p, 50)
    good = masking_report(m, p, xt, yt, eps=0.03, steps=(2, 5, 10, 20))
    assert good["passed"] and good["monotone"] and good["large_eps_zero"] and good["not_above_exact"]
    acc = list(good["by_steps"].values())
    assert all(b <= a + 0.01 for a, b in zip(acc, acc[1:], strict=False)) and good["large_eps_accuracy"] == 0.0
    bad = masking_report(m, p, xt, yt, eps=0.03, steps=(2, 5, 10, 20), attack=_ce_pgd)
    assert not bad["passed"] and not bad["large_eps_zero"] and not bad["not_above_exact"]
    assert bad["large_eps_accuracy"] > 0.5  # a zero gradient moves nothing at any ε
    with pytest.raises(ValueError, match="increasing"):
        masking_report(m, p, xt, yt, eps=0.03, steps=(10, 5))
    with pytest.raises(ValueError, match="large_eps"):
        masking_report(m, p, xt, yt, eps=0.03, large_eps=0.01)


def test_masking_checks_on_a_saturated_cnn(mnist):
    x, y, xt, yt = mnist
    torch.manual_seed(0)
    m = TwoLayerCNN(10, 1, 28)
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    for _ in range(25):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x[:500]), y[:500]).backward()
        opt.step()
    p = {k: v.detach() * (50 if k.startswith("fc") else 1) for k, v in m.named_parameters()}
    xs, ys = xt[:150], yt[:150]
    assert accuracy(m, p, xs, ys) > 0.6
    rep = masking_report(m, p, xs, ys, eps=0.1, steps=(3, 6, 12))
    assert rep["passed"] and "exact" not in rep
    ce = accuracy(m, p, _ce_pgd(m, p, xs, ys, eps=0.1, steps=12), ys)
    assert rep["by_steps"][12] < ce  # APGD finds more than the saturated CE-PGD
