"""Toy clients and an independent NumPy reference of their local training, for the exact-value algorithm tests.

The model is multinomial logistic regression (:class:`fedshift.models.LogisticRegression`, logits x Wᵀ + b). With
``batch_size >= n_i`` every local epoch is one full-batch gradient step on the client's mean cross-entropy (the
shuffle of the epoch does not change a full-batch mean), so E local epochs are E steps of gradient descent, which
:func:`local_gd` computes here in float64 NumPy, without fedshift's engine.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fedshift.core.base import ClientData
from fedshift.core.rng import RoundKey
from fedshift.models import build_model

__all__ = ["DIM", "CLASSES", "toy_clients", "toy_model", "toy_params", "to_numpy", "ce_loss_grad", "local_gd",
           "local_minibatch_sgd"]

DIM, CLASSES = 3, 3


def toy_clients(sizes: list[int], seed: int = 0) -> list[ClientData]:
    """Clients 0..M−1 with ``sizes[i]`` float64 inputs (n_i, DIM) and labels (n_i,) in 0..CLASSES−1."""
    g = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(sizes):
        x = torch.as_tensor(g.normal(size=(n, DIM)) + i, dtype=torch.float64)
        y = torch.as_tensor(g.integers(0, CLASSES, size=n), dtype=torch.int64)
        out.append(ClientData(i, x, y, 0))
    return out


def toy_model() -> torch.nn.Module:
    """The float64 logistic regression DIM → CLASSES."""
    return build_model("logreg", input_dim=DIM, num_classes=CLASSES).double()


def toy_params(seed: int = 1) -> dict[str, torch.Tensor]:
    """w₀: ``linear.weight`` (CLASSES, DIM) and ``linear.bias`` (CLASSES,), float64, seeded."""
    g = np.random.default_rng(seed)
    return {"linear.weight": torch.as_tensor(g.normal(size=(CLASSES, DIM)) * 0.5),
            "linear.bias": torch.as_tensor(g.normal(size=CLASSES) * 0.1)}


def to_numpy(params: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Float64 NumPy copies."""
    return {k: v.detach().cpu().numpy().astype(np.float64).copy() for k, v in params.items()}


def ce_loss_grad(p: dict[str, np.ndarray], client: ClientData, rows: np.ndarray | None = None,
                 logit_shift: np.ndarray | None = None) -> tuple[float, dict[str, np.ndarray]]:
    """Mean cross-entropy of ``client`` (its ``rows``, default all) at ``p`` and its gradient (softmax − one-hot).

    ``logit_shift`` (CLASSES,) is subtracted from every row's logits before the softmax (+inf: a class left out).
    """
    x, y = client.x.numpy(), client.y.numpy()
    if rows is not None:
        x, y = x[rows], y[rows]
    z = x @ p["linear.weight"].T + p["linear.bias"]
    if logit_shift is not None:
        z = z - logit_shift
    z = z - z.max(1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    loss = float(-np.log(prob[np.arange(len(y)), y]).mean())
    r = prob.copy()
    r[np.arange(len(y)), y] -= 1.0
    r /= len(y)
    return loss, {"linear.weight": r.T @ x, "linear.bias": r.sum(0)}


def local_gd(p: dict[str, np.ndarray], client: ClientData, lr: float, steps: int,
             extra: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
             logit_shift: np.ndarray | None = None) -> list[dict[str, np.ndarray]]:
    """The iterates w_1..w_steps of full-batch GD from ``p``: w ← w − lr (∇F_i(w) + extra(w)).

    F_i is the cross-entropy of the logits less ``logit_shift`` (:func:`ce_loss_grad`).
    """
    w = {k: v.copy() for k, v in p.items()}
    out = []
    for _ in range(steps):
        _, g = ce_loss_grad(w, client, logit_shift=logit_shift)
        e = extra(w) if extra is not None else {k: 0.0 for k in w}
        w = {k: w[k] - lr * (g[k] + e[k]) for k in w}
        out.append(w)
    return out


def local_minibatch_sgd(p: dict[str, np.ndarray], client: ClientData, lr: float, epochs: int, batch_size: int,
                        key: RoundKey, extra: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
                        ) -> list[dict[str, np.ndarray]]:
    """The iterates of E epochs of mini-batch SGD, epoch e's order ``key.numpy(client_id, e).permutation(n)``.

    The batch order is fedshift's documented RNG contract (:func:`fedshift.core.engine.make_batches`); the last batch of
    an epoch may be smaller. Steps: w ← w − lr (∇F_batch(w) + extra(w)).
    """
    w = {k: v.copy() for k, v in p.items()}
    out = []
    n = client.num_examples
    for e in range(epochs):
        perm = key.numpy(client.client_id, e).permutation(n)
        for lo in range(0, n, batch_size):
            _, g = ce_loss_grad(w, client, perm[lo:lo + batch_size])
            ex = extra(w) if extra is not None else {k: 0.0 for k in w}
            w = {k: w[k] - lr * (g[k] + ex[k]) for k in w}
            out.append(w)
    return out
