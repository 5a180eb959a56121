"""FedDyn: federated learning with a dynamic regulariser that aligns the clients' stationary points with the server's.

Paper: D. A. E. Acar, Y. Zhao, R. Matas Navarro, M. Mattina, P. N. Whatmough, V. Saligrama. *Federated Learning
Based on Dynamic Regularization.* ICLR 2021, arXiv:2111.04263, Algorithm 1. Every client k keeps ∇L_k(θ_k^{t−1})
(zero before its first round); in round t the active clients P_t, from the server model θ^{t−1},

* θ_k^t = argmin_θ L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + α/2 ‖θ − θ^{t−1}‖²  (here: E epochs of mini-batch SGD on it,
  :func:`fedshift.core.engine.local_sgd` with the two terms as its ``regularizer``);
* ∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α (θ_k^t − θ^{t−1});

and the server, from h⁰ = 0,

* h^t = h^{t−1} − α (1/m) Σ_{k∈P_t} (θ_k^t − θ^{t−1})    (m: all clients),
* θ^t = (1/|P_t|) Σ_{k∈P_t} θ_k^t − h^t / α.

Choices: the text's uniform mean over P_t (the official code weights by client size, the same on the matrix's
equal-size clients) and one α for every client (the official code divides α by the client's relative size, again
the same on equal sizes); the official code's weight decay is left out, as for every other method of the matrix.
The evaluated model is θ^t, the server model of Algorithm 1 (the model every client starts from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from fedshift.algorithms.decl.feddyn import DECLARATIONS
from fedshift.algorithms.declarations import LocalPath
from fedshift.algorithms.fedavg import sample_clients
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, local_sgd, pool_cache
from fedshift.core.rng import RoundKey

__all__ = ["FedDynState", "build_feddyn", "dynamic_regularizer"]


@dataclass(frozen=True)
class FedDynState:
    """Server state.

    Attributes
    ----------
    round : int
    params : dict[str, Tensor]
        θ^{t−1}, the server model.
    h : dict[str, Tensor]
        h^{t−1} (shapes of ``params``).
    client_grads : dict[str, Tensor]
        ∇L_k(θ_k^{t−1}) of all m clients, each of shape (m, *param.shape).
    """

    round: int
    params: Params
    h: Params
    client_grads: Params


def dynamic_regularizer(alpha: float):
    """The client's extra terms −⟨∇L_k(θ_k^{t−1}), θ⟩ + α/2 ‖θ − θ^{t−1}‖² as an engine ``regularizer`` hook.

    Reads θ^{t−1} from ``context["shared"]["global"]`` and the client's ∇L_k(θ_k^{t−1}) from
    ``context["per_client"]["grad"]`` (Acar et al. 2021, Algorithm 1, the client's objective).
    """

    def reg(p: Params, ctx: dict[str, Any]) -> torch.Tensor:
        g, server = ctx["per_client"]["grad"], ctx["shared"]["global"]
        return sum(0.5 * alpha * ((p[k] - server[k]) ** 2).sum() - (g[k] * p[k]).sum() for k in p)

    return reg


@register(DECLARATIONS[0])
def build_feddyn(
    module: nn.Module,
    *,
    alpha: float,
    num_clients: int,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    path: LocalPath = "auto",
) -> FederatedAlgorithm[FedDynState]:
    """Build FedDyn (Acar et al. 2021, Algorithm 1; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model.
    alpha : float
        α > 0, the weight of the dynamic regulariser.
    num_clients : int
        m, the number of clients whose ∇L_k the server keeps.
    clients_per_round : int
        |P_t|, sampled uniformly without replacement.
    local_epochs, batch_size : int
        E and B of the local solver.
    client_lr : float
        Local step η > 0.
    path : {"auto", "batched", "sequential"}
        Execution path of the local steps.

    Returns
    -------
    FederatedAlgorithm[FedDynState]
        Diagnostics ``loss`` (mean local objective), ``clients`` and ``weights`` (uniform).

    Raises
    ------
    ValueError
        For α <= 0, ``client_lr <= 0``, an unknown path, or a client list of another size than m.
    """
    reg = dynamic_regularizer(alpha)
    pool_of = pool_cache()

    def init(params: Params) -> FedDynState:
        params = {k: v.clone() for k, v in params.items()}
        return FedDynState(0, params, {k: torch.zeros_like(v) for k, v in params.items()},
                           {k: torch.zeros(num_clients, *v.shape, dtype=v.dtype, device=v.device)
                            for k, v in params.items()})

    def apply(state: FedDynState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool = pool_of(clients)
        if pool.num_clients != num_clients:
            raise ValueError(f"FedDyn was built for {num_clients} clients, got {pool.num_clients}")
        ids = sample_clients(key, num_clients, clients_per_round)
        res = local_sgd(module, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size,
                        lr=client_lr, path=path, regularizer=reg, shared={"global": state.params},
                        per_client={"grad": state.client_grads}, per_client_rows=ids)
        idx = torch.as_tensor(ids, device=next(iter(state.params.values())).device)
        params, h, grads = {}, {}, {}
        for k, x in state.params.items():
            moved = res.params[k] - x                                                # θ_k^t − θ^{t−1}, (|P|, ...)
            grads[k] = state.client_grads[k].index_copy(
                0, idx, state.client_grads[k].index_select(0, idx) - alpha * moved)   # ∇L_k(θ_k^t)
            h[k] = state.h[k] - alpha * moved.sum(0) / num_clients                   # h^t
            params[k] = res.params[k].mean(0) - h[k] / alpha                         # θ^t
        diag = {"loss": res.loss.mean(), "clients": torch.as_tensor(ids),
                "weights": torch.full((len(ids),), 1.0 / len(ids), dtype=res.loss.dtype)}
        return replace(state, round=state.round + 1, params=params, h=h, client_grads=grads), diag

    def eval_params(state: FedDynState) -> Params:
        return state.params

    return FederatedAlgorithm("feddyn", init, apply, eval_params, FedDynState)
