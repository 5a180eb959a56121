"""q-FFL by q-FedAvg: fair resource allocation, the clients with larger loss weighted up by F_k^q.

Paper: T. Li, M. Sanjabi, A. Beirami, V. Smith. *Fair Resource Allocation in Federated Learning.* ICLR 2020,
arXiv:1905.10497. The objective is f_q(w) = Σ_k p_k F_k^{q+1}(w) / (q + 1); q-FedAvg (Algorithm 2) solves
it: each selected client k runs E epochs of local SGD from w^t (step η) to w̄_k^{t+1}, and with a Lipschitz
estimate L of ∇F_k,

* Δw_k = L (w^t − w̄_k^{t+1}),
* Δ_k = F_k^q(w^t) Δw_k,
* h_k = q F_k^{q−1}(w^t) ‖Δw_k‖² + L F_k^q(w^t),
* w^{t+1} = w^t − Σ_k Δ_k / Σ_k h_k.

F_k(w^t) is client k's mean cross-entropy over all its training rows at w^t, ‖·‖ the Euclidean norm over all
parameters. q = 0 is FedAvg with uniform weights over the selected clients (the L's cancel).

Choices: L = 1/η, the paper's estimate of the Lipschitz constant for q-FedAvg (§4; the official
``fair_flearn`` code: ``1.0 / self.learning_rate``); F_k is offset by 10⁻¹⁰ before its powers, as the official
code (``np.float_power(loss + 1e-10, q)``), so that q < 1 never raises 0 to a negative power; clients are sampled
uniformly without replacement by the matrix's common sampler (:func:`fedshift.algorithms.fedavg.sample_clients`)
where the paper samples with probability p_k = n_k / n — the same on clients of equal size, as the matrix's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
from torch import nn

from fedshift.algorithms.decl.qffl import DECLARATIONS
from fedshift.algorithms.declarations import LocalPath
from fedshift.algorithms.fedavg import FedAvgState
from fedshift.algorithms.local_steps import sampled_pool
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, local_sgd, pool_cache
from fedshift.core.rng import RoundKey
from fedshift.models import forward

__all__ = ["build_qffl", "qfedavg_step", "LOSS_OFFSET"]

#: Added to F_k before its powers (official q-FedAvg code).
LOSS_OFFSET = 1e-10


def qfedavg_step(params: Params, local: Params, losses: torch.Tensor, q: float, lipschitz: float) -> Params:
    """The server step of q-FedAvg (Li et al. 2020, Algorithm 2, lines of Δ_k, h_k and w^{t+1}).

    Parameters
    ----------
    params : dict[str, Tensor]
        w^t, shapes (...).
    local : dict[str, Tensor]
        w̄_k^{t+1} of the C selected clients, shapes (C, ...).
    losses : Tensor, shape (C,)
        F_k(w^t) (mean cross-entropy, nats), before the offset :data:`LOSS_OFFSET`.
    q : float
        q >= 0.
    lipschitz : float
        L > 0.

    Returns
    -------
    dict[str, Tensor]
        w^{t+1}.
    """
    f = losses + LOSS_OFFSET
    dw = {k: lipschitz * (params[k].unsqueeze(0) - local[k]) for k in params}            # Δw_k, (C, ...)
    sq = sum(v.flatten(1).pow(2).sum(1) for v in dw.values())                            # ‖Δw_k‖², (C,)
    h = q * f.pow(q - 1) * sq + lipschitz * f.pow(q)                                     # h_k, (C,)
    fq = f.pow(q)
    return {k: params[k] - torch.tensordot(fq.to(v.dtype), v, dims=1) / h.sum() for k, v in dw.items()}


# q ≤ 100 [ours]: q-FFL raises each client loss to q + 1; at the first rounds' ln 10 ≈ 2.3 nats 2.3^(q+1)
# overflows float32 (3.4e38) near q ≈ 105, and the paper's grids stay within q ≤ 15 (Li et al. 2020, §5).
@register(DECLARATIONS[0])
def build_qffl(
    module: nn.Module,
    *,
    q: float,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    path: LocalPath = "auto",
) -> FederatedAlgorithm[FedAvgState]:
    """Build q-FedAvg (Li et al. 2020, Algorithm 2; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model.
    q : float
        q >= 0, the fairness exponent (q = 0: uniform FedAvg).
    clients_per_round, local_epochs, batch_size : int
        m selected clients, E epochs of batches of B (:func:`fedshift.core.engine.local_sgd`).
    client_lr : float
        η > 0; L = 1/η.
    path : {"auto", "batched", "sequential"}
        Execution path of the local steps.

    Returns
    -------
    FederatedAlgorithm[FedAvgState]
        State of FedAvg's shape (no server optimiser: ``opt_state`` empty). Diagnostics ``loss`` (mean of the
        F_k(w^t)), ``clients`` and ``weights`` (F_k^q / Σ F_j^q, the relative weight of each client's Δw_k).

    Raises
    ------
    ValueError
        For q < 0, ``client_lr <= 0`` or an unknown path; from ``apply``, for clients read from files
        (:class:`~fedshift.core.engine.FilePool`).
    """
    lipschitz = 1.0 / client_lr
    pool_of = pool_cache()

    def init(params: Params) -> FedAvgState:
        return FedAvgState(0, {k: v.clone() for k, v in params.items()}, {})

    def apply(state: FedAvgState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool, ids = sampled_pool(pool_of, clients, key, clients_per_round, "q-FedAvg")
        with torch.no_grad():
            losses = torch.stack([
                torch.nn.functional.cross_entropy(forward(module, state.params, pool.client(i).x), pool.client(i).y)
                for i in ids])
        res = local_sgd(module, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size,
                        lr=client_lr, path=path)
        params = qfedavg_step(state.params, res.params, losses, q, lipschitz)
        fq = (losses + LOSS_OFFSET).pow(q)
        diag = {"loss": losses.mean(), "clients": torch.as_tensor(ids), "weights": fq / fq.sum()}
        return replace(state, round=state.round + 1, params=params), diag

    def eval_params(state: FedAvgState) -> Params:
        return state.params

    return FederatedAlgorithm("qffl", init, apply, eval_params, FedAvgState)
