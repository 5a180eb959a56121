"""FedAdagrad, FedYogi and FedAdam: FedAvg's clients with an adaptive server optimiser on the averaged update.

Paper: S. J. Reddi, Z. Charles, M. Zaheer, Z. Garrett, K. Rush, J. Konečný, S. Kumar, H. B. McMahan. *Adaptive
Federated Optimization.* ICLR 2021, arXiv:2003.00295, Algorithm 2 (FEDADAGRAD, FEDYOGI and FEDADAM). Each round the
sampled clients run FedAvg's local SGD from x_t (:func:`fedshift.algorithms.fedavg.build_fedavg`, the same batches),
Δ_i = x_i − x_t, and the server, from m_{−1} = 0 and v_{−1} = τ², takes

* Δ_t = Σ_i w_i Δ_i,   m_t = β₁ m_{t−1} + (1 − β₁) Δ_t;
* FedAdagrad: v_t = v_{t−1} + Δ_t²;
* FedYogi:    v_t = v_{t−1} − (1 − β₂) Δ_t² sign(v_{t−1} − Δ_t²);
* FedAdam:    v_t = β₂ v_{t−1} + (1 − β₂) Δ_t²;
* x_{t+1} = x_t + η m_t / (√v_t + τ)    (all element-wise).

Choices where text and official code differ, and where the text is silent:

* the update rules are Algorithm 2's: no bias correction, τ added outside the root, v_{−1} = τ² (the smallest value
  the algorithm allows, "v_{−1} ≥ τ²"), and FedAdagrad with the momentum m_t too, as written. The authors'
  TensorFlow code runs Keras' Adam/Adagrad and TensorFlow-Addons' Yogi, which bias-correct (Adam, Yogi) and put
  ε inside their own conventions; we follow the paper's text;
* Δ_t weights client i by its example count (w_i = n_i / Σ_S n_j), as fedshift's FedAvg (and the authors'
  example-weighted aggregation in their experiments), so that the server step is the only difference from the
  FedAvg row; Algorithm 2 writes the uniform 1/|S| mean, which is the same on clients of equal size;
* β₁ = 0.9, β₂ = 0.99 are the paper's fixed values (§5, "Optimizers and hyperparameters"); τ = 10⁻³ is the
  default of its experiments' grid; η (``server_lr``) is the knob the matrix tunes.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from fedshift.algorithms.decl.fedopt import DECLARATIONS, FedOptKind
from fedshift.algorithms.declarations import LocalPath
from fedshift.algorithms.fedavg import FedAvgState, build_fedavg
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool
from fedshift.core.rng import RoundKey

__all__ = ["FedOptState", "build_fedopt", "KINDS", "second_moment"]

#: Adaptive server optimisers of Algorithm 2.
KINDS = typing.get_args(FedOptKind)


@dataclass(frozen=True)
class FedOptState:
    """Server state.

    Attributes
    ----------
    round : int
    params : dict[str, Tensor]
        x_t.
    m : dict[str, Tensor]
        First moment m_{t−1} (shapes of ``params``; zero before round 0).
    v : dict[str, Tensor]
        Second moment v_{t−1} (τ² before round 0).
    """

    round: int
    params: Params
    m: Params
    v: Params


def second_moment(kind: FedOptKind, v: torch.Tensor, delta: torch.Tensor, beta2: float) -> torch.Tensor:
    """v_t from v_{t−1} and Δ_t (Reddi et al. 2021, Algorithm 2, the three update lines of v_t).

    Parameters
    ----------
    kind : {"adagrad", "yogi", "adam"}
    v, delta : Tensor
        v_{t−1} and Δ_t, of one shape.
    beta2 : float
        β₂ (unused by Adagrad).

    Returns
    -------
    Tensor
        v_t, the shape of ``v``.

    Raises
    ------
    ValueError
        For another kind.
    """
    d2 = delta * delta
    if kind == "adagrad":
        return v + d2
    if kind == "yogi":
        return v - (1 - beta2) * d2 * torch.sign(v - d2)
    if kind == "adam":
        return beta2 * v + (1 - beta2) * d2
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


@register(DECLARATIONS[0])  # fedadam
@register(DECLARATIONS[1])  # fedyogi
@register(DECLARATIONS[2])  # fedadagrad
def build_fedopt(
    module: nn.Module,
    *,
    kind: FedOptKind,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    server_lr: float = 0.01,
    beta1: float = 0.9,
    beta2: float = 0.99,
    tau: float = 1e-3,
    path: LocalPath = "auto",
) -> FederatedAlgorithm[FedOptState]:
    """Build FedAdagrad, FedYogi or FedAdam (Reddi et al. 2021, Algorithm 2; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model.
    kind : {"adagrad", "yogi", "adam"}
        Fixed by the registered name (``fedadagrad``, ``fedyogi``, ``fedadam``).
    clients_per_round, local_epochs, batch_size, client_lr
        FedAvg's round (:func:`fedshift.algorithms.fedavg.build_fedavg`): |S| clients sampled uniformly without
        replacement, E epochs of batches of B, local step η_l > 0.
    server_lr : float
        η > 0, the server step (default 0.01 [ours]: the matrix tunes it; the paper tunes it per task).
    beta1, beta2 : float
        β₁, β₂ in [0, 1) (paper: 0.9 and 0.99).
    tau : float
        τ > 0, the adaptivity (paper's default 10⁻³); v_{−1} = τ².
    path : {"auto", "batched", "sequential"}
        Execution path of the local steps.

    Returns
    -------
    FederatedAlgorithm[FedOptState]
        Diagnostics as FedAvg's (``loss``, ``clients``, ``weights``).

    Raises
    ------
    ValueError
        For an unknown kind, non-positive ``server_lr``, ``client_lr`` or ``tau``, or β outside [0, 1).
    """
    name = f"fed{kind}"
    inner = build_fedavg(module, clients_per_round=clients_per_round, local_epochs=local_epochs,
                         batch_size=batch_size, client_lr=client_lr, path=path, name=name)

    def init(params: Params) -> FedOptState:
        params = {k: v.clone() for k, v in params.items()}
        return FedOptState(0, params, {k: torch.zeros_like(v) for k, v in params.items()},
                           {k: torch.full_like(v, tau * tau) for k, v in params.items()})

    def apply(state: FedOptState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        # FedAvg's round with server SGD at step 1 returns the n_i-weighted average of the client models
        avg, diag = inner.apply(FedAvgState(state.round, state.params, {}), clients, key)
        params, m, v = {}, {}, {}
        for k, x in state.params.items():
            delta = avg.params[k] - x                                     # Δ_t
            m[k] = beta1 * state.m[k] + (1 - beta1) * delta               # m_t
            v[k] = second_moment(kind, state.v[k], delta, beta2)          # v_t
            params[k] = x + server_lr * m[k] / (v[k].sqrt() + tau)        # x_{t+1}
        return replace(state, round=state.round + 1, params=params, m=m, v=v), diag

    def eval_params(state: FedOptState) -> Params:
        return state.params

    return FederatedAlgorithm(name, init, apply, eval_params, FedOptState)
