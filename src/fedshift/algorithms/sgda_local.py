"""The local loop of federated SGDA (FedMM and its SGDA baselines): client data, directions, the local steps.

The local loop is generic over the client objective: a *direction factory* gives, for one client and one
round, ``direction(params, m) -> (d, f)``, the SGDA direction d (∇_ω f for ω, −∇_ψ f for ψ, so that every
parameter moves along −d) and the objective value at local step m. :func:`network_directions` builds it for
the adversarial networks of :mod:`fedshift.algorithms.domain_adaptation` on :class:`AdaptationClient` data;
tests use closed-form saddle functions. :mod:`fedshift.algorithms.fedmm` reuses the same local step.

Why this loop is not :func:`fedshift.core.engine.local_sgd`: a step descends one block of parameters (ω) and ascends
the other (ψ) with two step sizes, around an anchor (the proximal μ terms) and, for FedMM, with a per-client dual
variable added to the step; the objective is a minimax over two networks fed source and target batches of
different sizes (:func:`batch_split`). The engine's loop is a minimisation over one cross-entropy. All of FedMM's
and the SGDA baselines' clients share this one loop (:func:`local_sgda`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedshift.algorithms.domain_adaptation import AdaptationNet, is_adversary, minimax_objective
from fedshift.core.base import Params
from fedshift.core.rng import RoundKey

__all__ = ["AdaptationClient", "Direction", "DirectionFactory", "batch_split", "local_batches", "network_directions",
           "sgda_step", "local_sgda", "mean_params"]

Direction = Callable[[Params, int], tuple[Params, torch.Tensor]]
DirectionFactory = Callable[[Any, RoundKey], Direction]


@dataclass(frozen=True)
class AdaptationClient:
    """One client's data: labelled source rows and unlabelled target rows (either part may be empty).

    Attributes
    ----------
    client_id : int
        Stable id; the client's random stream within a round (``key.numpy(client_id)``).
    x_source : Tensor, shape (n_s, ...)
    y_source : Tensor, shape (n_s,), int64
    x_target : Tensor, shape (n_t, ...)
        Target labels are never given to a client.

    Raises
    ------
    ValueError
        If the client holds no rows, or source inputs and labels differ in number.
    """

    client_id: int
    x_source: torch.Tensor
    y_source: torch.Tensor
    x_target: torch.Tensor

    def __post_init__(self) -> None:
        if self.x_source.shape[0] != self.y_source.shape[0]:
            raise ValueError(f"client {self.client_id}: {self.x_source.shape[0]} source inputs but "
                             f"{self.y_source.shape[0]} labels")
        if self.num_examples == 0:
            raise ValueError(f"client {self.client_id} holds no examples")

    @property
    def num_source(self) -> int:
        """n_s."""
        return int(self.x_source.shape[0])

    @property
    def num_target(self) -> int:
        """n_t."""
        return int(self.x_target.shape[0])

    @property
    def num_examples(self) -> int:
        """n_s + n_t."""
        return self.num_source + self.num_target


def batch_split(num_source: int, num_target: int, batch_size: int,
                domain_sizes: tuple[int, int] | None = None) -> tuple[int, int]:
    """Source and target rows of a client's batch, in proportion to its data or to its shares of the domains.

    Without ``domain_sizes``: b_s = round(B · n_s / (n_s + n_t)), by the client's rows. With ``domain_sizes``
    (N_s, N_t), the rows of each domain over all clients, as the official code (``dataset_factory.py``:
    ``int(batch_size * n_s / (n_s + n_t))`` on two domains of 55,000 rows each): b_s = ⌊B · σ_s / (σ_s + σ_t)⌋
    with the client's shares σ_s = n_s / N_s, σ_t = n_t / N_t, so that at p = 0.75 client 1 draws 48 source and
    16 target rows of 64 and client 2 16 and 48, whatever the sizes of the two domains here. The shares of a
    split by largest remainders are within one row of the nominal ones, so B · σ_s / (σ_s + σ_t) is within
    2B / min(N_s, N_t) of its nominal value: truncation allows that much (at p = 0.75 with 59,001 target rows,
    client 2's 15.9999 is the official 16; where that bound exceeds half a row, small domains, it is the nearest
    integer). b_t = B − b_s, with at least one row of each domain the client holds.

    Raises
    ------
    ValueError
        If ``batch_size`` < 2 while the client holds both domains, or < 1; a domain size below the client's rows.
    """
    if batch_size < 1 or (num_source and num_target and batch_size < 2):
        raise ValueError(f"batch_size {batch_size} too small for a client with {num_source} source and "
                         f"{num_target} target rows")
    if domain_sizes is None:
        b_s = int(round(batch_size * num_source / (num_source + num_target)))
    else:
        if domain_sizes[0] < num_source or domain_sizes[1] < num_target:
            raise ValueError(f"domain sizes {domain_sizes} below the client's rows ({num_source}, {num_target})")
        ws = num_source / domain_sizes[0] if num_source else 0.0
        wt = num_target / domain_sizes[1] if num_target else 0.0
        slack = min(2 * batch_size / max(min(domain_sizes), 1), 0.5) + 1e-9
        b_s = int(np.floor(batch_size * ws / (ws + wt) + slack))
    if num_source and num_target:
        b_s = min(max(b_s, 1), batch_size - 1)
    return b_s, batch_size - b_s


def _epoch_indices(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """``count`` indices from successive random permutations of range(n) (shuffled passes over the data)."""
    if n == 0 or count == 0:
        return np.zeros(0, dtype=np.int64)
    reps = -(-count // n)
    return np.concatenate([rng.permutation(n) for _ in range(reps)])[:count]


def local_batches(client: AdaptationClient, key: RoundKey, steps: int, batch_size: int,
                  domain_sizes: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the ``steps`` local mini-batches of one client in one round.

    Source and target rows are drawn from shuffled passes over the client's data (the official generator
    reshuffles at the end of a pass), from the stream ``key.numpy(client_id)``.

    Returns
    -------
    source, target : ndarray of int64, shapes (steps, b_s) and (steps, b_t)
        b_s, b_t from :func:`batch_split` (``domain_sizes`` passed on).
    """
    b_s, b_t = batch_split(client.num_source, client.num_target, batch_size, domain_sizes)
    rng = key.numpy(client.client_id)
    src = _epoch_indices(rng, client.num_source, steps * b_s).reshape(steps, b_s)
    tgt = _epoch_indices(rng, client.num_target, steps * b_t).reshape(steps, b_t)
    return src, tgt


def network_directions(module: AdaptationNet, *, nu: float, batch_size: int, steps: int,
                       domain_sizes: tuple[int, int] | None = None, centre: bool = False) -> DirectionFactory:
    """SGDA directions of an adversarial network on :class:`AdaptationClient` mini-batches.

    At local step m the client's batch (source rows then target rows, :func:`local_batches`) gives
    f = L₁ − ν L₂ (:func:`~fedshift.algorithms.domain_adaptation.minimax_objective`) and the direction
    d_ω = ∇_ω f, d_ψ = −∇_ψ f (one backward pass; simultaneous SGDA). Dropout, if the network has any, draws
    from torch's global generator seeded from the client's stream of the round, so a resumed run repeats it.

    Parameters
    ----------
    module : AdaptationNet
    nu : float
        ν, the weight of L₂.
    batch_size : int
        B, rows per local step.
    steps : int
        The number of local steps the factory's batches cover (M).
    domain_sizes : (int, int), optional
        Source and target rows over all clients: each batch is split by the client's shares of the domains
        (official code); None splits it by the client's rows (:func:`batch_split`).
    centre : bool
        Subtract from each batch (source and target rows together) its scalar mean over all rows, channels and
        pixels: the official ``adv_loss.py:15`` input normalisation, (x − mean(batch)) / 255 on inputs already
        divided by 255.

    Returns
    -------
    callable
        ``factory(client, key) -> direction``.
    """

    def factory(client: AdaptationClient, key: RoundKey) -> Direction:
        src, tgt = local_batches(client, key, steps, batch_size, domain_sizes)
        dev = client.x_target.device if client.num_target else client.x_source.device
        torch.manual_seed(int(key.numpy(client.client_id, 1).integers(2**62)))
        is_t = torch.cat([torch.zeros(src.shape[1], dtype=torch.bool), torch.ones(tgt.shape[1], dtype=torch.bool)])
        is_t = is_t.to(dev)
        pad = torch.zeros(tgt.shape[1], dtype=torch.long, device=dev)

        def direction(params: Params, m: int) -> tuple[Params, torch.Tensor]:
            s = torch.as_tensor(src[m], device=dev)
            t = torch.as_tensor(tgt[m], device=dev)
            parts_x = [client.x_source[s]] if len(s) else []
            parts_x += [client.x_target[t]] if len(t) else []
            x = torch.cat(parts_x)
            if centre:
                x = x - x.mean()
            y = torch.cat([client.y_source[s], pad]) if len(s) else pad
            names = list(params)
            leaves = [params[k].detach().requires_grad_(True) for k in names]
            f, _, _ = minimax_objective(module, dict(zip(names, leaves, strict=True)), x, y, is_t, nu)
            grads = torch.autograd.grad(f, leaves, allow_unused=True)
            d = {k: (torch.zeros_like(params[k]) if g is None else (-g if is_adversary(k) else g))
                 for k, g in zip(names, grads, strict=True)}
            return d, f.detach()

        return direction

    return factory


def sgda_step(params: Params, direction: Params, anchor: Params, *, lr: tuple[float, float],
              mu: tuple[float, float], dual: Params | None = None) -> Params:
    """One local step of eqs. (11)–(12): p ← p − η (d + μ (p − p₀) + dual) for every parameter.

    With d_ω = ∇_ω f_i and d_ψ = −∇_ψ f_i this is ω ← ω − η₁[∇_ω f_i + μ₁(ω − ω₀) + λ_i] and
    ψ ← ψ + η₂[∇_ψ f_i − μ₂(ψ − ψ₀) − β_i] (the dual slot of ψ holds β_i).

    Parameters
    ----------
    params, direction, anchor : dict[str, Tensor]
        Current local parameters, SGDA direction, server model ω₀^t, ψ₀^t.
    lr : (η₁, η₂)
        Step sizes of ω and ψ.
    mu : (μ₁, μ₂)
        Penalties (0 for FedAvgSGDA).
    dual : dict[str, Tensor], optional
        λ_i (ω entries) and β_i (ψ entries); None for no dual term.

    Returns
    -------
    dict[str, Tensor]
        New parameters (fresh tensors).
    """
    out = {}
    for k, p in params.items():
        j = 1 if is_adversary(k) else 0
        step = direction[k] + mu[j] * (p - anchor[k]) if mu[j] else direction[k].clone()
        if dual is not None:
            step = step + dual[k]
        out[k] = p - lr[j] * step
    return out


def local_sgda(anchor: Params, direction: Direction, *, steps: int, lr: tuple[float, float],
               mu: tuple[float, float] = (0.0, 0.0), dual: Params | None = None) -> tuple[Params, torch.Tensor]:
    """M local SGDA steps (:func:`sgda_step`) from the server model.

    Returns
    -------
    params : dict[str, Tensor]
        ω_i^{t+1}, ψ_i^{t+1}.
    loss : Tensor
        Mean objective f_i over the local steps.

    Raises
    ------
    ValueError
        If ``steps`` < 1.
    """
    if steps < 1:
        raise ValueError(f"local steps must be >= 1, got {steps}")
    params = {k: v.detach().clone() for k, v in anchor.items()}
    total = torch.zeros((), device=next(iter(anchor.values())).device)
    for m in range(steps):
        d, f = direction(params, m)
        params = sgda_step(params, d, anchor, lr=lr, mu=mu, dual=dual)
        total = total + f
    return params, total / steps


def mean_params(models: Sequence[Params]) -> Params:
    """Equal-weight average of client models (eq. 16; official trainers average with weight 1/N)."""
    return {k: torch.stack([m[k] for m in models]).mean(0) for k in models[0]}
