"""WAFL (Wasserstein robust federated learning) and the adversarial-training baselines FedPGM and FedFGSM.

Paper: *On the Generalization of Wasserstein Robust Federated Learning* (ICLR 2022 submission,
arXiv:2206.01432), Algorithm 1 "Local SGD for WAFL". Each round t the server samples S_t clients uniformly
without replacement (:func:`fedshift.algorithms.fedavg.sample_clients`), each runs K local epochs of
mini-batch SGD on its surrogate loss φ_γ(z, θ) = sup_ζ ℓ(ζ, θ) − γ d²(ζ, z) (eq. 5–6; the supremum by
:func:`fedshift.algorithms.adversarial.wasserstein_ascent`, whose ζ* gives ∇_θ φ_γ = ∇_θ ℓ(ζ*, θ), Sinha et
al. 2018, Lemma 1), and the server sets θ_{t+1} = Σ_{i∈S_t} λ_i θ_i / Σ_{i∈S_t} λ_i with λ_i = n_i / n (line 9).

The same server with another local input transformation gives the paper's baselines (§6): FedAvg (none),
FedPGM (ℓ∞ PGD adversarial training, Madry et al. 2018) and FedFGSM (FGSM, Goodfellow et al. 2015).

The state can carry snapshots of θ every ``snapshot_every`` rounds (for the convergence curves of Fig. 5,
evaluated later by a separate job); they are part of the checkpointed state, so a resumed run keeps them.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
from torch import nn

from fedshift.algorithms import adversarial
from fedshift.algorithms.decl.wafl import DECLARATIONS, Cost, RobustKind, StepRule
from fedshift.algorithms.declarations import LocalPath
from fedshift.algorithms.fedavg import sample_clients
from fedshift.algorithms.registry import register
from fedshift.core.aggregate import weighted_mean
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, local_sgd, pool_cache
from fedshift.core.rng import RoundKey

__all__ = ["KINDS", "RobustState", "build_robust_fedavg", "make_perturb", "l2_penalty"]

#: Local-update kinds: plain SGD, WAFL's surrogate, PGD and FGSM adversarial training.
KINDS = typing.get_args(RobustKind)


@dataclass(frozen=True)
class RobustState:
    """Server state: round count, global θ, and snapshots {str(round): θ} (round 0 = initial θ)."""

    round: int
    params: Params
    snapshots: dict[str, Params]


def make_perturb(module: nn.Module, kind: RobustKind, *, gamma: float = 0.0, inner_lr: float = 1.0,
                 inner_steps: int = 10, cost: Cost = "paper", step_rule: StepRule = "stable", eps: float = 0.0,
                 step: float = 0.0, steps: int = 1):
    """The input transformation of one local step, ``perturb(params, x, y) -> x'``, or None for FedAvg.

    Parameters
    ----------
    module : nn.Module
    kind : {"fedavg", "wafl", "fedpgm", "fedfgsm"}
    gamma, inner_lr, inner_steps, cost, step_rule
        WAFL: γ, α_in, K_in, transport-cost convention and step rule
        (:func:`fedshift.algorithms.adversarial.wasserstein_ascent`).
    eps, step, steps
        FedPGM: ε, step and number of PGD steps; FedFGSM: ε.

    Raises
    ------
    ValueError
        For an unknown kind.
    """
    if kind == "fedavg":
        return None
    if kind == "wafl":
        return partial(adversarial.wasserstein_ascent, module, gamma=gamma, lr=inner_lr, steps=inner_steps,
                       cost=cost, step_rule=step_rule)
    if kind == "fedpgm":
        return partial(adversarial.pgd_linf, module, eps=eps, step=step, steps=steps)
    if kind == "fedfgsm":
        return partial(adversarial.fgsm, module, eps=eps)
    raise ValueError(f"unknown kind {kind!r}; known: {KINDS}")


def l2_penalty(coefficient: float):
    """The local objective's L2 term (c/2)·Σ‖W‖² over the weight tensors (names ending in ``weight``).

    App. G.2 gives the MLR models "an L2-regularization term" without its coefficient; biases are not
    penalised. Returns an engine ``regularizer(params, context) -> scalar`` or None for c = 0.

    Raises
    ------
    ValueError
        For c < 0.
    """
    if coefficient < 0:
        raise ValueError(f"the L2 coefficient must be >= 0, got {coefficient}")
    if coefficient == 0:
        return None

    def regularizer(params: Params, context: dict[str, Any]) -> torch.Tensor:
        return 0.5 * coefficient * sum(v.pow(2).sum() for k, v in params.items() if k.endswith("weight"))

    return regularizer


# Over 80 lines: a FedJAX-style factory — its docstring and the init/apply closures it returns.
# The perturbation's own knobs (make_perturb → fedshift.algorithms.adversarial) are bounded per name: WAFL's γ ≥ 0,
# inner step > 0, inner steps ≥ 0; FedPGM's ε ≥ 0, step > 0, steps ≥ 1; FedFGSM's ε ≥ 0.
@register(DECLARATIONS[0])  # wafl
@register(DECLARATIONS[1])  # fedpgm
@register(DECLARATIONS[2])  # fedfgsm
@register(DECLARATIONS[3])  # robust_fedavg
def build_robust_fedavg(
    module: nn.Module,
    *,
    kind: RobustKind,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    snapshot_every: int = 0,
    l2: float = 0.0,
    path: LocalPath = "auto",
    **perturb_kwargs: Any,
) -> FederatedAlgorithm[RobustState]:
    """Build WAFL (Algorithm 1) or one of its baselines on the FedAvg server.

    Parameters
    ----------
    module : nn.Module
        The model (MLR or CNN), applied functionally.
    kind : {"fedavg", "wafl", "fedpgm", "fedfgsm"}
        Local update: SGD on ℓ, on φ_γ (WAFL), or on ℓ at PGD / FGSM inputs.
    clients_per_round : int
        |S_t| (10 in the paper).
    local_epochs : int
        K, passes over the client's data per round (2 in the paper).
    batch_size : int
        Mini-batch size (64, official code).
    client_lr : float
        η > 0, SGD step on θ.
    snapshot_every : int
        Keep θ every this many rounds (and θ_0) in the state; 0 keeps none.
    l2 : float
        Coefficient c ≥ 0 of the local objective's (c/2)·Σ‖W‖² (:func:`l2_penalty`; App. G.2); 0: none.
    path : {"auto", "batched", "sequential"}
        Execution path of :func:`fedshift.core.engine.local_sgd`.
    **perturb_kwargs
        Passed to :func:`make_perturb` (gamma, inner_lr, inner_steps, cost, step_rule, eps, step, steps).

    Returns
    -------
    FederatedAlgorithm[RobustState]
        Diagnostics per round: ``loss`` (n-weighted mean local loss at the perturbed inputs), ``clients``
        and ``metric/rho2`` (n-weighted mean of ‖ζ − z‖² over the local steps; 0 for FedAvg).

    Raises
    ------
    ValueError
        For an unknown kind or path, η ≤ 0, ``snapshot_every`` < 0 or ``l2`` < 0.
    """
    perturb = make_perturb(module, kind, **perturb_kwargs)
    regularizer = l2_penalty(l2)
    pool_of = pool_cache()

    def snap(params: Params) -> Params:
        return {k: v.detach().clone() for k, v in params.items()}

    def init(params: Params) -> RobustState:
        params = snap(params)
        return RobustState(0, params, {"0": snap(params)} if snapshot_every else {})

    def apply(state: RobustState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool = pool_of(clients)
        ids = sample_clients(key, pool.num_clients, clients_per_round)
        res = local_sgd(module, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size,
                        lr=client_lr, path=path, perturb=perturb, regularizer=regularizer)
        n = torch.as_tensor(pool.sizes()[ids], dtype=res.loss.dtype, device=res.loss.device)
        params = weighted_mean(res.params, n)
        rho2 = res.extras.get("rho2", torch.zeros_like(res.loss))
        diag = {"loss": (res.loss * n).sum() / n.sum(), "clients": torch.as_tensor(ids),
                "metric/rho2": (rho2 * n).sum() / n.sum()}
        done = state.round + 1
        snapshots = state.snapshots
        if snapshot_every and done % snapshot_every == 0:
            snapshots = {**snapshots, str(done): snap(params)}
        return replace(state, round=done, params=params, snapshots=snapshots), diag

    def eval_params(state: RobustState) -> Params:
        return state.params

    return FederatedAlgorithm(kind, init, apply, eval_params, RobustState)
