"""FedPALS's synthetic task (§5.2, App. A.2; Fig. 4): Gaussian clients, FedAvg and every λ candidate per δ.

Many small models per seed and no run to store, so it is a stage of the paper's own (``synthetic.smk``), not a
contract run. Part of :mod:`fedshift.papers.fedpals`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedshift.algorithms import registry
from fedshift.algorithms.fedpals import (
    check_marginal,
    effective_sample_size,
    fedpals_weights,
    projection_distance,
    resolve_lambda,
)
from fedshift.core.base import ClientData, FederatedAlgorithm
from fedshift.core.selection import with_model_selection
from fedshift.core.training import run_training
from fedshift.io import atomic_write
from fedshift.models import LogisticRegression, init_params
from fedshift.papers.fedpals.fit import accuracy_and_f1
from fedshift.partition import largest_remainder

__all__ = ["synthetic_job"]

def _gaussian_sample(means: np.ndarray, counts: np.ndarray, rng: np.random.Generator
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for k, c in enumerate(counts):
        xs.append(rng.normal(means[k], 1.0, size=(int(c), means.shape[1])))
        ys.append(np.full(int(c), k))
    return (torch.as_tensor(np.concatenate(xs), dtype=torch.float64),
            torch.as_tensor(np.concatenate(ys), dtype=torch.int64))


def synthetic_job(spec: dict[str, Any], seed: int, metrics_path: str | Path) -> pd.DataFrame:
    """One run of the synthetic label-shift task for every δ: FedPALS vs FedAvg.

    Clients hold n_i points with label marginal S_i from p(x | y) = N(μ_y, I); the target label
    marginal is T_δ = (1 − δ)·``target_start`` + δ·``target_end``. FedAvg trains once; FedPALS
    trains once per (δ, λ candidate) with weights α^λ(T_δ), and for each δ the λ and round with the
    best accuracy on a validation sample drawn like T_δ are kept (as the paper tunes λ on a
    target-like validation set). Logistic regression in float64, full participation.

    Parameters
    ----------
    spec : dict
        The ``fedpals.synthetic`` section.
    seed : int
        Seed of the data, initialisation and batches of this run.
    metrics_path : path
        Output CSV: ``seed, delta, projection_distance, algorithm, lambda, ess_fraction, accuracy``.

    Returns
    -------
    DataFrame
        The rows written.
    """
    rng = np.random.default_rng([seed, 7])
    means = np.asarray(spec["means"], dtype=np.float64)
    s = check_marginal(spec["client_marginals"], "client marginals")
    sizes = np.asarray(spec["client_sizes"])
    k = means.shape[0]
    clients = []
    for i, (marg, n) in enumerate(zip(s, sizes, strict=True)):
        x, y = _gaussian_sample(means, largest_remainder(marg, int(n)), rng)
        clients.append(ClientData(i, x, y, 0))
    module = LogisticRegression(means.shape[1], k).to(torch.float64)
    tr = spec["train"]
    common = {"clients_per_round": len(clients), "local_epochs": tr["local_epochs"], "batch_size": tr["batch_size"],
              "client_lr": tr["client_lr"]}
    params0 = init_params(module, seed, dtype=torch.float64)
    rows = []

    def fit(algorithm: FederatedAlgorithm, x_val: torch.Tensor, y_val: torch.Tensor) -> tuple[dict, float]:
        sel = with_model_selection(algorithm, every=tr["eval_every"], rounds=tr["rounds"],
                                   score=lambda p: accuracy_and_f1(module, p, x_val, y_val, k)["accuracy"])
        res = run_training(sel, params0, clients, rounds=tr["rounds"], seed=seed, log_every=tr["eval_every"])
        return res.state.best_params, res.state.best_score

    t0, t1 = np.asarray(spec["target_start"], float), np.asarray(spec["target_end"], float)
    for delta in spec["deltas"]:
        t = (1 - delta) * t0 + delta * t1
        x_val, y_val = _gaussian_sample(means, largest_remainder(t, spec["validation_size"]), rng)
        x_test, y_test = _gaussian_sample(means, largest_remainder(t, spec["test_size"]), rng)
        d = projection_distance(t, s)
        fedavg_params, _ = fit(registry.build("fedavg", registry.BuildContext(module), **common), x_val, y_val)
        acc = accuracy_and_f1(module, fedavg_params, x_test, y_test, k)["accuracy"]
        rows.append({"delta": delta, "projection_distance": d, "algorithm": "fedavg", "lambda": math.inf,
                     "ess_fraction": 1.0, "accuracy": acc})
        best = None
        lams = [float(v) for v in spec["lambdas"]] + [resolve_lambda(t, s, sizes, ess_fraction=f)
                                                      for f in spec["ess_fractions"]]
        for lam in lams:
            context = registry.BuildContext(module, target_label_marginal=t, client_label_marginals=s)
            alg = registry.build("fedpals", context, lam=lam, **common)
            params, val = fit(alg, x_val, y_val)
            if best is None or val > best[0]:
                best = (val, lam, params)
        _, lam, params = best
        alpha = fedpals_weights(t, s, sizes, lam)
        rows.append({"delta": delta, "projection_distance": d, "algorithm": "fedpals", "lambda": lam,
                     "ess_fraction": effective_sample_size(alpha, sizes) / sizes.sum(),
                     "accuracy": accuracy_and_f1(module, params, x_test, y_test, k)["accuracy"]})
    df = pd.DataFrame(rows)
    df.insert(0, "seed", seed)
    with atomic_write(metrics_path) as fh:
        df.to_csv(fh, index=False)
    return df
