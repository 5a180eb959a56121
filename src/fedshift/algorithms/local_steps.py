"""One client's local SGD with a loss of the algorithm's own, an intermediate iterate or local buffers.

:func:`fedshift.core.engine.local_sgd` trains on the cross-entropy of the model's logits (plus a regulariser of the
parameters) and returns the last iterate. Four methods need more of one client's run: DRFA the iterate after a
random number of steps t' (Deng et al. 2020, Algorithm 1), FedLC a loss on logits calibrated by the client's own
label counts (Zhang et al. 2022, §4), FedBN a start of its own (the client's batch-norm parameters) and its own
running statistics (Li et al. 2021), FedSR a loss of a sampled representation (Nguyen et al. 2022).
:func:`client_sgd` is the plain per-client loop on FedAvg's batches
(:func:`fedshift.core.engine.make_batches`: epoch e of client c shuffled by ``key.numpy(c, e)``), so with the
cross-entropy it takes the steps of the engine's sequential path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedshift.algorithms.fedavg import sample_clients
from fedshift.core.aggregate import weighted_mean
from fedshift.core.base import ClientData, Params
from fedshift.core.engine import ClientPool, make_batches
from fedshift.core.rng import RoundKey
from fedshift.models import forward

__all__ = ["client_sgd", "sampled_pool", "averaged_round", "LossFn", "Objective"]

#: ``loss(logits (B, K), labels (B,)) -> scalar``, the mean over the batch.
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: ``objective(params, x (B, ...), labels (B,), step) -> scalar``: a loss of the parameters themselves.
Objective = Callable[[Params, torch.Tensor, torch.Tensor, int], torch.Tensor]


def client_sgd(module: nn.Module, params: Params, pool: ClientPool, client: int, key: RoundKey, *, epochs: int,
               batch_size: int, lr: float, steps: int | None = None, snapshot: int | None = None,
               loss: LossFn = F.cross_entropy, buffers: Params | None = None,
               objective: Objective | None = None) -> tuple[Params, Params | None, torch.Tensor]:
    """Mini-batch SGD of client ``client`` from ``params`` on FedAvg's batches.

    Parameters
    ----------
    module : nn.Module
        Applied functionally (:func:`fedshift.models.forward`).
    params : dict[str, Tensor]
        Starting point (the server model).
    pool : ClientPool
        All clients' rows.
    client : int
        The client's id (its rows and its batch streams).
    key : RoundKey
        The round's key.
    epochs, batch_size : int
        E and B: E ⌈n_i / B⌉ steps, as the engine's.
    lr : float
        η > 0.
    steps : int, optional
        Exactly this many steps instead (as many reshuffled epochs as they need, the last one cut).
    snapshot : int, optional
        Also return the iterate after this many steps (1 <= snapshot <= steps).
    loss : callable
        The mini-batch loss of the logits (default: the mean cross-entropy).
    buffers : dict[str, Tensor], optional
        Module buffers passed with the parameters at every step (not differentiated) and updated **in place** by the
        module (batch norm's running statistics in training mode: FedBN's client-local statistics).
    objective : callable, optional
        ``objective(params, x, y, step) -> scalar`` replacing ``loss(module(x), y)`` (FedSR's regularised loss of a
        sampled representation; ``step`` counts the client's steps from 0).

    Returns
    -------
    last : dict[str, Tensor]
        The final iterate (shapes of ``params``).
    at_snapshot : dict[str, Tensor] or None
        The iterate after ``snapshot`` steps.
    mean_loss : Tensor, shape ()
        Mean mini-batch loss over the steps.
    """
    per_epoch = math.ceil(int(pool.sizes()[client]) / batch_size)
    if steps is not None:
        epochs = math.ceil(steps / per_epoch)
    batches = make_batches(pool, [client], key, epochs=epochs, batch_size=batch_size,
                           dtype=next(iter(params.values())).dtype)
    steps = int(batches.steps[0]) if steps is None else steps
    w = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
    snap, total = None, torch.zeros((), dtype=batches.weight.dtype, device=batches.weight.device)
    for s in range(steps):
        rows = torch.as_tensor(batches.index_np[0, s, : batches.valid_np[0, s]], device=pool.x.device)
        if objective is not None:
            value = objective(w, pool.x[rows], pool.y[rows], s)
        else:
            value = loss(forward(module, {**w, **buffers} if buffers else w, pool.x[rows]), pool.y[rows])
        # a parameter the step's loss does not use (FedSR's reference distribution without its CMI term) gets a 0
        grads = torch.autograd.grad(value, list(w.values()), allow_unused=True, materialize_grads=True)
        with torch.no_grad():
            w = {k: (v - lr * g).requires_grad_(True) for (k, v), g in zip(w.items(), grads, strict=True)}
        total += value.detach()
        if s + 1 == snapshot:
            snap = {k: v.detach() for k, v in w.items()}
    return {k: v.detach() for k, v in w.items()}, snap, total / steps


def sampled_pool(pool_of: Callable[[Any], Any], clients: Sequence[ClientData] | ClientPool, key: RoundKey,
                 clients_per_round: int, who: str) -> tuple[ClientPool, list[int]]:
    """The round's clients in memory and FedAvg's uniform sample of them (:func:`.fedavg.sample_clients`).

    Raises
    ------
    ValueError
        For clients read from files (a :class:`~fedshift.core.engine.FilePool`): ``who`` reads rows of a client at will.
    """
    pool = pool_of(clients)
    if not isinstance(pool, ClientPool):
        raise ValueError(f"{who} reads a client's rows in memory: it needs a ClientPool, not {type(pool).__name__}")
    return pool, sample_clients(key, pool.num_clients, clients_per_round)


def averaged_round(module: nn.Module, params: Params, pool: ClientPool, ids: Sequence[int], key: RoundKey, *,
                   epochs: int, batch_size: int, lr: float, client_kwargs: Callable[[int], dict[str, Any]]
                   ) -> tuple[Params, dict[str, torch.Tensor]]:
    """FedAvg's round on :func:`client_sgd`: every client of ``ids`` from ``params``, models averaged with n_i weights.

    Parameters
    ----------
    client_kwargs : callable
        ``client_kwargs(i)``: the keywords of client ``i``'s :func:`client_sgd` (its ``loss`` or ``objective``).

    Returns
    -------
    params : dict[str, Tensor]
        Σ_i n_i w_i / Σ_i n_i (shapes of ``params``).
    diagnostics : dict
        ``loss`` (n_i-weighted mean local loss), ``clients`` and ``weights`` (n_i / Σ n_j), as FedAvg's.
    """
    models, losses = [], []
    for i in ids:
        last, _, mean = client_sgd(module, params, pool, i, key, epochs=epochs, batch_size=batch_size, lr=lr,
                                   **client_kwargs(i))
        models.append(last)
        losses.append(mean)
    n = torch.as_tensor(pool.sizes()[list(ids)], dtype=losses[0].dtype, device=losses[0].device)
    new = weighted_mean({k: torch.stack([m[k] for m in models]) for k in params}, n)
    return new, {"loss": (torch.stack(losses) * n).sum() / n.sum(), "clients": torch.as_tensor(list(ids)),
                 "weights": n / n.sum()}
