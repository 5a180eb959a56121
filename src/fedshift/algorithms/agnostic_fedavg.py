"""AgnosticFedAvg: communication-efficient agnostic federated averaging, and its FedAvg baselines.

It follows the official ``agnostic_fed_avg.py`` function by function: the data, client and server steps are in
:mod:`fedshift.algorithms.agnostic_fedavg_steps`, the factories (and the shift matrix's cell hooks) here.

Paper: J. Ro, M. Chen, R. Mathews, M. Mohri, A. T. Suresh. *Communication-Efficient Agnostic Federated
Averaging.* Interspeech 2021, arXiv:2104.02748, §4. The update equations are those of the official
implementation, ``google/fedjax: fedjax/algorithms/agnostic_fed_avg.py`` (papers spec §2.2), which the
paper's text describes in words; FedJAX's own unit-test vectors (spec §2.4) are our regression tests.

Setting: p domains; every example carries a domain id d_j ∈ {0..p−1}; a client may hold several domains
(*data partition*) or exactly one (*client partition*), both covered by the same code. Server state:
model w, server-optimizer state, mixture weight λ ∈ Δ_p and a sliding window of the last W per-domain
example-count vectors. Round t over the sampled clients S_t (uniform without replacement, drawn from
``RoundKey(seed, t)``):

1. α_i = λ_i / N̄_i, N̄ the element-wise mean of the window (scaling vector, sent to the clients);
2. client k, at the current w and without training: L_i^k = Σ_{j∈k, d_j=i} ℓ(w; z_j) (sums),
   N_i^k = its number of domain-i examples, β^k = Σ_i α_i N_i^k;
3. client k runs E local epochs of mini-batch SGD on f_k(w; B) = (1/β^k) Σ_{j∈B} α_{d_j} ℓ(w; z_j)
   (a sum over the batch, not a mean) and uploads β^k Δ^k (Δ^k = w − w_k), β^k, L^k and N^k;
4. the server sees only the sums over S_t (what secure aggregation reveals, Bonawitz et al. 2017):
   Δ̄ = Σ β^k Δ^k / Σ β^k is the pseudo-gradient of the server optimizer (SGD, SGD with Nesterov
   momentum, Adam: :mod:`fedshift.core.optim`); L̄_i = Σ_k L_i^k / Σ_k N_i^k (0 when the round has no
   domain-i example, so that domain's factor exp(0) = 1 is kept, as the paper says);
   λ_i ← λ_i exp(η_λ L̄_i), clipped at 0 and renormalised (exponentiated gradient); the window drops its
   oldest vector and appends Σ_k N^k.

The code keeps the three roles apart to make step 4 visible: :func:`client_message` is everything one
client computes and uploads, :func:`secure_sum` is the only thing the server learns about a round's
clients, :func:`server_update` is everything the server does with it.

Why the clients train in their own loop (:func:`local_train`) and not in :func:`fedshift.core.engine.local_sgd`, the
loop of FedAvg, FedProx, SCAFFOLD, WAFL/FedPGM/FedFGSM and FedPALS: (i) step 3's objective is an α-weighted *sum*
normalised by β^k, which the engine's per-example-weighted batch mean cannot express without changing every other
algorithm's rounding; (ii) the loss is the model's own (``loss_fn``: token cross-entropy with padding for the
LSTM language models of §5, not logits cross-entropy); (iii) the engine's batched path vmaps
``torch.func.grad_and_value`` over clients, which ``nn.LSTM`` does not gain from: plain reverse-mode autograd through
``functional_call``, used here, was about 3× faster than ``torch.func.grad`` for the LSTM on the CPU.
Batches still come from the engine (:func:`fedshift.core.engine.make_batches`), so a client's data order is the same
in both loops.

Baselines of §5: FedAvg (uniform), FedAvg on all data with the batch-mean loss and weights n_k
(McMahan et al. 2017, server optimizer as Reddi et al. 2021), and FedAvg (target-only), the same on the
target domain's examples only (:func:`build_domain_fedavg` on filtered clients).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from fedshift.algorithms.agnostic_fedavg_steps import (
    AgnosticFedAvgState,
    DomainClients,
    LossFn,
    client_message,
    cross_entropy_loss,
    local_train,
    scaled_client_lr,
    scaling_vector,
    secure_sum,
    server_update,
)
from fedshift.algorithms.decl.agnostic_fedavg import DECLARATIONS, DomainAlgorithm, InitDomainWeights
from fedshift.algorithms.declarations import OptimizerName
from fedshift.algorithms.fedavg import sample_clients
from fedshift.algorithms.registry import register
from fedshift.core.aggregate import weighted_mean
from fedshift.core.base import FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool
from fedshift.core.optim import build_optimizer
from fedshift.core.rng import RoundKey

__all__ = ["build_agnostic_fedavg", "build_domain_fedavg", "DomainFedAvgState", "DOMAIN_ALGORITHMS",
           "cell_domain_clients", "matrix_cell", "baseline_cell"]

DOMAIN_ALGORITHMS = typing.get_args(DomainAlgorithm)


def _init_lambda(init: InitDomainWeights, p: int) -> np.ndarray:
    if isinstance(init, str):  # "uniform", the one declared choice: registration checks every call
        return np.full(p, 1.0 / p)
    lam = np.asarray(init, dtype=np.float64)
    if lam.shape != (p,) or (lam < 0).any() or abs(lam.sum() - 1) > 1e-6:
        raise ValueError(f"init_domain_weights must be a point of the {p}-simplex (sum 1 within 1e-6), "
                         f"got {lam.tolist()}")
    return lam


def _with_eval(diag: dict[str, torch.Tensor], params: Params, round_done: int,
               evaluate: Callable[[Params], dict[str, float]] | None, eval_every: int) -> dict[str, torch.Tensor]:
    if evaluate is not None and eval_every and round_done % eval_every == 0:
        diag.update({f"eval/{k}": torch.as_tensor(float(v)) for k, v in evaluate(params).items()})
    return diag


# Over 80 lines: a FedJAX-style factory — its docstring and the init/apply closures it returns.
# lambda_lr ≥ 0 here, and > 0 when domain_algorithm is "eg" (a cross-knob condition the factory checks).
@register(DECLARATIONS[0])  # agnostic_fedavg
def build_agnostic_fedavg(
    module: nn.Module,
    *,
    num_domains: int,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    lambda_lr: float,
    window_size: int,
    init_domain_weights: InitDomainWeights = "uniform",
    init_domain_window: Sequence[float] | None = None,
    domain_algorithm: DomainAlgorithm = "eg",
    server_optimizer: OptimizerName = "sgd",
    server_lr: float = 1.0,
    server_optimizer_kwargs: dict[str, Any] | None = None,
    loss_fn: LossFn = cross_entropy_loss,
    evaluate: Callable[[Params], dict[str, float]] | None = None,
    eval_every: int = 0,
    name: str = "agnostic_fedavg",
) -> FederatedAlgorithm[AgnosticFedAvgState]:
    """Build AgnosticFedAvg (Ro et al. 2021, §4; FedJAX ``agnostic_federated_averaging``).

    Parameters
    ----------
    module : nn.Module
        The model, applied functionally.
    num_domains : int
        p.
    clients_per_round : int
        |S_t|, sampled uniformly without replacement (``fedshift.algorithms.fedavg.sample_clients``).
    local_epochs, batch_size, client_lr : int, int, float
        E, B and the client SGD step size (> 0) of the α-scaled local objective.
    lambda_lr : float
        η_λ (> 0) of the exponentiated-gradient step.
    window_size : int
        W >= 1, rounds of per-domain counts kept.
    init_domain_weights : "uniform" or sequence of p floats
        λ_0, on the simplex within 1e-6.
    init_domain_window : sequence of p floats, optional
        Initial window vector (W copies); default all ones (FedJAX).
    domain_algorithm : {"eg", "none"}
        "none" keeps λ fixed at λ_0.
    server_optimizer, server_lr, server_optimizer_kwargs
        Server optimizer on Δ̄ (:func:`fedshift.core.optim.build_optimizer`: "sgd" with
        ``{"momentum": 0.9, "nesterov": True}`` for Nesterov, "adam").
    loss_fn : callable
        Per-example loss ``loss_fn(module, params, x, y) -> (B,)``.
    evaluate : callable, optional
        ``evaluate(params) -> {name: value}``, reported as ``eval/<name>`` every ``eval_every`` rounds.
    eval_every : int
        0: never.

    Returns
    -------
    FederatedAlgorithm[AgnosticFedAvgState]
        ``apply(state, clients: DomainClients, key)`` returns diagnostics ``loss`` (β-weighted mean local
        objective), ``lambda`` (λ after the step), ``domain_loss`` (L̄), ``clients``, ``weights`` (β/Σβ).

    Raises
    ------
    ValueError
        On invalid hyper-parameters (``window_size < 1``, ``lambda_lr <= 0`` with ``"eg"``, λ_0 off the
        simplex, ...), before any training.
    """
    if domain_algorithm == "eg" and not lambda_lr > 0:
        raise ValueError(f"lambda_lr (η_λ) must be > 0, got {lambda_lr}")
    lam0 = _init_lambda(init_domain_weights, num_domains)
    win0 = np.ones(num_domains) if init_domain_window is None else np.asarray(init_domain_window, dtype=np.float64)
    if win0.shape != (num_domains,) or (win0 < 0).any():
        raise ValueError(f"init_domain_window must hold {num_domains} non-negative counts, got {win0.tolist()}")
    opt = build_optimizer(server_optimizer, lr=server_lr, **(server_optimizer_kwargs or {}))

    def init(params: Params) -> AgnosticFedAvgState:
        ref = next(iter(params.values()))
        params = {k: v.clone() for k, v in params.items()}
        lam = torch.as_tensor(lam0, dtype=ref.dtype, device=ref.device)
        window = torch.as_tensor(np.tile(win0, (window_size, 1)), dtype=ref.dtype, device=ref.device)
        return AgnosticFedAvgState(0, params, opt.init(params), lam, window)

    def apply(state: AgnosticFedAvgState, clients: DomainClients, key: RoundKey):
        if clients.num_domains != num_domains:
            raise ValueError(f"data has {clients.num_domains} domains, the algorithm {num_domains}")
        ids = sample_clients(key, clients.num_clients, clients_per_round)
        alpha = scaling_vector(state.lam, state.window)
        msgs = [client_message(module, state.params, loss_fn, clients, k, alpha, key, epochs=local_epochs,
                               batch_size=batch_size, lr=client_lr) for k in ids]
        total = secure_sum(msgs)
        new, mean_losses = server_update(state, total, opt, lambda_lr, domain_algorithm)
        betas = torch.stack([m.weight for m in msgs])
        diag = {"loss": total.local_loss / total.weight.clamp_min(1e-30), "lambda": new.lam,
                "domain_loss": mean_losses, "clients": torch.as_tensor(ids),
                "weights": betas / betas.sum().clamp_min(1e-30)}
        return new, _with_eval(diag, new.params, new.round, evaluate, eval_every)

    def eval_params(state: AgnosticFedAvgState) -> Params:
        return state.params

    return FederatedAlgorithm(name, init, apply, eval_params, AgnosticFedAvgState)


@dataclass(frozen=True)
class DomainFedAvgState:
    """Server state of the FedAvg baselines: round, w, server-optimizer state."""

    round: int
    params: Params
    opt_state: dict[str, Any]


@register(DECLARATIONS[1])  # domain_fedavg
def build_domain_fedavg(
    module: nn.Module,
    *,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    server_optimizer: OptimizerName = "sgd",
    server_lr: float = 1.0,
    server_optimizer_kwargs: dict[str, Any] | None = None,
    loss_fn: LossFn = cross_entropy_loss,
    evaluate: Callable[[Params], dict[str, float]] | None = None,
    eval_every: int = 0,
    name: str = "fedavg",
) -> FederatedAlgorithm[DomainFedAvgState]:
    """FedAvg with any per-example loss on :class:`DomainClients` (the baselines of Ro et al. 2021, §5).

    The round of :func:`fedshift.algorithms.fedavg.build_fedavg` (McMahan et al. 2017, Alg. 1; server
    optimizer of Reddi et al. 2021): the same client sample, batches and batch-mean local SGD, weights
    n_k, server optimizer on −Δ̄; with a pluggable loss (cross-entropy, token-summed language-model
    loss, squared error), which ``build_fedavg``'s engine does not take. For cross-entropy both agree
    (tested). FedAvg (target-only) is this on the target domain's examples.

    Parameters
    ----------
    See :func:`build_agnostic_fedavg` (same meanings).

    Returns
    -------
    FederatedAlgorithm[DomainFedAvgState]
        Diagnostics ``loss`` (n-weighted mean local loss), ``clients``, ``weights``.

    Raises
    ------
    ValueError
        On invalid hyper-parameters.
    """
    opt = build_optimizer(server_optimizer, lr=server_lr, **(server_optimizer_kwargs or {}))

    def init(params: Params) -> DomainFedAvgState:
        params = {k: v.clone() for k, v in params.items()}
        return DomainFedAvgState(0, params, opt.init(params))

    def apply(state: DomainFedAvgState, clients: DomainClients, key: RoundKey):
        ids = sample_clients(key, clients.num_clients, clients_per_round)
        locals_, losses = [], []
        for k in ids:
            p, loss = local_train(module, state.params, loss_fn, clients, k,
                                  lambda d, nb: torch.full(d.shape, 1.0 / nb, dtype=torch.float64, device=d.device),
                                  key,
                                  epochs=local_epochs, batch_size=batch_size, lr=client_lr)
            locals_.append(p)
            losses.append(loss)
        ref = next(iter(state.params.values()))
        n = torch.as_tensor(clients.pool.sizes()[ids], dtype=ref.dtype, device=ref.device)
        avg = weighted_mean({k: torch.stack([p[k] for p in locals_]) for k in state.params}, n)
        params, opt_state = opt.step(state.params, {k: state.params[k] - avg[k] for k in avg}, state.opt_state)
        new = replace(state, round=state.round + 1, params=params, opt_state=opt_state)
        diag = {"loss": (torch.stack(losses) * n).sum() / n.sum(), "clients": torch.as_tensor(ids),
                "weights": n / n.sum()}
        return new, _with_eval(diag, params, new.round, evaluate, eval_every)

    def eval_params(state: DomainFedAvgState) -> Params:
        return state.params

    return FederatedAlgorithm(name, init, apply, eval_params, DomainFedAvgState)


# ---- the shift matrix's cell hook (its declaration's ``cell``) -------------------------------------------------------
def cell_domain_clients(clients: Sequence[Any], domain_ids: Sequence[int]) -> DomainClients:
    """The clients (:class:`~fedshift.core.base.ClientData`) as :class:`DomainClients`, client i's rows in domain
    ``domain_ids[i]``."""
    ids = list(domain_ids)
    pool = ClientPool.from_clients(list(clients))
    per_example = torch.cat([torch.full((c.num_examples,), d, dtype=torch.int64, device=c.y.device)
                             for c, d in zip(clients, ids, strict=True)])
    return DomainClients(pool, per_example, max(ids) + 1)


def matrix_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int
                ) -> tuple[FederatedAlgorithm, Params, DomainClients]:
    """AgnosticFedAvg on the common round: the shift matrix's cell hook (its declaration's ``cell``).

    Its clients are :class:`DomainClients` with the shift's ``domain_ids`` (side information). Its local objective
    is a batch *sum* over the client's total weight, about B / n_k times FedAvg's batch mean, so its client step
    is put on FedAvg's scale (:func:`scaled_client_lr`), as the AgnosticFedAvg pipeline does
    (``client_lr_scale: mean_client_size``): a client then moves as far per epoch as under FedAvg.

    Parameters
    ----------
    name : str
        ``"agnostic_fedavg"``.
    context : BuildContext
        The cell's model and number of domains p.
    instance : fedshift.shifts.Instance
        The cell's seed.
    train, settings : mapping
        The common round, and the method's fixed settings and grid value (they win).
    seed : int
        w₀ = ``init_params(context.module, seed)``.

    Returns
    -------
    algorithm, params0, clients
    """
    from fedshift.algorithms import registry
    from fedshift.models import init_params

    kw = dict(train) | dict(settings)
    kw["client_lr"] = scaled_client_lr(kw["client_lr"], [c.num_examples for c in instance.clients], kw["batch_size"])
    clients = cell_domain_clients(instance.clients, instance.side["domain_ids"])
    device = next(context.module.parameters()).device
    return registry.build(name, context, **kw), init_params(context.module, seed, device=device), clients


def baseline_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int
                  ) -> tuple[FederatedAlgorithm, Params, DomainClients]:
    """AgnosticFedAvg's FedAvg baseline (``domain_fedavg``) on the common round: its clients as
    :class:`DomainClients` by each client's own :attr:`~fedshift.core.base.ClientData.domain` (never read); the
    parameters and returns of :func:`matrix_cell`."""
    from fedshift.algorithms import registry
    from fedshift.models import init_params

    clients = cell_domain_clients(instance.clients, [c.domain for c in instance.clients])
    device = next(context.module.parameters()).device
    return (registry.build(name, context, **(dict(train) | dict(settings))),
            init_params(context.module, seed, device=device), clients)
