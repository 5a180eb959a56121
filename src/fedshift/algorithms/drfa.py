"""DRFA: distributionally robust federated averaging, min over w, max over the client mixture λ, with local steps.

Paper: Y. Deng, M. M. Kamani, M. Mahdavi. *Distributionally Robust Federated Averaging.* NeurIPS 2020,
arXiv:2102.12660, Algorithm 1, for min_w max_{λ∈Λ} Σ_i λ_i f_i(w) with Λ the simplex over the N clients
(AFL's objective over clients, with τ local steps between communications). Round s:

1. the server draws m clients D^{(s)} according to λ^{(s)} and a step index t' uniformly from 1..τ;
2. every client of D^{(s)} runs τ local SGD steps from w^{(s)} (batches of B, epochs reshuffled as FedAvg's,
   :func:`fedshift.algorithms.local_steps.client_sgd`) and returns its last iterate and its iterate after t' steps;
3. w^{(s+1)} = (1/m) Σ_{i∈D} w_i^{((s+1)τ)} and w^{(t')} = (1/m) Σ_{i∈D} w_i^{(t')};
4. the server draws m clients U uniformly; each evaluates f_i(w^{(t')}; ξ_i) on a mini-batch ξ_i of B of its rows;
   v_i = (N/m) f_i for i ∈ U, 0 otherwise;
5. λ^{(s+1)} = Π_Λ(λ^{(s)} + τ γ v) (Euclidean projection, :func:`fedshift.core.simplex.project_simplex`).

W is the whole parameter space (no projection of w). The random snapshot t' is what lets the server estimate the
gradient in λ of the *average* of the τ local iterates from one extra communication (paper §3).

Randomness (all from the round's :class:`~fedshift.core.rng.RoundKey`, server streams): D^{(s)} from
``key.numpy(SERVER_STREAM, 1)`` (m draws with replacement, probabilities λ^{(s)}: the mean over D is then an unbiased
estimate of Σ_i λ_i w_i), t' from ``key.numpy(SERVER_STREAM, 2)``, U from ``key.numpy(SERVER_STREAM, 3)`` (m without
replacement), ξ_i from ``key.numpy(SERVER_STREAM, 4, i)`` (min(B, n_i) rows without replacement). A client drawn
twice into D trains once (its batches come from the round key, so a second run would be identical) and counts twice.

Choices: λ^{(0)} uniform [ours: the paper leaves λ^{(0)} free]; τ = E ⌈n_max / B⌉ unless given (FedAvg's steps on
the largest client; a client whose rows run out before τ steps starts a new reshuffled epoch); the evaluated model
is the last server model w^{(S)}, as every other row of the matrix (the paper's guarantees hold for averaged
iterates); λ lives in float64.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedshift.algorithms.decl.drfa import DECLARATIONS
from fedshift.algorithms.fedavg import SERVER_STREAM
from fedshift.algorithms.local_steps import client_sgd
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, pool_cache
from fedshift.core.rng import RoundKey
from fedshift.core.simplex import project_simplex
from fedshift.models import forward

__all__ = ["DRFAState", "build_drfa", "draw_round"]


@dataclass(frozen=True)
class DRFAState:
    """Server state.

    Attributes
    ----------
    round : int
    params : dict[str, Tensor]
        w^{(s)}.
    lam : Tensor, shape (N,), float64
        λ^{(s)} on the simplex.
    """

    round: int
    params: Params
    lam: torch.Tensor


def draw_round(key: RoundKey, lam: np.ndarray, m: int, tau: int) -> tuple[list[int], int, list[int]]:
    """The server's draws of round s: D^{(s)} (m ids, with replacement, by λ), t' in 1..τ, U (m ids, uniform).

    Parameters
    ----------
    key : RoundKey
        The round's key (streams in the module docstring).
    lam : ndarray, shape (N,)
        λ^{(s)} (normalised here to sum 1 against rounding).
    m, tau : int
        Clients per draw and local steps.

    Returns
    -------
    D, t_prime, U
    """
    p = np.clip(np.asarray(lam, dtype=np.float64), 0.0, None)
    p = p / p.sum()
    n = len(p)
    d = key.numpy(SERVER_STREAM, 1).choice(n, size=m, replace=True, p=p).tolist()
    t_prime = int(key.numpy(SERVER_STREAM, 2).integers(1, tau + 1))
    u = key.numpy(SERVER_STREAM, 3).choice(n, size=m, replace=False).tolist()
    return d, t_prime, u


# Over 80 lines: a FedJAX-style factory — its docstring and the init/apply closures of Algorithm 1.
@register(DECLARATIONS[0])
def build_drfa(
    module: nn.Module,
    *,
    lambda_lr: float,
    num_clients: int,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    local_steps: int | None = None,
) -> FederatedAlgorithm[DRFAState]:
    """Build DRFA (Deng et al. 2020, Algorithm 1; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model.
    lambda_lr : float
        γ >= 0 (the paper's symbol), the step of the projected ascent on λ (0: λ stays uniform); ``lambda_lr``
        like AFL's γ_λ and AgnosticFedAvg's η_λ, the one name of a mixture weight's step.
    num_clients : int
        N, the dimension of λ.
    clients_per_round : int
        m, the size of D^{(s)} and U (1 <= m <= N).
    local_epochs, batch_size : int
        E and B; τ = E ⌈n_max / B⌉ local steps unless ``local_steps`` is given.
    client_lr : float
        η > 0.
    local_steps : int, optional
        τ >= 1, the synchronisation gap.

    Returns
    -------
    FederatedAlgorithm[DRFAState]
        Diagnostics ``loss`` (mean local loss over D), ``clients`` (the distinct clients of D), ``weights`` (their
        multiplicities / m), ``lambda`` (λ^{(s+1)}, shape (N,)) and ``snapshot`` (t').

    Raises
    ------
    ValueError
        For γ < 0, ``client_lr <= 0``, m outside [1, N], ``local_steps < 1``, or a client list of another size
        than N.
    """
    if not 1 <= clients_per_round <= num_clients:
        raise ValueError(f"clients_per_round must be in [1, {num_clients}], got {clients_per_round}")
    m = clients_per_round
    pool_of = pool_cache()

    def init(params: Params) -> DRFAState:
        return DRFAState(0, {k: v.clone() for k, v in params.items()},
                         torch.full((num_clients,), 1.0 / num_clients, dtype=torch.float64))

    def apply(state: DRFAState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool = pool_of(clients)
        if not isinstance(pool, ClientPool) or pool.num_clients != num_clients:
            raise ValueError(f"DRFA was built for a ClientPool of {num_clients} clients")
        sizes = pool.sizes()
        tau = local_steps or local_epochs * math.ceil(int(sizes.max()) / batch_size)
        d, t_prime, u = draw_round(key, state.lam.numpy(), m, tau)
        counts = Counter(d)
        new = {k: torch.zeros_like(v) for k, v in state.params.items()}
        snap = {k: torch.zeros_like(v) for k, v in state.params.items()}
        losses = []
        for i, c in sorted(counts.items()):
            last, at, loss = client_sgd(module, state.params, pool, i, key, epochs=local_epochs, steps=tau,
                                        snapshot=t_prime, batch_size=batch_size, lr=client_lr)
            for k in new:
                new[k] += (c / m) * last[k]
                snap[k] += (c / m) * at[k]
            losses += [loss] * c
        v = torch.zeros(num_clients, dtype=torch.float64)
        with torch.no_grad():
            for i in u:
                lo = int(pool.offsets[i])
                xi = key.numpy(SERVER_STREAM, 4, i).choice(int(sizes[i]), size=min(batch_size, int(sizes[i])),
                                                           replace=False)
                rows = torch.as_tensor(xi + lo, device=pool.x.device)
                f = F.cross_entropy(forward(module, snap, pool.x[rows]), pool.y[rows])
                v[i] = num_clients / m * float(f)
        lam = project_simplex(state.lam + tau * lambda_lr * v)
        ids = sorted(counts)
        diag = {"loss": torch.stack(losses).mean(), "clients": torch.as_tensor(ids),
                "weights": torch.as_tensor([counts[i] / m for i in ids], dtype=torch.float64),
                "lambda": lam, "snapshot": torch.as_tensor(t_prime)}
        return replace(state, round=state.round + 1, params=new, lam=lam), diag

    def eval_params(state: DRFAState) -> Params:
        return state.params

    return FederatedAlgorithm("drfa", init, apply, eval_params, DRFAState)
