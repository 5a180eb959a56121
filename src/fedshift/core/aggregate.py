"""Pure aggregation functions on stacked client parameters (Flower's ``aggregate`` style)."""

from __future__ import annotations

import torch

from fedshift.core.base import Params

__all__ = ["weighted_mean"]


def weighted_mean(stacked: Params, weights: torch.Tensor) -> Params:
    """Σ_i w_i x_i / Σ_i w_i over the leading client axis.

    Parameters
    ----------
    stacked : dict[str, Tensor]
        Tensors of shape (C, ...).
    weights : Tensor, shape (C,)
        Non-negative weights, not all zero (e.g. n_i for FedAvg).

    Returns
    -------
    dict[str, Tensor]
        Tensors of shape (...).

    Raises
    ------
    ValueError
        If the weights are negative, all zero, or not C of them.
    """
    first = next(iter(stacked.values()))
    if weights.shape != (first.shape[0],):
        raise ValueError(f"need {first.shape[0]} weights, got shape {tuple(weights.shape)}")
    if (weights < 0).any() or not weights.sum() > 0:
        raise ValueError("weights must be non-negative and not all zero")
    w = (weights / weights.sum()).to(first.dtype)
    return {k: torch.tensordot(w, v, dims=1) for k, v in stacked.items()}
