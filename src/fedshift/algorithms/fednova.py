"""FedNova: normalized averaging, each client's update divided by its own amount of local work.

Paper: J. Wang, Q. Liu, H. Liang, G. Joshi, H. V. Poor. *Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization.* NeurIPS 2020, arXiv:2007.07481, §4 (the normalized averaging update) and
Appendix (FedNova with the proximal local solver). Client i runs τ_i local steps from x (here E epochs of
⌈n_i/B⌉ mini-batch SGD steps: clients with more data take more steps) and its cumulative update
x − y_i = η Σ_k a_{i,k} g_{i,k} is a weighted sum of its gradients. FedNova averages the *normalized*
gradients d_i = (x − y_i) / (η ‖a_i‖₁) and rescales by the effective number of steps:

    x⁺ = x − η_g · η τ_eff Σ_{i∈S} p_i d_i = x − η_g τ_eff Σ_{i∈S} p_i (x − y_i) / ‖a_i‖₁,
    τ_eff = Σ_{i∈S} p_i ‖a_i‖₁,   p_i = n_i / Σ_{j∈S} n_j.

With plain local SGD a_i = (1, …, 1) and ‖a_i‖₁ = τ_i; with FedProx's proximal term μ/2 ‖y − x‖² (each step
y ← y − η(g + μ(y − x))) a_i = ((1 − α)^{τ_i − 1}, …, 1 − α, 1), α = ημ, and ‖a_i‖₁ = (1 − (1 − α)^{τ_i}) / α
(paper, Appendix "FedNova with proximal updates"). When every client takes the same τ_i (clients of equal size),
FedNova is FedAvg (or FedProx) exactly.

Choices: η_g = 1 by default, the paper's experiments (its official code's global momentum is left out, as for
every other method of the matrix); p_i are the selected clients' example shares, as FedAvg's weights here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from fedshift.algorithms.decl.fednova import DECLARATIONS
from fedshift.algorithms.declarations import LocalPath
from fedshift.algorithms.fedavg import FedAvgState, proximal_term, sample_clients
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, local_sgd, pool_cache
from fedshift.core.rng import RoundKey

__all__ = ["build_fednova", "normalizer"]


def normalizer(steps: np.ndarray, alpha: float = 0.0) -> np.ndarray:
    """‖a_i‖₁ of local SGD with τ_i steps, plain (α = 0) or with the proximal term (α = η μ).

    Parameters
    ----------
    steps : ndarray of int, shape (C,)
        τ_i.
    alpha : float
        η μ in [0, 1) (0: plain SGD).

    Returns
    -------
    ndarray of float64, shape (C,)
        τ_i (α = 0) or (1 − (1 − α)^{τ_i}) / α (Wang et al. 2020, Appendix, FedProx as local solver).

    Raises
    ------
    ValueError
        If α is outside [0, 1).
    """
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"eta * mu must be in [0, 1), got {alpha}")
    steps = np.asarray(steps, dtype=np.float64)
    return steps if alpha == 0.0 else (1.0 - (1.0 - alpha) ** steps) / alpha


# client_lr * prox_mu: the FedProx local solver's normaliser (1 − (1 − ημ)^τ) / (ημ) needs 0 ≤ ημ < 1
# (Wang et al. 2020, Appendix; :func:`normalizer`).
@register(DECLARATIONS[0])
def build_fednova(
    module: nn.Module,
    *,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    server_lr: float = 1.0,
    prox_mu: float = 0.0,
    path: LocalPath = "auto",
) -> FederatedAlgorithm[FedAvgState]:
    """Build FedNova (Wang et al. 2020, §4; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model.
    clients_per_round, local_epochs, batch_size : int
        |S| clients sampled uniformly without replacement; E epochs of batches of B (τ_i = E ⌈n_i / B⌉).
    client_lr : float
        η > 0.
    server_lr : float
        η_g > 0 (1: the paper's FedNova).
    prox_mu : float
        μ >= 0 of FedProx's proximal local objective (0: plain local SGD), with η μ < 1.
    path : {"auto", "batched", "sequential"}
        Execution path of the local steps.

    Returns
    -------
    FederatedAlgorithm[FedAvgState]
        Diagnostics ``loss`` (n_i-weighted mean local loss), ``clients``, ``weights`` (p_i / ‖a_i‖₁ normalised to
        sum 1: the relative weight of each x − y_i in the step) and ``tau_eff``.

    Raises
    ------
    ValueError
        For non-positive step sizes, μ < 0, η μ >= 1 or an unknown path.
    """
    alpha = client_lr * prox_mu
    normalizer(np.ones(1), alpha)  # validates η μ
    regularizer = proximal_term(prox_mu) if prox_mu != 0 else None
    pool_of = pool_cache()

    def init(params: Params) -> FedAvgState:
        return FedAvgState(0, {k: v.clone() for k, v in params.items()}, {})

    def apply(state: FedAvgState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool = pool_of(clients)
        ids = sample_clients(key, pool.num_clients, clients_per_round)
        res = local_sgd(module, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size,
                        lr=client_lr, path=path, regularizer=regularizer,
                        shared={"global": state.params} if regularizer else None)
        n = pool.sizes()[ids].astype(np.float64)
        p = n / n.sum()
        a1 = normalizer(res.steps, alpha)                    # ‖a_i‖₁
        tau_eff = float((p * a1).sum())
        coef = server_lr * tau_eff * p / a1                  # x⁺ = x − Σ_i coef_i (x − y_i)
        c = torch.as_tensor(coef, dtype=res.loss.dtype, device=res.loss.device)
        params = {k: x - torch.tensordot(c, x.unsqueeze(0) - res.params[k], dims=1) for k, x in state.params.items()}
        pt = torch.as_tensor(p, dtype=res.loss.dtype, device=res.loss.device)
        diag = {"loss": (res.loss * pt).sum(), "clients": torch.as_tensor(ids), "weights": c / c.sum(),
                "tau_eff": torch.as_tensor(tau_eff)}
        return replace(state, round=state.round + 1, params=params), diag

    def eval_params(state: FedAvgState) -> Params:
        return state.params

    return FederatedAlgorithm("fednova", init, apply, eval_params, FedAvgState)
