"""AgnosticFedAvg's data, client and server steps (:mod:`fedshift.algorithms.agnostic_fedavg` builds the algorithm).

Follows the official ``google/fedjax: fedjax/algorithms/agnostic_fed_avg.py`` function by function: the clients'
examples with their domain ids (:class:`DomainClients`), the server state, what one client computes and uploads
(:func:`client_message`), the only thing the server learns about a round's clients (:func:`secure_sum`) and what the
server does with it (:func:`server_update`). The update equations are stated in
:mod:`fedshift.algorithms.agnostic_fedavg`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedshift.core.base import Params
from fedshift.core.engine import ClientPool, make_batches
from fedshift.core.rng import RoundKey

__all__ = ["DomainClients", "AgnosticFedAvgState", "ClientMessage", "LossFn", "cross_entropy_loss",
           "scaling_vector", "scaled_client_lr", "update_domain_weights", "client_statistics", "local_train",
           "client_message", "secure_sum", "server_update"]

#: ``loss_fn(module, params, x, y) -> per-example losses (B,)``.
LossFn = Callable[[nn.Module, Params, torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy_loss(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy (nats) of a classifier, shape (B,)."""
    return F.cross_entropy(torch.func.functional_call(module, params, (x,)), y, reduction="none")


@dataclass(frozen=True)
class DomainClients:
    """All clients' examples with a domain id per example.

    Attributes
    ----------
    pool : ClientPool
        Inputs x (N, ...), targets y (N, ...) (class labels, token sequences or regression targets) and
        the client offsets (client i holds rows ``offsets[i]:offsets[i+1]``).
    domain : Tensor, shape (N,), int64
        Domain id of every example, in [0, num_domains).
    num_domains : int
        p.
    """

    pool: ClientPool
    domain: torch.Tensor
    num_domains: int

    def __post_init__(self) -> None:
        if self.num_domains < 1:
            raise ValueError(f"num_domains must be >= 1, got {self.num_domains}")
        if self.domain.shape != (self.pool.y.shape[0],):
            raise ValueError(f"need one domain id per example: {tuple(self.domain.shape)} vs {self.pool.y.shape[0]}")
        bad = (self.domain < 0) | (self.domain >= self.num_domains)
        if bool(bad.any()):
            ids = sorted(set(self.domain[bad].tolist()))[:5]
            raise ValueError(f"unknown domain id(s) {ids}: domain ids must lie in [0, {self.num_domains})")
        if (np.diff(self.pool.offsets) < 1).any():
            raise ValueError("every client must hold at least one example")

    @classmethod
    def from_clients(cls, xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], domains: Sequence[torch.Tensor],
                     num_domains: int) -> DomainClients:
        """Concatenate per-client tensors (client i: ``xs[i]``, ``ys[i]``, ``domains[i]``).

        Raises
        ------
        ValueError
            Mismatched lengths, an empty client, or a domain id outside [0, num_domains).
        """
        if not len(xs) == len(ys) == len(domains) or not xs:
            raise ValueError("need the same, non-zero number of x, y and domain tensors")
        sizes = [int(y.shape[0]) for y in ys]
        for i, (x, d) in enumerate(zip(xs, domains, strict=True)):
            if x.shape[0] != sizes[i] or d.shape[0] != sizes[i]:
                raise ValueError(f"client {i}: x, y and domain lengths differ")
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        pool = ClientPool(torch.cat(list(xs)).contiguous(), torch.cat(list(ys)).contiguous(), offsets)
        return cls(pool, torch.cat([torch.as_tensor(d, dtype=torch.long) for d in domains]).to(pool.x.device),
                   num_domains)

    @property
    def num_clients(self) -> int:
        """M."""
        return self.pool.num_clients

    def counts(self, client_ids: Sequence[int] | None = None) -> np.ndarray:
        """N_i^k: examples of each domain per client, shape (C, p) (all clients when None)."""
        ids = range(self.num_clients) if client_ids is None else client_ids
        dom = self.domain.cpu().numpy()
        off = self.pool.offsets
        return np.stack([np.bincount(dom[off[k]:off[k + 1]], minlength=self.num_domains) for k in ids])

    def client(self, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Client k's (x, y, domain) as views."""
        lo, hi = int(self.pool.offsets[k]), int(self.pool.offsets[k + 1])
        return self.pool.x[lo:hi], self.pool.y[lo:hi], self.domain[lo:hi]


@dataclass(frozen=True)
class AgnosticFedAvgState:
    """Server state of AgnosticFedAvg (FedJAX ``ServerState``, spec §2.2).

    Attributes
    ----------
    round : int
        Rounds done.
    params : dict[str, Tensor]
        w.
    opt_state : dict
        Server-optimizer state.
    lam : Tensor, shape (p,)
        Mixture weight λ on the simplex.
    window : Tensor, shape (W, p)
        The last W per-domain example-count vectors, oldest first.
    """

    round: int
    params: Params
    opt_state: dict[str, Any]
    lam: torch.Tensor
    window: torch.Tensor


@dataclass(frozen=True)
class ClientMessage:
    """What one client uploads (or, after :func:`secure_sum`, the sum over a round's clients).

    Attributes
    ----------
    weighted_delta : dict[str, Tensor]
        β^k Δ^k, Δ^k = w − w_k (same shapes as the model).
    weight : Tensor, scalar
        β^k (n_k for FedAvg).
    domain_loss : Tensor, shape (p,)
        L_i^k, sum of the losses of the client's domain-i examples at the round's starting w.
    domain_count : Tensor, shape (p,)
        N_i^k.
    local_loss : Tensor, scalar
        The client's mean local objective over its steps, times β^k (monitoring only).
    """

    weighted_delta: Params
    weight: torch.Tensor
    domain_loss: torch.Tensor
    domain_count: torch.Tensor
    local_loss: torch.Tensor


def scaling_vector(lam: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """α = λ / N̄, N̄ the element-wise mean of the window (spec §2.2 step 1, FedJAX ``apply`` line 258).

    Parameters
    ----------
    lam : Tensor, shape (p,)
    window : Tensor, shape (W, p)

    Returns
    -------
    Tensor, shape (p,)
        α_i; 0 where N̄_i = 0 (a domain unseen over the whole window; FedJAX divides plainly, which
        would give inf) [ours].
    """
    mean = window.mean(0)
    return torch.where(mean > 0, lam / mean.clamp_min(1e-30), torch.zeros_like(lam))


def scaled_client_lr(client_lr: float, client_sizes: Any, batch_size: int) -> float:
    """The client step η · mean(n_k) / B that moves an AgnosticFedAvg client as far per epoch as FedAvg's η.

    AgnosticFedAvg's local objective (1/β^k) Σ_{j∈B} α_{d_j} ℓ_j (Ro et al. 2021 §4; spec §2.2 step 3) is a batch
    *sum* over the client's total weight, about B / n_k times FedAvg's batch mean (exactly, for one domain). The
    mean client size of the training data makes one config hold at every scale [ours; FedJAX tunes the client lr by
    hand]. The one conversion used by the paper's pipeline (``client_lr_scale: mean_client_size``) and the shift
    matrix.

    Parameters
    ----------
    client_lr : float
        η, FedAvg's client step.
    client_sizes : array_like of int, shape (M,)
        n_k of every training client.
    batch_size : int
        B.

    Returns
    -------
    float
        η · (mean(n_k) / B), in that order of operations.
    """
    return float(client_lr) * (float(np.mean(client_sizes)) / batch_size)


def update_domain_weights(lam: torch.Tensor, mean_losses: torch.Tensor, lr: float) -> torch.Tensor:
    """Exponentiated-gradient ascent step on λ (FedJAX ``update_domain_weights``, spec §2.2 step 5).

    λ_i ← λ_i exp(η_λ L̄_i), clipped at 0, renormalised to sum 1. A domain with L̄_i = 0 (no
    example this round) keeps its unnormalised weight.

    Parameters
    ----------
    lam : Tensor, shape (p,)
        Current λ ∈ Δ_p.
    mean_losses : Tensor, shape (p,)
        L̄_i, per-domain mean loss of the round.
    lr : float
        η_λ > 0.

    Returns
    -------
    Tensor, shape (p,)

    Raises
    ------
    ValueError
        If ``lr <= 0``.
    """
    if not lr > 0:
        raise ValueError(f"domain learning rate must be > 0, got {lr}")
    new = (lam * torch.exp(lr * mean_losses)).clamp_min(0)
    return new / new.sum()


def client_statistics(module: nn.Module, params: Params, loss_fn: LossFn, data: DomainClients, k: int,
                      alpha: torch.Tensor, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The metrics pass of client k at w, no training (FedJAX ``create_domain_metrics_for_each_client``).

    Returns
    -------
    domain_loss : Tensor, shape (p,)
        L_i^k = Σ_{j: d_j = i} ℓ(w; z_j).
    domain_count : Tensor, shape (p,)
        N_i^k.
    beta : Tensor, scalar
        β^k = Σ_i α_i N_i^k.
    """
    x, y, d = data.client(k)
    with torch.no_grad():
        losses = torch.cat([loss_fn(module, params, x[i:i + chunk], y[i:i + chunk]) for i in range(0, len(y), chunk)])
    p = data.num_domains
    dl = torch.zeros(p, dtype=losses.dtype, device=losses.device).index_add_(0, d, losses)
    dc = torch.bincount(d, minlength=p).to(losses.dtype)
    return dl, dc, (alpha.to(losses.dtype) * dc).sum()


def local_train(module: nn.Module, params: Params, loss_fn: LossFn, data: DomainClients, k: int,
                example_weight: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], key: RoundKey, *,
                epochs: int, batch_size: int, lr: float) -> tuple[Params, torch.Tensor]:
    """E epochs of mini-batch SGD of client k from ``params`` on Σ_{j∈B} weight_j ℓ(w; z_j).

    Batches: client k's permutation in epoch e is ``key.numpy(k, e)`` (:func:`fedshift.core.engine.make_batches`;
    FedJAX ``ShuffleRepeatBatchHParams`` with ``drop_remainder=False``: the last batch of an epoch is smaller).

    Parameters
    ----------
    example_weight : callable
        ``example_weight(domain_ids (b,), valid_count) -> (b,)`` weights of the batch's examples:
        α_{d_j}/β^k for AgnosticFedAvg (a sum), 1/b for FedAvg (a batch mean).

    Returns
    -------
    params : dict[str, Tensor]
        w_k after local training.
    loss : Tensor, scalar
        Mean objective over the local steps.
    """
    batches = make_batches(data.pool, [k], key, epochs=epochs, batch_size=batch_size)
    # plain reverse-mode autograd through functional_call: ~3x faster than torch.func.grad for nn.LSTM on the CPU
    p = {n: v.detach().clone().requires_grad_(True) for n, v in params.items()}
    dtype = next(iter(p.values())).dtype
    total = torch.zeros((), dtype=dtype, device=data.domain.device)
    steps = int(batches.steps[0])
    for s in range(steps):
        nb = int(batches.valid_np[0, s])
        idx = torch.as_tensor(batches.index_np[0, s, :nb], device=data.domain.device)
        w = example_weight(data.domain[idx], nb).to(dtype)
        val = (loss_fn(module, p, data.pool.x[idx], data.pool.y[idx]) * w).sum()
        grads = torch.autograd.grad(val, list(p.values()))
        with torch.no_grad():
            p = {n: (v - lr * g).requires_grad_(True) for (n, v), g in zip(p.items(), grads, strict=True)}
        total = total + val.detach()
    p = {n: v.detach() for n, v in p.items()}
    return p, total / max(steps, 1)


def client_message(module: nn.Module, params: Params, loss_fn: LossFn, data: DomainClients, k: int,
                   alpha: torch.Tensor, key: RoundKey, *, epochs: int, batch_size: int, lr: float) -> ClientMessage:
    """Everything AgnosticFedAvg's client k computes and uploads in one round (spec §2.2 steps 2–3).

    Parameters
    ----------
    alpha : Tensor, shape (p,)
        The round's scaling vector from the server.

    Returns
    -------
    ClientMessage
        β^k Δ^k, β^k, L^k, N^k. A client with β^k = 0 (every α of its domains is 0) does not train and
        sends zeros.
    """
    dl, dc, beta = client_statistics(module, params, loss_fn, data, k, alpha)
    zeros = {n: torch.zeros_like(v) for n, v in params.items()}
    if not float(beta) > 0:
        return ClientMessage(zeros, beta, dl, dc, torch.zeros_like(beta))
    a = alpha.to(beta.dtype)
    local, loss = local_train(module, params, loss_fn, data, k, lambda d, nb: a[d] / beta, key,
                              epochs=epochs, batch_size=batch_size, lr=lr)
    return ClientMessage({n: beta * (params[n] - local[n]) for n in params}, beta, dl, dc, beta * loss)


def secure_sum(messages: Sequence[ClientMessage]) -> ClientMessage:
    """The sum of the round's client messages: all the server ever learns (secure aggregation).

    Raises
    ------
    ValueError
        For an empty round.
    """
    if not messages:
        raise ValueError("a round needs at least one client message")
    first = messages[0]
    return ClientMessage(
        {n: torch.stack([m.weighted_delta[n] for m in messages]).sum(0) for n in first.weighted_delta},
        torch.stack([m.weight for m in messages]).sum(),
        torch.stack([m.domain_loss for m in messages]).sum(0),
        torch.stack([m.domain_count for m in messages]).sum(0),
        torch.stack([m.local_loss for m in messages]).sum(),
    )


def server_update(state: AgnosticFedAvgState, total: ClientMessage, opt: Any, lambda_lr: float,
                  domain_algorithm: str = "eg") -> tuple[AgnosticFedAvgState, torch.Tensor]:
    """The server's step from the summed messages only (spec §2.2 steps 4–5).

    Returns
    -------
    state : AgnosticFedAvgState
        Round + 1, w ← ServerOpt(w, Δ̄), λ ← EG step (unless ``domain_algorithm == "none"``), window shifted.
    mean_losses : Tensor, shape (p,)
        L̄ (0 for a domain without examples this round).
    """
    params, opt_state = state.params, state.opt_state
    if float(total.weight) > 0:  # else every client sent β = 0: nothing to average, w unchanged
        pseudo = {n: v / total.weight for n, v in total.weighted_delta.items()}
        params, opt_state = opt.step(state.params, pseudo, state.opt_state)
    count = total.domain_count.to(state.lam.dtype)
    mean_losses = torch.where(count > 0, total.domain_loss.to(state.lam.dtype) / count.clamp_min(1),
                              torch.zeros_like(count))
    lam = update_domain_weights(state.lam, mean_losses, lambda_lr) if domain_algorithm == "eg" else state.lam
    window = torch.cat([state.window[1:], count.unsqueeze(0)])
    new = replace(state, round=state.round + 1, params=params, opt_state=opt_state, lam=lam, window=window)
    return new, mean_losses
