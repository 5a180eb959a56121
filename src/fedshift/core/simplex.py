"""Euclidean projection onto the probability simplex.

Source: Wang & Carreira-Perpiñán (2013), "Projection onto the probability simplex: an efficient
algorithm with a simple proof, and an application", arXiv:1309.1541, Algorithm 1 (also Duchi et
al. 2008, Fig. 1). Used by Stochastic-AFL (Mohri et al. 2019, Fig. 3, step 3).

The public AFL re-implementations (fair_flearn ``model_utils.py``, WAFL ``serverAFL.py``) test
``u_j + (1 - sum_{i<j} u_i)/j > 0`` with the cumulative sum *excluding* ``u_j``; that off-by-one
can over-estimate the support size (papers spec §1.2). This module uses the sum *including*
``u_j``, which is the algorithm as published.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported where it is used: check_marginal serves the plan, which imports no torch
    import torch

__all__ = ["project_simplex"]


def project_simplex(v: torch.Tensor, check_finite: bool = True) -> torch.Tensor:
    """Project ``v`` onto the probability simplex in Euclidean norm.

    Solves ``argmin_{x >= 0, sum(x) = 1} ||x - v||_2`` along the last dimension.

    Parameters
    ----------
    v : torch.Tensor, shape (..., p)
        Points to project; any floating dtype and device. Leading dimensions are batch
        dimensions (e.g. one λ per run when several seeds run at once).
    check_finite : bool
        Raise on NaN/inf input. Training loops pass False to avoid a device-to-host
        synchronisation every step; non-finite values then propagate to the result and are caught
        by the loop's periodic check.

    Returns
    -------
    torch.Tensor, shape (..., p)
        The projections, same dtype and device as ``v``.

    Raises
    ------
    ValueError
        If ``v`` has no elements along the last dimension, or (with ``check_finite``) holds
        non-finite values.
    """
    if v.ndim == 0 or v.shape[-1] == 0:
        raise ValueError(f"project_simplex needs at least one coordinate, got shape {tuple(v.shape)}")
    import torch

    if check_finite and not torch.isfinite(v).all():
        raise ValueError("project_simplex got non-finite values")
    u, _ = torch.sort(v, dim=-1, descending=True)
    css = torch.cumsum(u, dim=-1)
    j = torch.arange(1, v.shape[-1] + 1, dtype=v.dtype, device=v.device)
    cond = u + (1.0 - css) / j > 0  # with the cumulative sum that includes u_j
    # rho = largest j with cond true (cond holds for j = 1 always, and is a prefix).
    rho = cond.to(torch.int64).sum(dim=-1, keepdim=True).clamp(min=1)  # >= 1 unless v has NaNs
    theta = (1.0 - torch.gather(css, -1, rho - 1)) / rho.to(v.dtype)
    return torch.clamp(v + theta, min=0.0)


def check_marginal(p: Any, name: str, atol: float = 1e-6) -> np.ndarray:
    """Validate a probability vector (or a matrix of them, one per row).

    Parameters
    ----------
    p : array_like, shape (K,) or (M, K)
    name : str
        Used in the error message.
    atol : float
        Tolerance on the sum to one.

    Returns
    -------
    ndarray of float64
        ``p`` as an array.

    Raises
    ------
    ValueError
        If an entry is negative or not finite, or a row does not sum to 1 within ``atol``.
    """
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] < 1:
        raise ValueError(f"{name} must be a vector or a matrix of label distributions, got shape {arr.shape}")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name} has negative or non-finite entries: {arr.tolist()}")
    sums = arr.sum(-1)
    if not np.allclose(sums, 1.0, atol=atol, rtol=0):
        raise ValueError(f"{name} is not a probability vector: entries sum to {np.round(sums, 6).tolist()}")
    return arr
