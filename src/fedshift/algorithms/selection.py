"""Model selection on a validation set during training (early-stopping selection).

FedPALS (Listo Zec et al. 2024, §5): "Early stopping, model hyperparameters, and λ in FedPALS are
tuned using a validation set that reflects the target distribution". :func:`with_model_selection`
wraps any algorithm: every ``every`` rounds (and after the last one) the server scores the current
model on its validation set and keeps the best parameters seen so far, which become the
algorithm's output (``eval_params``). The best model is part of the state, so a resumed run
selects exactly what an uninterrupted run selects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fedshift.algorithms.base import ClientData, FederatedAlgorithm, Params, state_from_dict, state_to_dict
from fedshift.rng import RoundKey

__all__ = ["SelectionState", "with_model_selection"]


@dataclass(frozen=True)
class SelectionState:
    """State of a wrapped algorithm.

    Attributes
    ----------
    inner : dict
        The wrapped algorithm's state as :func:`~fedshift.algorithms.base.state_to_dict`.
    best_params : dict[str, Tensor]
        Parameters with the best validation score so far (the initial model before any check).
    best_score : float
        Their score (−inf before the first check).
    best_round : int
        Rounds completed when they were produced (0: the initial model).
    """

    inner: dict[str, Any]
    best_params: Params
    best_score: float
    best_round: int


def with_model_selection(
    algorithm: FederatedAlgorithm, *, score: Callable[[Params], float] | None, every: int, rounds: int,
    monitor: Callable[[Params], dict[str, float]] | None = None,
) -> FederatedAlgorithm[SelectionState]:
    """Wrap ``algorithm`` so that its output is the best model on a validation score.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
        Any algorithm of fedshift.
    score : callable or None
        ``score(params) -> float``, higher is better (e.g. validation accuracy). None: nothing is selected,
        the output stays the wrapped algorithm's (only ``monitor`` is recorded; FedMM's curves).
    every : int
        Check every this many rounds (>= 1); the training loop's ``log_every`` should be the same
        so that every logged row carries the scores.
    rounds : int
        Total rounds; the model after the last round is always checked.
    monitor : callable, optional
        ``monitor(params) -> {name: value}`` extra metrics recorded at each check (e.g. target test
        accuracy for training curves); never used for selection.

    Returns
    -------
    FederatedAlgorithm[SelectionState]
        Same name as ``algorithm``; diagnostics gain ``eval/score`` (and ``eval/<name>`` of
        ``monitor``) at the checked rounds.

    Raises
    ------
    ValueError
        If ``every`` < 1.
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")

    def init(params: Params) -> SelectionState:
        inner = algorithm.init(params)
        # without a score nothing is ever selected: keep no copy (it would ride in every checkpoint)
        best = {k: v.detach().clone() for k, v in algorithm.eval_params(inner).items()} if score is not None else {}
        return SelectionState(state_to_dict(inner), best, float("-inf"), 0)

    def apply(state: SelectionState, clients: Sequence[ClientData], key: RoundKey):
        inner = state_from_dict(algorithm.state_type, state.inner)
        inner, diag = algorithm.apply(inner, clients, key)
        done = key.round + 1
        best_params, best_score, best_round = state.best_params, state.best_score, state.best_round
        if done % every == 0 or done == rounds:
            params = algorithm.eval_params(inner)
            value = float(score(params)) if score is not None else float("-inf")
            if score is not None:
                diag = {**diag, "eval/score": torch.tensor(value, dtype=torch.float64)}
            if monitor is not None:
                diag |= {f"eval/{k}": torch.tensor(float(v), dtype=torch.float64) for k, v in monitor(params).items()}
            if value > best_score:
                best_params = {k: v.detach().clone() for k, v in params.items()}
                best_score, best_round = value, done
        return SelectionState(state_to_dict(inner), best_params, best_score, best_round), diag

    def eval_params(state: SelectionState) -> Params:
        if score is None:
            return algorithm.eval_params(state_from_dict(algorithm.state_type, state.inner))
        return state.best_params

    return FederatedAlgorithm(algorithm.name, init, apply, eval_params, SelectionState)
