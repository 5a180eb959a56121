"""The benchmark scale's rounds: the criterion that picks a model's budget R from FedAvg's validation curve.

A pilot (``benchmarks/matrix_rounds.py``, seeds disjoint from every reported run) trains FedAvg at one client step
per (model, shift) and scores the shift's validation population every k rounds. :func:`choose_rounds` reads the
curve's mean over the pilot seeds and returns the smallest R that (a) is within ``near`` (1 point) of the best mean
score the curve reaches from R to its end R_max, and (b) passes the matrix's own plateau gate: the move from R/3 (the
successive-halving rung before the full budget, :func:`.cells.rungs` with n = 9, η = 3) to R is at most
``plateau_tolerance`` (:func:`.ranking.validity`). Candidates are the multiples of 3k up to R_max, so that R/3 is
itself a point of the curve. Never reads test data.

Imports no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Choice", "choose_rounds", "mean_curve"]


@dataclass(frozen=True)
class Choice:
    """The rounds :func:`choose_rounds` picked and the numbers that justify them.

    Attributes
    ----------
    rounds : int
        R; R_max (the curve's last point) where no candidate passes (``plateau`` False).
    score : float
        Mean validation score at R (a fraction in [0, 1]).
    best_after : float
        Max of the mean score over the curve's points in [R, R_max].
    third : float
        Mean score at R/3.
    plateau : bool
        Whether R meets both conditions (False: the curve had not flattened by R_max).
    """

    rounds: int
    score: float
    best_after: float
    third: float
    plateau: bool


def mean_curve(rows: Sequence[Mapping[str, float]]) -> dict[int, float]:
    """Round → mean ``validation`` over the rows of that round (the pilot seeds); a NaN score counts as 0.

    Parameters
    ----------
    rows : sequence of mapping
        Each with ``round`` (int) and ``validation`` (float, NaN where training diverged).

    Returns
    -------
    dict of int to float
        Sorted by round.
    """
    acc: dict[int, list[float]] = {}
    for row in rows:
        v = float(row["validation"])
        acc.setdefault(int(row["round"]), []).append(0.0 if math.isnan(v) else v)
    return {r: sum(v) / len(v) for r, v in sorted(acc.items())}


def choose_rounds(curve: Mapping[int, float], step: int, *, near: float = 0.01,
                  plateau_tolerance: float = 0.05) -> Choice:
    """The smallest R on the grid of multiples of 3·``step`` at plateau on ``curve`` (module docstring).

    Parameters
    ----------
    curve : mapping of int to float
        Round → mean validation score, evaluated at every multiple of ``step`` up to R_max (its largest key).
    step : int
        k, the evaluation period in rounds (≥ 1).
    near : float
        How far below the best later score R may stay (a fraction; default 0.01, one point).
    plateau_tolerance : float
        The matrix's gate: the largest allowed |score(R) − score(R/3)| (default 0.05).

    Returns
    -------
    Choice

    Raises
    ------
    ValueError
        For ``step`` < 1, or a curve missing a multiple of ``step`` up to its last round, or with no multiple of
        3·``step``.
    """
    if step < 1:
        raise ValueError(f"choose_rounds: step must be >= 1, got {step}")
    r_max = max(curve)
    missing = [r for r in range(step, r_max + 1, step) if r not in curve]
    if missing:
        raise ValueError(f"choose_rounds: the curve lacks rounds {missing[:5]} (every multiple of step={step})")
    candidates = list(range(3 * step, r_max + 1, 3 * step))
    if not candidates:
        raise ValueError(f"choose_rounds: no multiple of 3*step={3 * step} up to R_max={r_max}")
    for r in candidates:
        best = max(v for q, v in curve.items() if q >= r)
        ok = curve[r] >= best - near and abs(curve[r] - curve[r // 3]) <= plateau_tolerance
        if ok:
            return Choice(r, curve[r], best, curve[r // 3], True)
    r = candidates[-1]
    return Choice(r, curve[r], max(v for q, v in curve.items() if q >= r), curve[r // 3], False)
