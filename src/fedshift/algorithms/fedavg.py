"""FedAvg: federated averaging with a server optimiser.

Paper: H. B. McMahan, E. Moore, D. Ramage, S. Hampson, B. Agüera y Arcas. *Communication-Efficient
Learning of Deep Networks from Decentralized Data.* AISTATS 2017, arXiv:1602.05629, Algorithm 1
(FederatedAveraging). Server optimiser on the averaged delta as in Reddi et al., *Adaptive Federated
Optimization*, ICLR 2021, Alg. 2 (server SGD with learning rate 1 is Algorithm 1 exactly).

Each round samples ``clients_per_round`` clients uniformly without replacement with the server
stream of ``RoundKey(seed, round)``, runs E local epochs of mini-batch SGD on each
(:func:`fedshift.core.engine.local_sgd`; batched or sequential, whichever is faster for the model),
averages the deltas with weights n_i, and applies the server optimiser to the pseudo-gradient −Δ.

Two optional arguments make the same round the base of other algorithms: a proximal term on the
client objective (FedProx, :mod:`fedshift.algorithms.fedprox`) and other aggregation weights
than n_i (FedPALS, :mod:`fedshift.algorithms.fedpals`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from fedshift.algorithms.decl.fedavg import DECLARATIONS
from fedshift.algorithms.declarations import LocalPath, OptimizerName
from fedshift.algorithms.registry import register
from fedshift.core.aggregate import weighted_mean
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, local_sgd, pool_cache
from fedshift.core.optim import build_optimizer
from fedshift.core.rng import RoundKey

__all__ = ["FedAvgState", "build_fedavg", "SERVER_STREAM", "sample_clients", "proximal_term"]

#: Stream id of the server's own draws (client sampling) within a round's key.
SERVER_STREAM = 2**31 - 1


@dataclass(frozen=True)
class FedAvgState:
    """Server state: round count, global parameters, server-optimiser state."""

    round: int
    params: Params
    opt_state: dict[str, Any]


def sample_clients(key: RoundKey, num_clients: int, clients_per_round: int) -> list[int]:
    """Uniform sample without replacement of ``clients_per_round`` of ``num_clients`` client ids.

    Raises
    ------
    ValueError
        If ``clients_per_round`` is not in [1, num_clients].
    """
    if not 1 <= clients_per_round <= num_clients:
        raise ValueError(f"clients_per_round must be in [1, {num_clients}], got {clients_per_round}")
    return key.numpy(SERVER_STREAM).choice(num_clients, size=clients_per_round, replace=False).tolist()


def proximal_term(mu: float, squared: bool = True) -> Callable[[Params, dict[str, Any]], torch.Tensor]:
    """FedProx's proximal term as an engine ``regularizer`` hook.

    Parameters
    ----------
    mu : float
        μ >= 0.
    squared : bool
        True: μ/2 ‖w − w_g‖² over all parameters (Li et al. 2020, eq. 2). False: μ/2 Σ_tensors
        ‖w − w_g‖₂, the unsquared per-tensor norm of the Bai et al. (2024) benchmark
        (``inouye-lab/FedDG_Benchmark`` ``src/client.py``; papers spec §5.6), whose gradient at
        w = w_g is taken as 0.

    Returns
    -------
    callable
        ``regularizer(params, context)`` reading the global model from ``context["shared"]["global"]``.

    Raises
    ------
    ValueError
        If ``mu < 0``.
    """
    if mu < 0:
        raise ValueError(f"FedProx mu must be >= 0, got {mu}")

    def prox(p: Params, ctx: dict[str, Any]) -> torch.Tensor:
        g = ctx["shared"]["global"]
        if squared:
            return 0.5 * mu * sum(((p[k] - g[k]) ** 2).sum() for k in p)
        return 0.5 * mu * sum(torch.linalg.vector_norm(p[k] - g[k]) for k in p)

    return prox


# Over 80 lines: a FedJAX-style factory — its docstring and the init/apply closures it returns.
@register(DECLARATIONS[0])
def build_fedavg(
    module: nn.Module,
    *,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    server_optimizer: OptimizerName = "sgd",
    server_lr: float = 1.0,
    server_optimizer_kwargs: dict[str, Any] | None = None,
    path: LocalPath = "auto",
    prox_mu: float = 0.0,
    prox_squared: bool = True,
    client_weights: Callable[[list[int], np.ndarray], np.ndarray] | None = None,
    name: str = "fedavg",
) -> FederatedAlgorithm[FedAvgState]:
    """Build FedAvg.

    Parameters
    ----------
    module : nn.Module
        The model.
    clients_per_round : int
        m = max(C·K, 1) in Algorithm 1.
    local_epochs : int
        E.
    batch_size : int
        B.
    client_lr : float
        η, local SGD step size (> 0).
    server_optimizer : {"sgd", "adagrad", "adam"}
        Applied to −Δ; "sgd" with ``server_lr = 1`` is plain averaging.
    server_lr : float
        Server step size.
    server_optimizer_kwargs : dict, optional
        E.g. ``{"momentum": 0.9, "nesterov": True}``.
    path : {"auto", "batched", "sequential"}
        Execution path of the local updates; "auto" (default) picks the faster one for the model
        and device (:func:`fedshift.core.engine.choose_path`).
    prox_mu, prox_squared : float, bool
        A proximal term :func:`proximal_term` on every client's objective when ``prox_mu > 0``
        (FedProx); 0 (default) is FedAvg.
    client_weights : callable, optional
        ``client_weights(sampled_ids, sizes) -> weights`` of the sampled clients' models in the
        average (non-negative, shape (C,)); default n_i (McMahan et al. 2017).
    name : str
        The algorithm's name (checkpoints record it).

    Returns
    -------
    FederatedAlgorithm[FedAvgState]
        ``apply(state, clients, key)`` takes all M clients (a list of ClientData or a ClientPool)
        and returns diagnostics ``loss`` (weighted mean local loss), ``clients`` (sampled ids)
        and ``weights`` (their normalised aggregation weights).
    """
    opt = build_optimizer(server_optimizer, lr=server_lr, **(server_optimizer_kwargs or {}))
    regularizer = proximal_term(prox_mu, prox_squared) if prox_mu != 0 else None
    pool_of = pool_cache()

    def init(params: Params) -> FedAvgState:
        params = {k: v.clone() for k, v in params.items()}
        return FedAvgState(0, params, opt.init(params))

    def apply(state: FedAvgState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool = pool_of(clients)
        ids = sample_clients(key, pool.num_clients, clients_per_round)
        res = local_sgd(module, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size,
                        lr=client_lr, path=path, regularizer=regularizer,
                        shared={"global": state.params} if regularizer else None)
        sizes = pool.sizes()[ids]
        n = torch.as_tensor(sizes, dtype=res.loss.dtype, device=res.loss.device)
        w = n if client_weights is None else torch.as_tensor(
            np.asarray(client_weights(ids, sizes), dtype=np.float64), dtype=res.loss.dtype, device=res.loss.device)
        new_avg = weighted_mean(res.params, w)
        pseudo_grad = {k: state.params[k] - new_avg[k] for k in state.params}
        params, opt_state = opt.step(state.params, pseudo_grad, state.opt_state)
        diag = {"loss": (res.loss * n).sum() / n.sum(), "clients": torch.as_tensor(ids), "weights": w / w.sum()}
        return replace(state, round=state.round + 1, params=params, opt_state=opt_state), diag

    def eval_params(state: FedAvgState) -> Params:
        return state.params

    return FederatedAlgorithm(name, init, apply, eval_params, FedAvgState)
