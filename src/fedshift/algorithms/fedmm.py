"""FedMM: federated minimax optimisation with per-client dual variables (augmented Lagrangian).

Paper: Y. Shen, J. Du, H. Zhao, Z. Ji, C. Ma, M. Gao. *FedMM: A Communication Efficient Solver for
Federated Adversarial Domain Adaptation.* AAMAS 2023 (arXiv:2110.08477), §3, Algorithm 1. Client i keeps
dual variables λ_i (for ω) and β_i (for ψ) across rounds. In round t, from the server model (ω₀^t, ψ₀^t):

1. M local SGDA steps on the augmented Lagrangian L_i (eq. 6), eqs. (11)–(12):
   ω ← ω − η₁[∇_ω f_i + μ₁(ω − ω₀^t) + λ_i^t],   ψ ← ψ + η₂[∇_ψ f_i − μ₂(ψ − ψ₀^t) − β_i^t];
2. dual updates (13)–(14): λ_i ← λ_i + μ₁(ω_i^{t+1} − ω₀^t),  β_i ← β_i + μ₂(ψ_i^{t+1} − ψ₀^t);
3. consensus message (15): ω_i^{t+} = ω_i^{t+1} + (η₃^t/μ₁) λ_i^{t+1},  ψ_i^{t+} = ψ_i^{t+1} + (η₃^t/μ₂) β_i^{t+1};
4. server (16): ω₀^{t+1}, ψ₀^{t+1} = the mean of the messages.

The η₃ schedule is η₃^t = η₃ · ρ^{−t/s}: the official code (``trainer/fedmm.py``, papers spec §4.2) sends
v_i + λ_i / (μ ρ^{t/100}) with μ = 2, i.e. η₃ = 1, s = 100 and ρ = 1.05 (DANN), 1.02 (CDAN), 1.01 (MDD);
ρ = 1 keeps η₃ constant (the plain augmented Lagrangian has η₃ = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fedshift.algorithms.decl.fedmm import DECLARATIONS
from fedshift.algorithms.domain_adaptation import is_adversary
from fedshift.algorithms.registry import register
from fedshift.algorithms.sgda_local import AdaptationClient, DirectionFactory, local_sgda, mean_params
from fedshift.core.base import FederatedAlgorithm, Params
from fedshift.core.rng import RoundKey

__all__ = ["FedMMState", "eta3_at", "dual_update", "consensus_message", "build_fedmm"]


@dataclass(frozen=True)
class FedMMState:
    """Server state and the clients' dual variables.

    Attributes
    ----------
    round : int
        Rounds done t.
    params : dict[str, Tensor]
        The server model (ω₀^t, ψ₀^t).
    duals : dict[str, dict[str, Tensor]]
        Client id (as str) → λ_i (ω entries) and β_i (ψ entries), keyed like ``params``; zeros at t = 0.
    """

    round: int
    params: Params
    duals: dict[str, Params]


def eta3_at(t: int, eta3: float, decay: float, every: int) -> float:
    """η₃^t = η₃ · decay^{−t/every} (module docstring).

    Raises
    ------
    ValueError
        For η₃ < 0, decay < 1 or every < 1.
    """
    if eta3 < 0 or decay < 1 or every < 1:
        raise ValueError(f"need eta3 >= 0, decay >= 1, every >= 1; got {eta3}, {decay}, {every}")
    return float(eta3 * decay ** (-t / every))


def dual_update(dual: Params, local: Params, anchor: Params, mu: tuple[float, float]) -> Params:
    """Eqs. (13)–(14): λ ← λ + μ₁(ω_i − ω₀), β ← β + μ₂(ψ_i − ψ₀)."""
    return {k: dual[k] + mu[1 if is_adversary(k) else 0] * (local[k] - anchor[k]) for k in dual}


def consensus_message(local: Params, dual: Params, mu: tuple[float, float], eta3: float) -> Params:
    """Eq. (15): ω_i + (η₃/μ₁) λ_i and ψ_i + (η₃/μ₂) β_i."""
    return {k: local[k] + (eta3 / mu[1 if is_adversary(k) else 0]) * dual[k] for k in local}


@register(DECLARATIONS[0])
def build_fedmm(directions: DirectionFactory, *, local_steps: int, lr: tuple[float, float],
                mu: tuple[float, float], eta3: float = 1.0, eta3_decay: float = 1.0, eta3_every: int = 100,
                client_ids: Sequence[int] | None = None) -> FederatedAlgorithm[FedMMState]:
    """Build FedMM (Algorithm 1).

    Parameters
    ----------
    directions : DirectionFactory
        SGDA directions of a client's objective f_i (:func:`fedshift.algorithms.sgda_local.network_directions`).
    local_steps : int
        M_i (the same for every client; official 20, Office-31 10).
    lr : (η₁, η₂)
        Local step sizes (official 0.01 for both).
    mu : (μ₁, μ₂)
        Penalties, > 0 (official 2.0 for both).
    eta3, eta3_decay, eta3_every : float, float, int
        η₃^t = eta3 · eta3_decay^{−t/eta3_every} (:func:`eta3_at`).
    client_ids : sequence of int, optional
        Ids of the clients whose duals ``init`` creates; None: created at a client's first round.

    Returns
    -------
    FederatedAlgorithm[FedMMState]
        All clients train every round. Diagnostics: ``loss`` (mean local f), ``metric/drift`` (mean
        ‖θ_i^{t+1} − θ₀^t‖), ``metric/dual_norm`` (mean ‖(λ_i, β_i)‖) and ``metric/eta3``.

    Raises
    ------
    ValueError
        For μ ≤ 0 or an invalid η₃ schedule.
    """
    eta3_at(0, eta3, eta3_decay, eta3_every)

    def init(params: Params) -> FedMMState:
        p = {k: v.detach().clone() for k, v in params.items()}
        duals = {str(i): {k: torch.zeros_like(v) for k, v in p.items()} for i in (client_ids or [])}
        return FedMMState(0, p, duals)

    def apply(state: FedMMState, clients: Sequence[AdaptationClient], key: RoundKey):
        e3 = eta3_at(state.round, eta3, eta3_decay, eta3_every)
        anchor = state.params
        duals = dict(state.duals)
        messages, losses, drift, norms = [], [], [], []
        for c in clients:
            cid = str(c.client_id)
            dual = duals.get(cid) or {k: torch.zeros_like(v) for k, v in anchor.items()}
            local, loss = local_sgda(anchor, directions(c, key), steps=local_steps, lr=lr, mu=mu, dual=dual)
            dual = dual_update(dual, local, anchor, mu)
            duals[cid] = dual
            messages.append(consensus_message(local, dual, mu, e3))
            losses.append(loss)
            drift.append(torch.sqrt(sum((local[k] - anchor[k]).pow(2).sum() for k in local)))
            norms.append(torch.sqrt(sum(v.pow(2).sum() for v in dual.values())))
        diag = {"loss": torch.stack(losses).mean(), "metric/drift": torch.stack(drift).mean(),
                "metric/dual_norm": torch.stack(norms).mean(),
                "metric/eta3": torch.tensor(e3, dtype=torch.float64)}
        return FedMMState(state.round + 1, mean_params(messages), duals), diag

    return FederatedAlgorithm("fedmm", init, apply, lambda s: s.params, FedMMState)


def matrix_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int, *, nu: float = 1.0
                ) -> tuple[FederatedAlgorithm, Params, list[AdaptationClient]]:
    """FedMM on a cell's common budget: the shift matrix's cell hook (its declaration's ``cell``).

    :func:`fedshift.algorithms.sgda.dann_cell` with ``full_participation``: Algorithm 1 averages every client's
    primal-dual message ω_i + (η₃/μ)λ_i each round, and on a subset the duals of the clients left out do not cancel,
    so every client trains each round with local steps scaled by clients_per_round / N (the same gradients per round
    as the others'); at clients_per_round = N it is Algorithm 1 exactly.
    """
    from fedshift.algorithms.sgda import dann_cell

    return dann_cell(name, context, instance, train, settings, seed, nu=nu, full_participation=True)
