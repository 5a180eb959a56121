"""Input-space perturbations: the Wasserstein inner maximisation of WAFL, and ℓ∞ PGD and FGSM.

All three work on a batch of inputs ``x`` (n, ...) with labels ``y`` (n,) for a model applied functionally
with parameters ``params``, and use the per-example input gradient ∇_x ℓ(f(x_i), y_i) (the gradient of the
summed cross-entropy: example i's loss depends on x_i only; models without batch statistics). They are
written with :mod:`torch.func`, so :func:`torch.func.vmap` can run them for many clients at once (the
batched path of :func:`fedshift.core.engine.local_sgd`). Inputs move in the model's (standardised) input units;
nothing clips to a pixel range, as in the official code (``dual-grp/WAFL``, ``FLAlgorithms/users/userbase.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedshift.core.base import Params
from fedshift.models import LogisticRegression

__all__ = ["summed_loss", "input_grad", "wasserstein_ascent", "inner_objective", "pgd_linf", "fgsm", "COSTS",
           "STEP_RULES"]

#: Transport-cost conventions: the paper's γ‖ζ − z‖² (eq. 5) and the official code's (γ/2)‖ζ − z‖².
COSTS = {"paper": 1.0, "code": 0.5}
#: Inner step-size rules: α_in as given, or α_in capped at 1/(2cγ) so that the ascent cannot diverge.
STEP_RULES = ("fixed", "stable")


def summed_loss(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Σ_i ℓ(f_θ(x_i), y_i), the cross-entropy summed over the batch (a scalar).

    Its input gradient is every example's own ∇_x ℓ (:func:`input_grad`).
    """
    return F.cross_entropy(torch.func.functional_call(module, params, (x,)), y, reduction="sum")


def input_grad(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example input gradients ∇_x ℓ(f_θ(x_i), y_i), shape of ``x``.

    For :class:`~fedshift.models.LogisticRegression` the closed form (softmax(Wx + b) − onehot(y))ᵀ W is used
    (the same value; one matrix product instead of an autograd pass), otherwise :func:`torch.func.grad`.

    Parameters
    ----------
    module : nn.Module
        The model (applied with ``params``; its own tensors are not used).
    params : dict[str, Tensor]
        θ, treated as constants.
    x : Tensor, shape (n, ...)
    y : Tensor, shape (n,), int64
    """
    if type(module) is LogisticRegression:
        W, b = params["linear.weight"], params["linear.bias"]
        p = torch.softmax(x.flatten(1) @ W.T + b, dim=-1)
        onehot = (y.unsqueeze(-1) == torch.arange(W.shape[0], device=y.device)).to(p.dtype)
        return ((p - onehot) @ W).reshape(x.shape)
    return torch.func.grad(lambda xx: summed_loss(module, params, xx, y))(x)


def inner_objective(module: nn.Module, params: Params, z: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                    gamma: float, cost: str = "paper") -> torch.Tensor:
    """Per-example ℓ(ζ_i, θ) − cγ‖ζ_i − x_i‖² (the objective of φ_γ with κ = ∞), shape (n,).

    ``cost`` = "paper" (c = 1, eq. 5 of the WAFL paper) or "code" (c = 1/2, the official code).
    """
    loss = F.cross_entropy(torch.func.functional_call(module, params, (z,)), y, reduction="none")
    return loss - COSTS[cost] * gamma * (z - x).flatten(1).pow(2).sum(1)


def wasserstein_ascent(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, *, gamma: float,
                       lr: float, steps: int, cost: str = "paper", step_rule: str = "stable") -> torch.Tensor:
    """Approximate ζ* = argmax_ζ ℓ(ζ, θ) − cγ‖ζ − x‖² per example by gradient ascent on the input.

    The surrogate φ_γ(z, θ) = sup_ζ ℓ(ζ, θ) − γ d²(ζ, z) of WAFL (paper eq. 5, Algorithm 1) with
    d²(z, z') = ‖x − x'‖² + κ|y − y'|² and κ = ∞: labels never move (as in the official code, which
    perturbs inputs only). Starting from ζ = x (no random start, as the official
    ``userbase.py: wasssertein``), each of the ``steps`` (K_in) iterations does

        ζ ← ζ + α (∇_ζ ℓ(ζ, θ) − 2cγ (ζ − x)).

    Parameters
    ----------
    module, params
        The model and θ (constants here).
    x : Tensor, shape (n, ...)
        Clean inputs z.
    y : Tensor, shape (n,)
        Labels (fixed).
    gamma : float
        γ ≥ 0, the robustness parameter (larger γ: smaller perturbations; γ → ∞ gives ζ* = x).
    lr : float
        α_in > 0, the ascent step.
    steps : int
        K_in ≥ 0.
    cost : {"paper", "code"}
        c = 1 (γ‖·‖², paper) or c = 1/2 ((γ/2)‖·‖², official code).
    step_rule : {"fixed", "stable"}
        "stable" uses min(α_in, 1/(2cγ)): for a loss linear in ζ the perturbation obeys
        δ ← (1 − 2cαγ) δ + α∇ℓ, which diverges when |1 − 2cαγ| > 1 (papers_spec §3.2; with α_in = 1
        every γ > 1/c would); at α = 1/(2cγ) one step lands on the maximiser of the linearised objective.

    Returns
    -------
    Tensor
        ζ (detached), shape of ``x``.

    Raises
    ------
    ValueError
        For γ < 0, α_in ≤ 0, K_in < 0, or an unknown ``cost`` / ``step_rule``.
    """
    if gamma < 0 or lr <= 0 or steps < 0:
        raise ValueError(f"need gamma >= 0, lr > 0, steps >= 0; got {gamma}, {lr}, {steps}")
    if cost not in COSTS or step_rule not in STEP_RULES:
        raise ValueError(f"cost must be one of {sorted(COSTS)} and step_rule one of {STEP_RULES}")
    c = COSTS[cost]
    alpha = min(lr, 1.0 / (2 * c * gamma)) if step_rule == "stable" and gamma > 0 else lr
    x = x.detach()
    z = x.clone()
    shrink = 2 * c * gamma * alpha
    for _ in range(steps):  # ζ ← (1 − 2cγα) ζ + 2cγα x + α ∇ℓ(ζ), fused in place (the arrays are large)
        g = input_grad(module, params, z, y)
        z.mul_(1.0 - shrink).add_(x, alpha=shrink).add_(g, alpha=alpha)
    return z.detach()


def pgd_linf(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, *, eps: float, step: float,
             steps: int) -> torch.Tensor:
    """ℓ∞ projected gradient ascent on the loss (Madry et al. 2018, arXiv:1706.06083), no random start.

    x' ← Π_{‖x' − x‖∞ ≤ ε}(x' + step · sign(∇_x' ℓ)), ``steps`` times from x' = x (official code
    ``userbase.py``: no random start, projection by clamping δ to [−ε, ε], no clipping to a data range).

    Parameters
    ----------
    module, params
        The model and θ.
    x : Tensor, shape (n, ...)
    y : Tensor, shape (n,)
    eps : float
        ε ≥ 0, radius of the ℓ∞ ball, in input units.
    step : float
        α > 0, step size.
    steps : int
        Number of steps ≥ 1.

    Returns
    -------
    Tensor
        x' (detached) with ‖x' − x‖∞ ≤ ε.

    Raises
    ------
    ValueError
        For ε < 0, step ≤ 0 or steps < 1.
    """
    if eps < 0 or step <= 0 or steps < 1:
        raise ValueError(f"need eps >= 0, step > 0, steps >= 1; got {eps}, {step}, {steps}")
    x = x.detach()
    z = x.clone()
    for _ in range(steps):
        z.add_(input_grad(module, params, z, y).sign_(), alpha=step)
        z = (z - x).clamp(-eps, eps).add_(x)
    return z.detach()


def fgsm(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, *, eps: float) -> torch.Tensor:
    """Fast gradient sign method (Goodfellow et al. 2015, arXiv:1412.6572): x + ε · sign(∇_x ℓ).

    The same as :func:`pgd_linf` with one step of size ε (official ``userbase.py``, FGSM branch).

    Raises
    ------
    ValueError
        For ε < 0.
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    x = x.detach()
    return (x + eps * input_grad(module, params, x, y).sign()).detach()
