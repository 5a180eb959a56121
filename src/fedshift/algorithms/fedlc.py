"""FedLC: federated learning with label-distribution skew by logit calibration on every client.

Paper: J. Zhang, Z. Li, B. Li, J. Xu, S. Wu, S. Ding, C. Wu. *Federated Learning with Label Distribution Skew via
Logits Calibration.* ICML 2022, arXiv:2209.00189, §4 (the calibrated cross-entropy). Client i trains on its
logits calibrated class by class by its own label counts n_{i,y},

    z'_y = z_y − τ n_{i,y}^{−1/4},

with the cross-entropy of z' as loss: a rare class (small n_{i,y}) is lowered more in training, so the model must
raise its raw logit, a larger margin for the client's rare classes (the label-dependent margin of the paper's
analysis, §4). The server averages the client models as FedAvg (n_i weights). τ = 0 is FedAvg. A class the client
does not hold (n_{i,y} = 0) gets z'_y = −∞: it takes no softmax mass in that client's loss.

Choices: the loss is the softmax cross-entropy of the calibrated logits over *all* classes, as the authors'
released loss (``cal_logit / cal_logit.sum(...)``); the text's calibrated loss sums its denominator over y' ≠ y. The
counts n_{i,y} are the client's example counts (the official code's ``label_distrib``). Local training is FedAvg's
(E epochs of batches of B, the same batches) on that loss, client after client
(:func:`fedshift.algorithms.local_steps.client_sgd`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from fedshift.algorithms.decl.fedlc import DECLARATIONS
from fedshift.algorithms.fedavg import FedAvgState
from fedshift.algorithms.local_steps import LossFn, averaged_round, sampled_pool
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, pool_cache
from fedshift.core.rng import RoundKey
from fedshift.models import forward

__all__ = ["build_fedlc", "calibrated_loss", "label_counts"]


def label_counts(pool: ClientPool, client: int, num_classes: int) -> torch.Tensor:
    """n_{i,y}: the number of client ``client``'s rows of each label, shape (num_classes,), the pool's float dtype."""
    lo, hi = int(pool.offsets[client]), int(pool.offsets[client + 1])
    return torch.bincount(pool.y[lo:hi], minlength=num_classes).to(pool.x.dtype)


def calibrated_loss(counts: torch.Tensor, tau: float) -> LossFn:
    """The mean cross-entropy of the calibrated logits z − τ n^{−1/4} (Zhang et al. 2022, §4; module docstring).

    Parameters
    ----------
    counts : Tensor, shape (K,)
        n_{i,y} of the client (0 for a class it lacks: that logit becomes −∞).
    tau : float
        τ >= 0.

    Returns
    -------
    callable
        ``loss(logits (B, K), y (B,)) -> scalar``.
    """
    shift = tau * counts.pow(-0.25) if tau != 0 else torch.zeros_like(counts)

    def loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits - shift.to(logits.dtype), y)

    return loss


@register(DECLARATIONS[0])
def build_fedlc(
    module: nn.Module,
    *,
    tau: float,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
) -> FederatedAlgorithm[FedAvgState]:
    """Build FedLC (Zhang et al. 2022, §4, with FedAvg's server; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model; its output width is the number of classes K.
    tau : float
        τ >= 0, the calibration strength (0: FedAvg).
    clients_per_round, local_epochs, batch_size : int
        FedAvg's round: |S| clients uniformly without replacement, E epochs of batches of B.
    client_lr : float
        η > 0.

    Returns
    -------
    FederatedAlgorithm[FedAvgState]
        State of FedAvg's shape (``opt_state`` empty: server averaging). Diagnostics ``loss`` (n_i-weighted mean
        calibrated loss), ``clients``, ``weights`` (n_i / Σ n_j).

    Raises
    ------
    ValueError
        For τ < 0 or ``client_lr <= 0``; from ``apply``, for clients read from files.
    """
    pool_of = pool_cache()

    def init(params: Params) -> FedAvgState:
        return FedAvgState(0, {k: v.clone() for k, v in params.items()}, {})

    def apply(state: FedAvgState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool, ids = sampled_pool(pool_of, clients, key, clients_per_round, "FedLC")
        with torch.no_grad():
            num_classes = forward(module, state.params, pool.x[:1]).shape[1]
        params, diag = averaged_round(
            module, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size, lr=client_lr,
            client_kwargs=lambda i: {"loss": calibrated_loss(label_counts(pool, i, num_classes), tau)})
        return replace(state, round=state.round + 1, params=params), diag

    def eval_params(state: FedAvgState) -> Params:
        return state.params

    return FederatedAlgorithm("fedlc", init, apply, eval_params, FedAvgState)
