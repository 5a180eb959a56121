"""WAFL's client weights λ by Wasserstein distances to the target (eq. 9, paper §5), for Table 2.

Reads a domain-adaptation experiment's prepared inputs (:func:`fedshift.papers.wafl.data.load_data`), trains
nothing, and writes λ as a tidy CSV (the ``wafl_lambda_<experiment>`` outputs). An output-only module
(:attr:`fedshift.papers.wafl.paper.WaflPaper.output_modules`): editing it reruns no training or evaluation job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from fedshift.io import atomic_write

__all__ = ["wasserstein_lambda", "write_lambda"]

log = logging.getLogger(__name__)


def wasserstein_lambda(clients: Sequence[torch.Tensor], target: torch.Tensor, *, max_points: int,
                       seed: int) -> pd.DataFrame:
    """Client weights λ by eq. (9): min_{λ∈Δ} Σ_i λ_i W₂(P̂_i, Q̂), a linear program (paper §5).

    W₂ between each client's training inputs and the target's inputs is computed exactly (``ot.emd2``,
    squared Euclidean ground cost; W₂ = √cost) on at most ``max_points`` random points of each side.

    Parameters
    ----------
    clients : sequence of Tensor, shapes (n_i, ...)
        Source clients' inputs.
    target : Tensor, shape (n_Q, ...)
        Target inputs.
    max_points : int
        Subsample size per distribution (exact OT is O(n³)).
    seed : int
        Subsampling seed.

    Returns
    -------
    DataFrame
        Columns client, n, w2, lambda (the LP solution; a vertex of the simplex since the objective is
        linear: all weight on the nearest client) and the optimum ρ* = Σ λ_i W₂ (column rho_star).
    """
    import ot
    from scipy.optimize import linprog

    rng = np.random.default_rng(np.random.SeedSequence([seed, 9]))

    def sub(x: torch.Tensor) -> np.ndarray:
        a = x.flatten(1).double().cpu().numpy()
        return a[rng.choice(len(a), size=min(max_points, len(a)), replace=False)]

    q = sub(target)
    w2 = []
    for c in clients:
        p = sub(c)
        cost = ot.dist(p, q, metric="sqeuclidean")
        w2.append(float(np.sqrt(ot.emd2(ot.unif(len(p)), ot.unif(len(q)), cost, numItermax=1_000_000))))
    w2a = np.asarray(w2)
    res = linprog(w2a, A_eq=np.ones((1, len(w2a))), b_eq=[1.0], bounds=[(0, None)] * len(w2a), method="highs")
    if not res.success:
        raise RuntimeError(f"eq. (9) linear program failed: {res.message}")
    return pd.DataFrame({"client": range(len(w2a)), "n": [len(c) for c in clients], "w2": w2a,
                         "lambda": res.x, "rho_star": float(res.fun)})


def write_lambda(data: dict, points: int, seed: int, path: str | Path) -> pd.DataFrame:
    """Eq. (9)'s λ of one domain-adaptation experiment (:func:`wasserstein_lambda`) to the CSV ``path``.

    ``data``: :func:`fedshift.papers.wafl.data.load_data` with the target; W₂ is computed on the target's
    unlabelled train inputs (its test inputs when it has no train split).
    """
    target = data["target_train"] if data["target_train"] is not None else data["target"][0]
    df = wasserstein_lambda([c.x for c in data["clients"]], target, max_points=points, seed=seed)
    with atomic_write(path) as fh:
        df.to_csv(fh, index=False)
    log.info("W2 to the target: min %.3f, median %.3f, max %.3f; rho* = %.3f", df.w2.min(), df.w2.median(),
             df.w2.max(), df.rho_star.iloc[0])
    return df
