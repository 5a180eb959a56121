"""Model selection on a validation set during training (early-stopping selection).

FedPALS (Listo Zec et al. 2024, §5): "Early stopping, model hyperparameters, and λ in FedPALS are
tuned using a validation set that reflects the target distribution". :func:`with_model_selection`
wraps any algorithm: every ``every`` rounds (and after the last one) the server scores the current
model on its validation set and keeps the best parameters seen so far, which become the
algorithm's output (``eval_params``). The best model is part of the state, so a resumed run
selects exactly what an uninterrupted run selects. :func:`with_monitor` only records metrics of the
current model at the same rounds (training curves) and leaves the algorithm's state and output alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fedshift.core.base import ClientData, FederatedAlgorithm, Params, state_from_dict, state_to_dict
from fedshift.core.rng import RoundKey

__all__ = ["SelectionState", "SnapshotState", "with_model_selection", "with_monitor", "with_snapshots"]


@dataclass(frozen=True)
class SelectionState:
    """State of a wrapped algorithm.

    Attributes
    ----------
    inner : dict
        The wrapped algorithm's state as :func:`~fedshift.core.base.state_to_dict`.
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
    algorithm: FederatedAlgorithm, *, score: Callable[[Params], float], every: int, rounds: int,
    monitor: Callable[[Params], dict[str, float]] | None = None,
) -> FederatedAlgorithm[SelectionState]:
    """Wrap ``algorithm`` so that its output is the best model on a validation score.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
        Any algorithm of fedshift.
    score : callable
        ``score(params) -> float``, higher is better (e.g. validation accuracy). To record metrics without
        selecting, use :func:`with_monitor`.
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
    _require_every(every)

    def init(params: Params) -> SelectionState:
        inner = algorithm.init(params)
        best = {k: v.detach().clone() for k, v in algorithm.eval_params(inner).items()}
        return SelectionState(state_to_dict(inner), best, float("-inf"), 0)

    def apply(state: SelectionState, clients: Sequence[ClientData], key: RoundKey):
        inner = state_from_dict(algorithm.state_type, state.inner)
        inner, diag = algorithm.apply(inner, clients, key)
        done = key.round + 1
        best_params, best_score, best_round = state.best_params, state.best_score, state.best_round
        if _due(done, every, rounds):
            params = algorithm.eval_params(inner)
            value = float(score(params))
            diag = {**diag, "eval/score": torch.tensor(value, dtype=torch.float64)}
            if monitor is not None:
                diag |= _recorded(monitor(params))
            if value > best_score:
                best_params = {k: v.detach().clone() for k, v in params.items()}
                best_score, best_round = value, done
        return SelectionState(state_to_dict(inner), best_params, best_score, best_round), diag

    def eval_params(state: SelectionState) -> Params:
        return state.best_params

    return FederatedAlgorithm(algorithm.name, init, apply, eval_params, SelectionState)


def _require_every(every: int) -> None:
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")


def _due(done: int, every: int, rounds: int) -> bool:
    """Whether the model after ``done`` rounds is checked: every ``every`` rounds and after the last."""
    return done % every == 0 or done == rounds


def _recorded(metrics: dict[str, float]) -> dict[str, torch.Tensor]:
    return {f"eval/{k}": torch.tensor(float(v), dtype=torch.float64) for k, v in metrics.items()}


def with_monitor(algorithm: FederatedAlgorithm, monitor: Callable[[Params], dict[str, float]], *, every: int,
                 rounds: int) -> FederatedAlgorithm:
    """Wrap ``algorithm`` so that every ``every`` rounds (and after the last) it records metrics of its model.

    Nothing is selected and nothing is added to the state: ``init``, ``eval_params``, the state type and so
    the checkpoints are the wrapped algorithm's (FedMM's target-accuracy curves, Figs. 4–7).

    Parameters
    ----------
    algorithm : FederatedAlgorithm
    monitor : callable
        ``monitor(params) -> {name: value}`` on ``algorithm.eval_params(state)``.
    every : int
        Record every this many rounds (>= 1; the training loop's ``log_every`` should be the same).
    rounds : int
        Total rounds; the model after the last round is always recorded.

    Returns
    -------
    FederatedAlgorithm
        Same name and state type; diagnostics gain ``eval/<name>`` (float64 scalars) at the recorded rounds.

    Raises
    ------
    ValueError
        If ``every`` < 1.
    """
    _require_every(every)

    def apply(state, clients: Sequence[ClientData], key: RoundKey):
        state, diag = algorithm.apply(state, clients, key)
        done = key.round + 1
        if _due(done, every, rounds):
            diag = {**diag, **_recorded(monitor(algorithm.eval_params(state)))}
        return state, diag

    return FederatedAlgorithm(algorithm.name, algorithm.init, apply, algorithm.eval_params, algorithm.state_type)


@dataclass(frozen=True)
class SnapshotState:
    """State of an algorithm wrapped by :func:`with_snapshots`.

    Attributes
    ----------
    inner : dict
        The wrapped algorithm's state as :func:`~fedshift.core.base.state_to_dict`.
    snapshots : dict[str, dict[str, Tensor]]
        ``"<round>/<view>"`` → the parameters that view of the state held after that many rounds.
    """

    inner: dict[str, Any]
    snapshots: dict[str, Params]


def with_snapshots(algorithm: FederatedAlgorithm, *, rounds: Sequence[int],
                   views: dict[str, Callable[[Any], Params]]) -> FederatedAlgorithm[SnapshotState]:
    """Wrap ``algorithm`` so that it keeps copies of its parameters after given rounds, for a later choice.

    One training run then serves every candidate number of rounds T and every view of the state (e.g. the
    averaged iterate w^A and the last iterate of Stochastic-AFL, Mohri et al. 2019 Fig. 3). The copies are part
    of the (checkpointed) state, so a resumed run holds exactly the snapshots of an uninterrupted one.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
    rounds : sequence of int
        Rounds completed after which to copy (each ≥ 1).
    views : dict
        Name → function from the wrapped state to parameters (e.g. ``lambda s: s.avg_params``).

    Returns
    -------
    FederatedAlgorithm[SnapshotState]
        Same name, ``apply`` and output (``eval_params``) as ``algorithm``.

    Raises
    ------
    ValueError
        If a round is < 1 or no view is given.
    """
    wanted = sorted(set(int(r) for r in rounds))
    if not views or not wanted or wanted[0] < 1:
        raise ValueError(f"need views and rounds >= 1, got views {list(views)} and rounds {list(rounds)}")

    def init(params: Params) -> SnapshotState:
        return SnapshotState(state_to_dict(algorithm.init(params)), {})

    def apply(state: SnapshotState, clients: Sequence[ClientData], key: RoundKey):
        inner, diag = algorithm.apply(state_from_dict(algorithm.state_type, state.inner), clients, key)
        snaps = state.snapshots
        if key.round + 1 in wanted:
            snaps = {**snaps, **{f"{key.round + 1}/{name}": {k: v.detach().clone() for k, v in view(inner).items()}
                                 for name, view in views.items()}}
        return SnapshotState(state_to_dict(inner), snaps), diag

    def eval_params(state: SnapshotState) -> Params:
        return algorithm.eval_params(state_from_dict(algorithm.state_type, state.inner))

    return FederatedAlgorithm(algorithm.name, init, apply, eval_params, SnapshotState)
