"""Robust accuracy that does not mask: APGD with the DLR and CE losses, the exact ℓ∞ value of an MLR, and checks.

Why not cross-entropy PGD (:func:`fedshift.algorithms.adversarial.pgd_linf`) for an *evaluation*: its input gradient
is (softmax(z) − onehot(y))ᵀ ∂z/∂x, and on a saturated model float32's softmax rounds p_y to exactly 1, so the
gradient is exactly 0 and sign(0) = 0 leaves the point where it is. An MLR trained with a large server step
(FedAdam, server step 1.0) has p_y = 1 on most test points; CE-PGD then reports a robust accuracy tens of points
above the exact one (:func:`mlr_robust_accuracy`), and a random start does not help. This is gradient masking
(Athalye, Carlini and Wagner, ICML 2018; Carlini et al. 2019, "On Evaluating Adversarial Robustness",
arXiv:1902.06705, §5.2).

:func:`apgd_linf` runs Auto-PGD (Croce and Hein, ICML 2020, arXiv:2003.01690, Algorithm 1: momentum, a step size
that starts at 2ε and halves at checkpoints where the loss stalls, a random start) first with the **DLR loss** (their
eq. 6), −(z_y − max_{i≠y} z_i) / (z_π1 − z_π3), which is computed from the logits z and is invariant to their scale:
its gradient does not vanish when softmax saturates. Then, as AutoAttack's cascade, APGD with the cross-entropy
loss on the points the first run left correctly classified; a point counts as broken if either run breaks it.

Library: the Adversarial Robustness Toolbox (ART, ``adversarial-robustness-toolbox``, LF AI & Data; pinned in
``envs/requirements.txt``), whose :class:`art.attacks.evasion.AutoProjectedGradientDescent` is used with this
module's vectorised DLR loss as the estimator's loss (ART's own ``loss_type="difference_logits_ratio"`` computes it
with a Python loop over the examples and an n × n gather, 10× slower here; the APGD iteration, projection and
step-size rule are ART's). Of the three maintained libraries: torchattacks 3.5.1 pins ``requests~=2.25.1`` (this
environment needs requests 2.34) and clamps every input to [0, 1] and rejects inputs outside it (the matrix applies
no box, below); foolbox 3.3.4 has neither APGD nor a margin loss for ℓ∞ PGD. ART takes ``clip_values=None``.

The threat model is the one the shift matrix has used (``config/papers/shift_matrix.yaml``, shift ``adversarial``,
``pgd.eps``): the ℓ∞ ball of radius ε around x in the model's input units (pixels in [0, 1]), **no box**: as WAFL's
official code (``dual-grp/WAFL``, ``FLAlgorithms/users/userbase.py``), nothing clips x' to [0, 1]. ``box=(lo, hi)``
adds the box. For an MLR, :func:`mlr_robust_accuracy` is then the exact robust accuracy in closed form for either
threat model (the value without the box is a lower bound on the value with it: the box only shrinks the set the
adversary chooses from).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fedshift.core.base import Params
from fedshift.models import LogisticRegression

__all__ = ["dlr_loss", "targeted_margin", "apgd_linf", "mlr_robust_correct", "mlr_robust_accuracy", "accuracy",
           "masking_report", "LOSSES"]

#: APGD's runs in cascade order: DLR (margin, scale-invariant) first, cross-entropy on the survivors, then the
#: targeted margin towards each of the ``targets`` classes of highest clean logit.
LOSSES = ("dlr", "ce", "dlr_targeted")


def dlr_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The Difference-of-Logits-Ratio loss, per example (Croce and Hein 2020, eq. 6), computed on logits.

    DLR(z, y) = −(z_y − max_{i≠y} z_i) / (z_π1 − z_π3 + 1e-12), with z_π1 ≥ z_π2 ≥ z_π3 the sorted logits. Positive
    where the point is misclassified; invariant to shifting and (positively) scaling z, so its gradient does not
    vanish where float32's softmax saturates (unlike the cross-entropy's p − onehot).

    Parameters
    ----------
    logits : Tensor, shape (n, C), C ≥ 3
        The model's logits z (not probabilities).
    y : Tensor, shape (n,) int64 labels, or (n, C) one-hot
        The true classes.

    Returns
    -------
    Tensor, shape (n,)

    Raises
    ------
    ValueError
        For C < 3 (z_π3 does not exist).
    """
    if logits.ndim != 2 or logits.shape[1] < 3:
        raise ValueError(f"DLR needs logits of shape (n, C) with C >= 3, got {tuple(logits.shape)}")
    if y.ndim == 2:
        y = y.argmax(1)
    top = logits.topk(3, dim=1).values
    z_y = logits.gather(1, y[:, None])[:, 0]
    others = logits.scatter(1, y[:, None], float("-inf")).amax(1)
    return -(z_y - others) / (top[:, 0] - top[:, 2] + 1e-12)


def targeted_margin(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The targeted margin, scaled like DLR: (max_{i≠t} z_i − z_t) / (z_π1 − z_π3 + 1e-12), per example.

    Negative iff the target t has the largest logit; minimised by the targeted APGD runs of :func:`apgd_linf` (the
    margin of Carlini and Wagner 2017, eq. 6 with κ = 0, divided by DLR's scale so that it too is invariant to the
    logits' scale; AutoAttack's targeted DLR needs the true class as well, which ART's targeted runs do not pass).

    Parameters
    ----------
    logits : Tensor, shape (n, C), C ≥ 3
    target : Tensor, shape (n,), int64

    Returns
    -------
    Tensor, shape (n,)
    """
    top = logits.topk(3, dim=1).values
    z_t = logits.gather(1, target[:, None])[:, 0]
    others = logits.scatter(1, target[:, None], float("-inf")).amax(1)
    return (others - z_t) / (top[:, 0] - top[:, 2] + 1e-12)


class _Loss(nn.Module):
    """A per-example loss with ART's ``reduction`` attribute (ART sets it to "none" for the loss values)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.reduction = kind, "mean"

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = target.argmax(1) if target.ndim == 2 else target.long()
        if self.kind == "dlr":
            v = dlr_loss(logits, y)
        elif self.kind == "dlr_targeted":  # y is the target t here: ART descends it
            v = targeted_margin(logits, y)
        else:
            v = nn.functional.cross_entropy(logits, y, reduction="none")
        return v.mean() if self.reduction == "mean" else v.sum() if self.reduction == "sum" else v


class _Bound(nn.Module):
    """``module`` applied with ``params`` (constants), inputs cast to the parameters' dtype (ART works in float32)."""

    def __init__(self, module: nn.Module, params: Params) -> None:
        super().__init__()
        self.module, self.params = module, params
        self.dtype = next(iter(params.values())).dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.func.functional_call(self.module, self.params, (x.to(self.dtype),))


def accuracy(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of rows of ``x`` (n, ...) whose argmax logit is ``y`` (n,)."""
    with torch.no_grad():
        return float((torch.func.functional_call(module, params, (x,)).argmax(1) == y).double().mean())


def apgd_linf(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, *, eps: float, steps: int,
              restarts: int = 1, losses: Sequence[str] = LOSSES, targets: int = 3, seed: int | Sequence[int] = 0,
              box: tuple[float, float] | None = None, batch_size: int = 1024) -> torch.Tensor:
    """Untargeted ℓ∞ Auto-PGD, DLR then cross-entropy on the survivors (module docstring; ART's implementation).

    For each loss in ``losses``, ART's APGD (Croce and Hein 2020, Algorithm 1; ``restarts`` random starts, each
    ``steps`` iterations from a uniform point of the ball, initial step 2ε) runs on the rows still correctly
    classified; a row broken by one run keeps that run's x'. Rows misclassified at x stay at x. The untargeted DLR
    run goes toward the class nearest at the current point, which for a linear model need not be the class whose
    margin the ball can close; the targeted runs close that gap (on a saturated MLR, 1.4 points above the exact
    value without them, 0.2 with 3 targets).

    Parameters
    ----------
    module, params
        The model, applied functionally with ``params`` (constants; no batch statistics), giving logits (n, C).
    x : Tensor, shape (n, ...)
        Clean inputs, in the model's input units.
    y : Tensor, shape (n,), int64
        Labels.
    eps : float
        ε ≥ 0, the radius of the ℓ∞ ball (input units). ε = 0 returns a copy of ``x``.
    steps : int
        APGD iterations per run, ≥ 1.
    restarts : int
        Random starts per loss, ≥ 1.
    losses : sequence of {"dlr", "ce", "dlr_targeted"}
        The cascade: untargeted APGD on DLR, on the cross-entropy, and targeted APGD on :func:`targeted_margin`
        (AutoAttack's APGD-CE and APGD-T, with DLR first as it is the one that does not mask).
    targets : int
        Target classes of the targeted runs: per row the ``targets`` classes of highest clean logit other than y,
        one run each on the rows still correct (AutoAttack: 9); 0 skips the targeted runs. Their cost: on a CNN
        whose rows mostly survive, each is one more APGD run over them (``benchmarks/adversarial_attack_cost.py``).
    seed : int or sequence of int
        Seeds the random starts (ART draws them from NumPy's global generator, whose state is restored after).
    box : (lo, hi) or None
        Clip x' to [lo, hi] as well (None: no box, the shift matrix's threat model).
    batch_size : int
        Rows per APGD batch (memory only; the random starts are drawn for all rows at once).

    Returns
    -------
    Tensor
        x' (detached, dtype and device of ``x``) with ‖x' − x‖∞ ≤ ε (and lo ≤ x' ≤ hi with a box).

    Raises
    ------
    ValueError
        For ε < 0, steps < 1, restarts < 1, targets < 0, an unknown loss, a box with lo ≥ hi, or y not of shape (n,).
    """
    from art.attacks.evasion import AutoProjectedGradientDescent
    from art.estimators.classification import PyTorchClassifier

    if eps < 0 or steps < 1 or restarts < 1 or targets < 0:
        raise ValueError(f"need eps >= 0, steps >= 1, restarts >= 1, targets >= 0; got {eps}, {steps}, {restarts}, "
                         f"{targets}")
    if unknown := set(losses) - set(LOSSES):
        raise ValueError(f"unknown APGD loss(es) {sorted(unknown)}; known: {list(LOSSES)}")
    if box is not None and not box[0] < box[1]:
        raise ValueError(f"box must be (lo, hi) with lo < hi, got {box}")
    if y.ndim != 1 or len(y) != len(x):
        raise ValueError(f"y must have shape ({len(x)},), got {tuple(y.shape)}")
    x = x.detach()
    if eps == 0 or len(x) == 0:
        return x.clone()
    bound = _Bound(module, {k: v.detach() for k, v in params.items()})
    with torch.no_grad():
        num_classes = bound(x[:1]).shape[1]
    x_np = x.to(torch.float32).cpu().numpy()
    y_np = y.cpu().numpy()
    onehot = np.eye(num_classes, dtype=np.float32)[y_np]
    with torch.no_grad():  # per row, the classes other than y by decreasing clean logit (the targets)
        clean = bound(x).double().scatter(1, y[:, None], float("-inf"))
        ranked = clean.argsort(1, descending=True).cpu().numpy()
    adv = x_np.copy()
    state = np.random.get_state()
    np.random.seed(np.random.SeedSequence([int(s) for s in np.atleast_1d(seed)]).generate_state(4))
    try:
        for kind in losses:
            with torch.no_grad():
                alive = (bound(torch.from_numpy(adv).to(x.device)).argmax(1) == y).cpu().numpy()
            if not alive.any():
                break
            clf = PyTorchClassifier(bound, loss=_Loss(kind), input_shape=tuple(x.shape[1:]), nb_classes=num_classes,
                                    clip_values=box, device_type="gpu" if x.is_cuda else "cpu")
            attack = AutoProjectedGradientDescent(clf, norm=np.inf, eps=float(eps), eps_step=2.0 * float(eps),
                                                  max_iter=int(steps), nb_random_init=int(restarts),
                                                  batch_size=int(batch_size), loss_type=None, verbose=False,
                                                  targeted=kind == "dlr_targeted")
            if kind != "dlr_targeted":
                adv[alive] = attack.generate(x_np[alive], onehot[alive])
                continue
            for k in range(min(targets, num_classes - 1)):  # the k-th highest clean logit other than y
                with torch.no_grad():
                    alive = (bound(torch.from_numpy(adv).to(x.device)).argmax(1) == y).cpu().numpy()
                if not alive.any():
                    break
                rows = np.flatnonzero(alive)
                target = ranked[rows, k]
                got = attack.generate(x_np[rows], np.eye(num_classes, dtype=np.float32)[target])
                with torch.no_grad():
                    hit = (bound(torch.from_numpy(got).to(x.device)).argmax(1).cpu().numpy() != y_np[rows])
                adv[rows[hit]] = got[hit]
    finally:
        np.random.set_state(state)
    out = torch.from_numpy(adv).to(device=x.device, dtype=x.dtype)
    out = x + (out - x).clamp(-eps, eps)  # exact ball in x's dtype (ART projected in float32)
    return (out.clamp(*box) if box is not None else out).detach()


def mlr_robust_correct(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, eps: float,
                       box: tuple[float, float] | None = None) -> torch.Tensor:
    """Which rows an MLR classifies correctly at *every* point of the ℓ∞ ball (exact, closed form, float64).

    For the linear model f(x) = Wx + b, row (x, y) is robust at radius ε iff for every class j ≠ y

        min_{‖δ‖∞ ≤ ε} (w_y − w_j)·(x + δ) + (b_y − b_j) > 0,

    since it is misclassified somewhere in the ball iff some class's margin reaches 0 there, and each margin is
    linear in δ. Without a box the minimum is (w_y − w_j)·x + (b_y − b_j) − ε‖w_y − w_j‖₁ (δ = −ε sign(w_y − w_j)).
    With a box lo ≤ x + δ ≤ hi each coordinate moves in [max(−ε, lo − x_i), min(ε, hi − x_i)] independently, and
    the minimum of a_i δ_i over that interval is min(a_i L_i, a_i U_i): still closed form, and ≥ the value without
    the box (so the robust accuracy without the box is a lower bound on the one with it). Ties (margin exactly 0)
    count as not robust.

    Parameters
    ----------
    weight : Tensor, shape (C, d)
        W (``linear.weight`` of :class:`~fedshift.models.LogisticRegression`).
    bias : Tensor, shape (C,)
        b.
    x : Tensor, shape (n, d) or (n, ...) flattened to (n, d)
        Clean inputs.
    y : Tensor, shape (n,), int64
        Labels.
    eps : float
        ε ≥ 0 (input units).
    box : (lo, hi) or None
        The input box, or None (no box: the shift matrix's threat model).

    Returns
    -------
    Tensor, shape (n,), bool
        True where the row is robust (correct at every point of the ball).

    Raises
    ------
    ValueError
        For ε < 0, shapes that do not match, or a box with lo ≥ hi or a row outside it.
    """
    W, b = weight.detach().double(), bias.detach().double()
    x, y = x.detach().flatten(1).double().to(W.device), y.detach().to(W.device)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if W.ndim != 2 or b.shape != (W.shape[0],) or x.shape[1] != W.shape[1] or y.shape != (x.shape[0],):
        raise ValueError(f"shapes do not match: weight {tuple(W.shape)}, bias {tuple(b.shape)}, x {tuple(x.shape)}, "
                         f"y {tuple(y.shape)}")
    if box is not None and (not box[0] < box[1] or len(x) and (x.min() < box[0] or x.max() > box[1])):
        raise ValueError(f"box must be (lo, hi) with lo < hi holding every row of x, got {box}")
    logits = x @ W.T + b                                                # (n, C)
    margin = logits.gather(1, y[:, None]) - logits                      # (n, C): z_y − z_j at x
    if box is None:
        l1 = (W[:, None, :] - W[None, :, :]).abs().sum(-1)              # (C, C): ‖w_k − w_j‖₁
        margin = margin - eps * l1[y]
    else:
        lo, hi = (x - box[0]).clamp(max=eps).neg(), (box[1] - x).clamp(max=eps)   # δ_i ∈ [lo_i, hi_i]
        for j in range(W.shape[0]):
            a = W[y] - W[j]                                             # (n, d): w_y − w_j per row
            margin[:, j] += torch.minimum(a * lo, a * hi).sum(1)
    margin[torch.arange(len(y), device=W.device), y] = float("inf")
    return (margin > 0).all(1)


def mlr_robust_accuracy(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, *, eps: float,
                        box: tuple[float, float] | None = None) -> float:
    """The exact ℓ∞ robust accuracy of an MLR: the mean of :func:`mlr_robust_correct` (same parameters).

    Returns
    -------
    float
        In [0, 1]; the fraction of rows correct at every point of the ε-ball (NaN for no rows).
    """
    ok = mlr_robust_correct(weight, bias, x, y, eps=eps, box=box)
    return float(ok.double().mean()) if len(ok) else float("nan")


def masking_report(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, *, eps: float,
                   steps: Sequence[int] = (5, 10, 20, 40), large_eps: float = 1.0, tolerance: float = 0.01,
                   exact_tolerance: float = 0.02, attack: Callable[..., torch.Tensor] | None = None,
                   **attack_kw: Any) -> dict[str, Any]:
    """Gradient-masking checks of an attack on one model (Carlini et al. 2019, arXiv:1902.06705, §5.2 and §6).

    * **more steps never help the model**: the robust accuracy at each of ``steps`` is at most the previous one plus
      ``tolerance`` (random starts make it noisy);
    * **a large ε breaks every row**: at ``large_eps`` (no box: any image in reach for pixels in [0, 1] at ε = 1)
      the robust accuracy is at most ``tolerance``;
    * for an MLR, **the attack is not above the exact value** (:func:`mlr_robust_accuracy`, with the attack's
      ``box``) by more than ``exact_tolerance`` at the most steps.

    Parameters
    ----------
    module, params, x, y
        The model and the rows (as :func:`apgd_linf`).
    eps : float
        The radius evaluated, > 0.
    steps : sequence of int
        Increasing step counts.
    large_eps : float
        The radius of the second check.
    tolerance : float
        Slack of the first two checks (accuracy units).
    exact_tolerance : float
        Slack of the third (default 0.02: two points).
    attack : callable, optional
        ``attack(module, params, x, y, eps=, steps=, **attack_kw) -> x'``; default :func:`apgd_linf`.

    Returns
    -------
    dict
        ``clean``, ``by_steps`` ({steps: accuracy}), ``monotone`` (bool), ``large_eps_accuracy``, ``large_eps_zero``
        (bool), for an MLR ``exact`` and ``gap`` (attack − exact at the most steps) and ``not_above_exact`` (bool),
        and ``passed`` (every check).

    Raises
    ------
    ValueError
        For ε ≤ 0, ``large_eps`` ≤ ε, or ``steps`` empty or not increasing.
    """
    if eps <= 0 or large_eps <= eps:
        raise ValueError(f"need 0 < eps < large_eps, got eps={eps}, large_eps={large_eps}")
    if not steps or list(steps) != sorted(set(steps)):
        raise ValueError(f"steps must be increasing, got {list(steps)}")
    attack = attack or apgd_linf
    by_steps = {int(k): accuracy(module, params, attack(module, params, x, y, eps=eps, steps=k, **attack_kw), y)
                for k in steps}
    acc = list(by_steps.values())
    large = accuracy(module, params, attack(module, params, x, y, eps=large_eps, steps=max(steps), **attack_kw), y)
    out: dict[str, Any] = {"clean": accuracy(module, params, x, y), "by_steps": by_steps,
                           "monotone": all(b <= a + tolerance for a, b in zip(acc, acc[1:], strict=False)),
                           "large_eps_accuracy": large, "large_eps_zero": large <= tolerance}
    checks = ["monotone", "large_eps_zero"]
    if type(module) is LogisticRegression:
        exact = mlr_robust_accuracy(params["linear.weight"], params["linear.bias"], x, y, eps=eps,
                                    box=attack_kw.get("box"))
        out |= {"exact": exact, "gap": acc[-1] - exact, "not_above_exact": acc[-1] - exact <= exact_tolerance}
        checks.append("not_above_exact")
    out["passed"] = all(out[c] for c in checks)
    return out
