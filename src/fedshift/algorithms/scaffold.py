"""SCAFFOLD: stochastic controlled averaging with client and server control variates.

Paper: S. P. Karimireddy, S. Kale, M. Mohri, S. J. Reddi, S. U. Stich, A. T. Suresh. *SCAFFOLD:
Stochastic Controlled Averaging for Federated Learning.* ICML 2020, arXiv:1910.06378, Algorithm 1
with control-variate option II:

* client i, from y_i = x, takes K local steps y_i ← y_i − η_l (g_i(y_i) − c_i + c);
* c_i⁺ = c_i − c + (x − y_i) / (K η_l)   (option II);
* server: x ← x + η_g · (1/|S|) Σ_{i∈S} (y_i − x),  c ← c + (1/N) Σ_{i∈S} (c_i⁺ − c_i).

K is each client's own number of local steps (clients with more data take more steps), the local
steps run on :func:`fedshift.core.engine.local_sgd` with the correction as its ``grad_transform`` hook,
and the control variates of all N clients live in the server state (stacked on a client axis),
as a simulation keeps them. With all control variates zero, the first round is FedAvg's with
uniform weights.

Two reductions of a round, the same Algorithm 1:

* clients held as tensors (:class:`~fedshift.core.engine.ClientPool`): the round's |S| client models are
  stacked, and the server sums run over that client axis; the new state's tensors are new (the state
  passed in stays valid).
* clients read from files (:class:`~fedshift.core.engine.FilePool`: PACS, iWildCam, the data sets too large
  for memory): each client model is reduced as its client finishes (``local_sgd(..., on_client=...)``):
  its y_i − x and c_i⁺ − c_i are added to float64 sums and c_i⁺ is written over c_i **in the state passed
  in** (which the round consumes; the training loop keeps only the state ``apply`` returns). No client
  reads another's c_i and c changes only at the end, so this is exact; the round then holds the N control
  variates and one client model instead of the controls and |S| client models (FedPALS iWildCam: 100
  ResNet-50 clients, ≈ 1.0 instead of ≈ 2.3 × 10.7 GB, which a 24 GiB machine could not hold). The c_i⁺
  are the same bits as the stacked reduction's; x and c differ from it by the summation order alone
  (sequential float64 sums instead of float32 reductions over the client axis).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from fedshift.algorithms.decl.scaffold import DECLARATIONS
from fedshift.algorithms.declarations import LocalPath
from fedshift.algorithms.fedavg import sample_clients
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, FilePool, local_sgd, pool_cache
from fedshift.core.rng import RoundKey

__all__ = ["ScaffoldState", "build_scaffold"]


@dataclass(frozen=True)
class ScaffoldState:
    """Server state.

    Attributes
    ----------
    round : int
    params : dict[str, Tensor]
        Global model x.
    control : dict[str, Tensor]
        Server control variate c (shapes of ``params``).
    client_controls : dict[str, Tensor]
        c_i of all N clients, each of shape (N, *param.shape).
    """

    round: int
    params: Params
    control: Params
    client_controls: Params


def _correct(grads: Params, ctx: dict[str, Any]) -> Params:
    """G − c_i + c (Algorithm 1, line 10)."""
    return {k: g - ctx["per_client"]["c_i"][k] + ctx["shared"]["c"][k] for k, g in grads.items()}


# Over 80 lines: a FedJAX-style factory — its docstring and the init/apply closures (both control-variate paths).
@register(DECLARATIONS[0])
def build_scaffold(
    module: nn.Module,
    *,
    num_clients: int,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    server_lr: float = 1.0,
    path: LocalPath = "auto",
) -> FederatedAlgorithm[ScaffoldState]:
    """Build SCAFFOLD (option II).

    Parameters
    ----------
    module : nn.Module
        The model.
    num_clients : int
        N, the number of clients whose control variates the server keeps.
    clients_per_round : int
        |S|, sampled uniformly without replacement from (seed, round).
    local_epochs, batch_size : int
        E and B of the local steps (K = E·⌈n_i/B⌉ for client i).
    client_lr : float
        η_l > 0.
    server_lr : float
        η_g > 0 (1 in the paper's experiments).
    path : {"auto", "batched", "sequential"}
        Execution path of the local steps.

    Returns
    -------
    FederatedAlgorithm[ScaffoldState]
        Diagnostics ``loss`` (mean local loss), ``clients`` and ``weights`` (uniform). On a
        :class:`~fedshift.core.engine.FilePool`, ``apply`` consumes the state passed in (its c_i are overwritten
        with the c_i⁺; module docstring): keep only the state it returns.

    Raises
    ------
    ValueError
        For non-positive step sizes, an unknown path, or a client list of another size than N.
    """
    pool_of = pool_cache()

    def init(params: Params) -> ScaffoldState:
        params = {k: v.clone() for k, v in params.items()}
        zeros = {k: torch.zeros_like(v) for k, v in params.items()}
        stacked = {k: torch.zeros(num_clients, *v.shape, dtype=v.dtype, device=v.device) for k, v in params.items()}
        return ScaffoldState(0, params, zeros, stacked)

    def apply(state: ScaffoldState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool = pool_of(clients)
        if pool.num_clients != num_clients:
            raise ValueError(f"SCAFFOLD was built for {num_clients} clients, got {pool.num_clients}")
        ids = sample_clients(key, num_clients, clients_per_round)
        if isinstance(pool, FilePool):
            return _apply_streamed(state, pool, ids, key)
        idx = torch.as_tensor(ids, device=next(iter(state.params.values())).device)
        # The sampled clients' c_i are read in place (per_client_rows), not gathered into a copy.
        res = local_sgd(module, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size,
                        lr=client_lr, path=path, grad_transform=_correct, shared={"c": state.control},
                        per_client={"c_i": state.client_controls}, per_client_rows=ids)
        steps = torch.as_tensor(res.steps, dtype=res.loss.dtype, device=res.loss.device)
        params, control, client_controls = {}, {}, {}
        # Tensor by tensor, each client model y_i becomes its c_i⁺ in place and is released once the new
        # (N, ...) control tensor holds it, with one (|S|, ...) temporary of that tensor at a time: the round's
        # peak is the old controls plus one set of client models, not four such sets
        # (benchmarks/round_memory.py --algorithm scaffold). Same values, bit for bit, as Algorithm 1 evaluated
        # out of place (x − y = −(y − x) exactly; a + b = b + a).
        for k, x in state.params.items():
            y, c = res.params.pop(k), state.control[k]
            shape = (-1,) + (1,) * x.dim()
            y.sub_(x)                                                       # y_i − x
            params[k] = x + server_lr * y.mean(0)
            y.neg_().div_(steps.reshape(shape) * client_lr)                 # (x − y_i) / (K η_l)
            t = state.client_controls[k].index_select(0, idx).sub_(c)       # c_i − c
            y.add_(t)                                                       # c_i⁺ (option II)
            del t
            t = state.client_controls[k].index_select(0, idx)               # c_i
            control[k] = c + torch.sub(y, t, out=t).sum(0) / num_clients    # c + Σ (c_i⁺ − c_i) / N
            del t
            client_controls[k] = state.client_controls[k].index_copy(0, idx, y)
            del y
        diag = {"loss": res.loss.mean(), "clients": torch.as_tensor(ids),
                "weights": torch.full((len(ids),), 1.0 / len(ids), dtype=res.loss.dtype)}
        return replace(state, round=state.round + 1, params=params, control=control,
                       client_controls=client_controls), diag

    def _apply_streamed(state: ScaffoldState, pool: FilePool, ids: list[int], key: RoundKey):
        """One round reduced client by client, c_i⁺ written over c_i in ``state`` (module docstring)."""
        x, c, controls = state.params, state.control, state.client_controls
        sum_dy = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in x.items()}   # Σ (y_i − x)
        sum_dc = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in x.items()}   # Σ (c_i⁺ − c_i)
        x_dtype, x_device = next(iter(x.values())).dtype, next(iter(x.values())).device

        def reduce(i: int, y: Params, steps: int) -> None:
            row = ids[i]
            denom = torch.full((), steps, dtype=x_dtype, device=x_device) * client_lr      # K η_l, as stacked
            for k, xk in x.items():
                dy = y[k] - xk                                                              # y_i − x
                sum_dy[k] += dy
                ci = controls[k][row]                                                       # a view: c_i
                new = dy.neg_().div_(denom).add_(ci - c[k])                                 # c_i⁺ (option II)
                sum_dc[k] += new
                sum_dc[k] -= ci
                ci.copy_(new)

        res = local_sgd(module, x, pool, ids, key, epochs=local_epochs, batch_size=batch_size, lr=client_lr,
                        grad_transform=_correct, shared={"c": c}, per_client={"c_i": controls},
                        per_client_rows=ids, on_client=reduce)
        params = {k: x[k] + server_lr * (sum_dy[k] / len(ids)).to(x[k].dtype) for k in x}
        control = {k: c[k] + (sum_dc[k] / num_clients).to(c[k].dtype) for k in c}
        diag = {"loss": res.loss.mean(), "clients": torch.as_tensor(ids),
                "weights": torch.full((len(ids),), 1.0 / len(ids), dtype=res.loss.dtype)}
        return replace(state, round=state.round + 1, params=params, control=control,
                       client_controls=controls), diag

    def eval_params(state: ScaffoldState) -> Params:
        return state.params

    return FederatedAlgorithm("scaffold", init, apply, eval_params, ScaffoldState)
