"""FedBN: FedAvg that keeps every client's batch-normalisation layers local (feature-shift heterogeneity).

Paper: X. Li, M. Jiang, X. Zhang, M. Kamp, Q. Dou. *FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization.* ICLR 2021, arXiv:2102.07623, Algorithm 1. Each round the sampled clients train from the server's
shared parameters and *their own* batch-norm (BN) parameters, and the server averages every parameter except the
BN layers' (n_i weights); each client keeps its BN affine parameters (γ, β) and its BN running statistics (mean,
variance, batch count) from round to round. The model of client i is the shared parameters with its BN layers; the
paper evaluates each client's model on that client's test data.

BN layers are the model's :class:`torch.nn.modules.batchnorm._BatchNorm` submodules (:func:`bn_names`); a model
without any is FedAvg exactly. Local training runs client after client
(:func:`fedshift.algorithms.local_steps.client_sgd`, FedAvg's batches) with the module in training mode, so BN
normalises by batch statistics and updates the client's running statistics, passed in as its buffers.

Choices: the client's BN parameters start, before its first round, from the initial model's (the paper: from the
same initialisation); :func:`build_fedbn`'s ``eval_params`` (one model, which the training loop asks every algorithm
for) is the shared parameters with the n_i-weighted mean of the clients' BN parameters [ours: FedBN defines no
global BN]; FedBN's own evaluation is per client (:func:`client_model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from fedshift.algorithms.decl.fedbn import DECLARATIONS
from fedshift.algorithms.local_steps import client_sgd, sampled_pool
from fedshift.algorithms.registry import register
from fedshift.core.aggregate import weighted_mean
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, pool_cache
from fedshift.core.rng import RoundKey

__all__ = ["FedBNState", "build_fedbn", "bn_names", "client_model"]


@dataclass(frozen=True)
class FedBNState:
    """Server state.

    Attributes
    ----------
    round : int
    params : dict[str, Tensor]
        Shared parameters (every parameter; the BN entries are the initial model's and are not used after init).
    local : dict[str, Tensor]
        Every client's BN parameters and running statistics, each of shape (N, *shape).
    sizes : Tensor, shape (N,)
        n_i (float64), for the weighted mean of :func:`build_fedbn`'s ``eval_params``.
    """

    round: int
    params: Params
    local: Params
    sizes: torch.Tensor


def bn_names(module: nn.Module) -> tuple[list[str], list[str]]:
    """The parameter and buffer names of the model's batch-norm layers (``named_parameters`` / ``named_buffers``).

    Returns
    -------
    params, buffers : list of str
        E.g. ``["1.weight", "1.bias"]`` and ``["1.running_mean", "1.running_var", "1.num_batches_tracked"]``.
    """
    params, buffers = [], []
    for prefix, m in module.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            dot = f"{prefix}." if prefix else ""
            params += [dot + n for n, _ in m.named_parameters(recurse=False)]
            buffers += [dot + n for n, b in m.named_buffers(recurse=False) if b is not None]
    return params, buffers


def client_model(state: FedBNState, client: int) -> tuple[Params, Params]:
    """Client ``client``'s model: the shared parameters with its BN parameters, and its BN running statistics.

    Returns
    -------
    params, buffers : dict[str, Tensor]
        For ``torch.func.functional_call(module, {**params, **buffers}, x)`` in evaluation mode.
    """
    params = dict(state.params)
    buffers = {}
    for k, v in state.local.items():
        (params if k in state.params else buffers)[k] = v[client]
    return params, buffers


# Over 80 lines: a FedJAX-style factory — its docstring and the init/apply closures it returns.
# loop "own": FedBN keeps each client's batch-norm layers local, so it trains one model per client, evaluated on that
# client's own data, not one model for a target population; it declares no cell hook for a common-budget caller
@register(DECLARATIONS[0])
def build_fedbn(
    module: nn.Module,
    *,
    num_clients: int,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
) -> FederatedAlgorithm[FedBNState]:
    """Build FedBN (Li et al. 2021, Algorithm 1; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model, with batch-norm layers (without any, FedBN is FedAvg); trained in training mode.
    num_clients : int
        N, the clients whose BN layers the state keeps.
    clients_per_round, local_epochs, batch_size : int
        FedAvg's round: |S| clients uniformly without replacement, E epochs of batches of B.
    client_lr : float
        η > 0.

    Returns
    -------
    FederatedAlgorithm[FedBNState]
        ``eval_params``: shared parameters with the n_i-weighted mean of the clients' BN parameters (module docstring).
        Diagnostics ``loss``, ``clients``, ``weights`` (n_i / Σ n_j) as FedAvg's.

    Raises
    ------
    ValueError
        For ``client_lr <= 0``; from ``apply``, for a client list of another size than N or clients read from files.
    """
    bn_params, bn_buffers = bn_names(module)
    pool_of = pool_cache()

    def init(params: Params) -> FedBNState:
        params = {k: v.clone() for k, v in params.items()}
        own = dict(module.named_buffers())
        dev = next(iter(params.values())).device
        # fresh running statistics (_BatchNorm.reset_running_stats): mean 0, variance 1, no batch counted
        start = {k: params[k] for k in bn_params} | {
            k: (torch.ones_like if k.endswith("running_var") else torch.zeros_like)(own[k]).to(dev) for k in bn_buffers}
        local = {k: v.unsqueeze(0).repeat(num_clients, *([1] * v.dim())) for k, v in start.items()}
        return FedBNState(0, params, local, torch.zeros(num_clients, dtype=torch.float64))

    def apply(state: FedBNState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool, ids = sampled_pool(pool_of, clients, key, clients_per_round, "FedBN")
        if pool.num_clients != num_clients:
            raise ValueError(f"FedBN was built for {num_clients} clients, got {pool.num_clients}")
        module.train()
        local = {k: v.clone() for k, v in state.local.items()}
        models, losses = [], []
        for i in ids:
            start = dict(state.params) | {k: local[k][i] for k in bn_params}
            buffers = {k: local[k][i].clone() for k in bn_buffers}
            last, _, mean = client_sgd(module, start, pool, i, key, epochs=local_epochs, batch_size=batch_size,
                                       lr=client_lr, buffers=buffers)
            for k in bn_params:
                local[k][i] = last[k]
            for k in bn_buffers:
                local[k][i] = buffers[k]
            models.append(last)
            losses.append(mean)
        n = torch.as_tensor(pool.sizes()[ids], dtype=losses[0].dtype, device=losses[0].device)
        shared = [k for k in state.params if k not in bn_params]
        params = dict(state.params) | weighted_mean({k: torch.stack([m[k] for m in models]) for k in shared}, n)
        sizes = torch.as_tensor(pool.sizes(), dtype=torch.float64)
        diag = {"loss": (torch.stack(losses) * n).sum() / n.sum(), "clients": torch.as_tensor(ids),
                "weights": n / n.sum()}
        return replace(state, round=state.round + 1, params=params, local=local, sizes=sizes), diag

    def eval_params(state: FedBNState) -> Params:
        if not bn_params:
            return state.params
        w = state.sizes if state.sizes.sum() > 0 else torch.ones_like(state.sizes)
        return dict(state.params) | weighted_mean({k: state.local[k] for k in bn_params}, w.to(
            state.local[bn_params[0]].device))

    return FederatedAlgorithm("fedbn", init, apply, eval_params, FedBNState)
