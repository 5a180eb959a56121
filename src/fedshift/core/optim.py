"""Functional optimisers on parameter dictionaries (server/model optimisers).

Each optimiser is a pair ``init(params) -> state`` and
``step(params, grads, state) -> (new_params, new_state)`` on ``dict[str, Tensor]``, pure (inputs
are not modified) so that algorithm states can be checkpointed, batched along a client axis
(issue: simulation engine) and compared exactly with ``torch.optim``.

Sources: SGD (Robbins & Monro 1951); Adagrad (Duchi, Hazan & Singer 2011, with PyTorch's
``initial_accumulator_value=0`` and ``eps=1e-10`` conventions); Adam (Kingma & Ba 2015, Alg. 1,
bias-corrected, PyTorch's ``eps`` placement). Mohri et al. (2019) §5 use Adagrad (Adult) and
Adam (Fashion-MNIST) for the model parameters w.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by the states' init, once a run: validating a config reads these signatures
    import torch

Params = dict[str, "torch.Tensor"]

__all__ = ["Optimizer", "build_optimizer", "OPTIMIZERS"]


@dataclass(frozen=True)
class Optimizer:
    """A functional optimiser.

    Attributes
    ----------
    name : str
        Registry name ("sgd", "adagrad", "adam").
    init : callable
        ``init(params) -> state``; the state is a dict of tensors/ints (checkpointable with
        ``torch.save`` and loadable with ``weights_only=True``).
    step : callable
        ``step(params, grads, state) -> (params, state)``.
    """

    name: str
    init: Callable[[Params], dict[str, Any]]
    step: Callable[[Params, Params, dict[str, Any]], tuple[Params, dict[str, Any]]]


def sgd(lr: float, momentum: float = 0.0, nesterov: bool = False) -> Optimizer:
    """Stochastic gradient descent, optionally with (Nesterov) momentum as in ``torch.optim.SGD``.

    Parameters
    ----------
    lr : float
        Step size γ_w (> 0).
    momentum : float
        Heavy-ball coefficient in [0, 1); 0 is plain SGD as analysed by Mohri et al. (2019), Thm. 2.
    nesterov : bool
        Nesterov momentum (requires ``momentum > 0``).
    """
    _check_lr(lr)
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if nesterov and momentum == 0.0:
        raise ValueError("nesterov momentum needs momentum > 0")

    def init(params: Params) -> dict[str, Any]:
        import torch

        if momentum == 0.0:
            return {}
        return {"buf": {k: torch.zeros_like(v) for k, v in params.items()}, "t": 0}

    def step(params: Params, grads: Params, state: dict[str, Any]) -> tuple[Params, dict[str, Any]]:
        if momentum == 0.0:
            return {k: p - lr * grads[k] for k, p in params.items()}, state
        first = state["t"] == 0
        buf = {k: grads[k].clone() if first else momentum * b + grads[k] for k, b in state["buf"].items()}
        direction = {k: grads[k] + momentum * buf[k] for k in buf} if nesterov else buf
        new = {k: p - lr * direction[k] for k, p in params.items()}
        return new, {"buf": buf, "t": state["t"] + 1}

    return Optimizer("sgd", init, step)


def adagrad(lr: float, eps: float = 1e-10, initial_accumulator_value: float = 0.0) -> Optimizer:
    """Adagrad (Duchi et al. 2011), diagonal, as ``torch.optim.Adagrad`` with no decay.

    Parameters
    ----------
    lr : float
        Step size (> 0).
    eps : float
        Added to the root of the accumulator.
    initial_accumulator_value : float
        Starting value of the squared-gradient accumulator.
    """
    _check_lr(lr)

    def init(params: Params) -> dict[str, Any]:
        import torch

        return {"sum": {k: torch.full_like(v, initial_accumulator_value) for k, v in params.items()}}

    def step(params: Params, grads: Params, state: dict[str, Any]) -> tuple[Params, dict[str, Any]]:
        acc = {k: s + grads[k] * grads[k] for k, s in state["sum"].items()}
        new = {k: p - lr * grads[k] / (acc[k].sqrt() + eps) for k, p in params.items()}
        return new, {"sum": acc}

    return Optimizer("adagrad", init, step)


def adam(lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8) -> Optimizer:
    """Adam (Kingma & Ba 2015, Algorithm 1) with bias correction, as ``torch.optim.Adam``.

    Parameters
    ----------
    lr : float
        Step size α (> 0).
    beta1, beta2 : float
        Exponential decay rates of the first and second moment estimates, in [0, 1).
    eps : float
        Added to the root of the bias-corrected second moment.
    """
    _check_lr(lr)
    for name, b in (("beta1", beta1), ("beta2", beta2)):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {b}")

    def init(params: Params) -> dict[str, Any]:
        import torch

        return {
            "m": {k: torch.zeros_like(v) for k, v in params.items()},
            "v": {k: torch.zeros_like(v) for k, v in params.items()},
            "t": 0,
        }

    def step(params: Params, grads: Params, state: dict[str, Any]) -> tuple[Params, dict[str, Any]]:
        t = state["t"] + 1
        m = {k: beta1 * state["m"][k] + (1 - beta1) * g for k, g in grads.items()}
        v = {k: beta2 * state["v"][k] + (1 - beta2) * g * g for k, g in grads.items()}
        c1, c2 = 1 - beta1**t, 1 - beta2**t
        new = {
            k: p - (lr / c1) * m[k] / ((v[k] / c2).sqrt() + eps) for k, p in params.items()
        }
        return new, {"m": m, "v": v, "t": t}

    return Optimizer("adam", init, step)


OPTIMIZERS: dict[str, Callable[..., Optimizer]] = {"sgd": sgd, "adagrad": adagrad, "adam": adam}


def build_optimizer(name: str, **hparams: Any) -> Optimizer:
    """Build an optimiser by registry name.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; known: {sorted(OPTIMIZERS)}")
    return OPTIMIZERS[name](**hparams)


def _check_lr(lr: float) -> None:
    if not lr > 0:
        raise ValueError(f"learning rate must be > 0, got {lr}")
