"""WAFL training and evaluation of one run (arXiv:2206.01432, Algorithm 1; §6's shifted evaluation).

The run's algorithm is built by the registry (:func:`fedshift.algorithms.registry.build`) from its resolved
hyper-parameters (:func:`fedshift.papers.wafl.config.resolve`); :func:`train_run` trains it and
:func:`evaluate_run` gives the clean and PGD-shifted metrics, ρ² and Fig. 5's convergence curve. Part of
:mod:`fedshift.papers.wafl`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from fedshift.algorithms import adversarial, registry
from fedshift.contract import Fit
from fedshift.core.metrics import shifted_metrics
from fedshift.core.training import run_training
from fedshift.models import build_model, forward, init_params
from fedshift.papers.wafl.config import registered_algorithm
from fedshift.papers.wafl.data import load_data

__all__ = ["build_module", "train_run", "evaluate_run"]


def build_module(resolved: dict[str, Any], input_shape: tuple[int, ...]) -> torch.nn.Module:
    """MLR (``logreg``) on the flattened input or the McMahan et al. CNN (``cnn_mcmahan``), 10 classes (paper §6).

    Parameters
    ----------
    resolved : dict
        The run's ``hparams`` (:func:`fedshift.papers.wafl.config.resolve`); reads ``model``.
    input_shape : tuple of int
        (C, H, W) of one example (:func:`fedshift.papers.wafl.data.load_data`'s ``input_shape``).

    Returns
    -------
    torch.nn.Module
        Uninitialised; :func:`fedshift.models.init_params` draws its θ₀ from the run's seed.
    """
    if resolved["model"] == "logreg":
        return build_model("logreg", input_dim=int(np.prod(input_shape)), num_classes=10)
    return build_model("cnn_mcmahan", num_classes=10, in_channels=input_shape[0], image_size=input_shape[-1])


# ---------------------------------------------------------------------------------------------- train

def train_run(resolved: dict[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
              device: torch.device, checkpoint_path: str | Path | None, fingerprint: str) -> Fit:
    """Train one (experiment, algorithm, seed) run: Algorithm 1 or a baseline.

    :func:`fedshift.jobs.train_job` writes the result.

    Parameters
    ----------
    resolved : dict
        :func:`fedshift.papers.wafl.config.resolve` (the run's ``hparams``); γ is ``resolved["perturb"]["gamma"]``
        for WAFL.
    seed : int
        Initialisation (``init_params(module, seed)``) and every round's client sample and batches
        (``RoundKey(seed, round)``).
    prepared_path, partition_path : path
        The source dataset and the experiment's partition.
    device : torch.device
    checkpoint_path : path, optional
        Resume point (resumed when its fingerprint matches ``fingerprint``).
    fingerprint : str
        The job's checkpoint identity (:func:`fedshift.jobs.input_fingerprint`).

    Returns
    -------
    Fit
        Final θ; per-logged-round loss and ρ² (``history``); ``artifacts``: {round: θ} snapshots every
        ``snapshot_every`` rounds (empty when 0; Fig. 5 evaluates them).

    Raises
    ------
    NonFiniteLossError
        On NaN / inf (nothing is written).
    """
    data = load_data(resolved, prepared_path, partition_path, device)
    module = build_module(resolved, data["input_shape"]).to(device)
    tr = resolved["train"]
    alg = registry.build(
        registered_algorithm(resolved["kind"]), registry.BuildContext(module),
        clients_per_round=tr["clients_per_round"], local_epochs=tr["local_epochs"],
        batch_size=tr["batch_size"], client_lr=tr["client_lr"], snapshot_every=tr.get("snapshot_every", 0),
        l2=tr.get("l2", 0.0), **resolved["perturb"])
    result = run_training(alg, init_params(module, seed, device=device), data["clients"], rounds=tr["rounds"],
                          seed=seed, checkpoint_path=checkpoint_path, checkpoint_every=tr["checkpoint_every"],
                          log_every=tr["log_every"], fingerprint=fingerprint)
    state = result.state
    snapshots = {r: {k: v.cpu() for k, v in p.items()} for r, p in state.snapshots.items()}
    info = {"resolved": resolved, "client_sizes": [c.num_examples for c in data["clients"]], "rounds": state.round}
    return Fit(state.params, pd.DataFrame(result.history).rename(columns={"metric/rho2": "rho2"}), info, result,
               snapshots)


# ---------------------------------------------------------------------------------------------- evaluate

def _per_example(module, params, x, y, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example cross-entropy and correctness (no gradient), in chunks."""
    losses, correct = [], []
    with torch.no_grad():
        for i in range(0, len(y), chunk):
            logits = forward(module, params, x[i: i + chunk])
            losses.append(F.cross_entropy(logits, y[i: i + chunk], reduction="none"))
            correct.append(logits.argmax(1) == y[i: i + chunk])
    if not losses:  # a client without examples in this set
        return x.new_zeros(0), torch.zeros(0, dtype=torch.bool, device=x.device)
    return torch.cat(losses), torch.cat(correct)


def _attack(module, params, x, y, shift: dict[str, Any], chunk: int = 2048) -> torch.Tensor:
    """``x`` shifted by ℓ∞ PGD against ``params`` (:func:`fedshift.algorithms.adversarial.pgd_linf`), in chunks."""
    if not len(y):
        return x
    return torch.cat([adversarial.pgd_linf(module, params, x[i: i + chunk], y[i: i + chunk], eps=shift["eps"],
                                           step=shift["step"], steps=shift["steps"])
                      for i in range(0, len(y), chunk)])


def _rho2(module: torch.nn.Module, params: dict[str, torch.Tensor], clients: list, perturb: dict[str, Any]) -> float:
    """ρ² = mean ‖ζ* − z‖² over all clients' training examples at ``params`` (WAFL's γ and inner solver; Fig. 2)."""
    num = den = 0.0
    for c in clients:
        z = adversarial.wasserstein_ascent(module, params, c.x, c.y, gamma=perturb["gamma"], lr=perturb["inner_lr"],
                                           steps=perturb["inner_steps"], cost=perturb["cost"],
                                           step_rule=perturb["step_rule"])
        num += (z - c.x).flatten(1).pow(2).sum().item()
        den += c.num_examples
    return num / den


def evaluate_run(resolved: dict[str, Any], seed: int, shift: dict[str, Any], *, prepared_path: str | Path,
                 partition_path: str | Path, model_path: str | Path, artifacts_path: str | Path, curve: bool,
                 target_path: str | Path | None = None, device: torch.device) -> pd.DataFrame:
    """Evaluate one run: tidy rows (the job skeleton writes them to ``metrics.csv``).

    * ``population = clients``: all clients' test sets with a fraction f of the clients shifted by ℓ∞ PGD
      against the evaluated model (``shift``: MNIST ε = 0.3, α = 0.01, 40 steps; CIFAR-10 ε = 8/255,
      α = 2/255, 10 steps; paper §6), for every f of ``shift["fractions"]``: accuracy (∈ [0, 1]) and loss (nats).
    * ``population = validation``: the same on the clients' validation sets, when the partition holds them out,
      with an independent draw of the shifted clients (:func:`fedshift.core.metrics.attacked_clients` stream 1);
      final round only.
    * ``population = target``: the target's test split (domain adaptation, Table 2), clean.
    * ``metric = rho2`` (WAFL only): ρ² = mean ‖ζ* − z‖² over all clients' training examples at the final θ
      with the run's γ and inner solver (the x-axis of Fig. 2).
    * With ``curve``, every snapshot round of ``artifacts_path`` (:func:`train_run`'s artifacts) is evaluated too
      (Fig. 5).

    Parameters
    ----------
    resolved : dict
        The run's ``hparams`` (:func:`fedshift.papers.wafl.config.resolve`).
    seed : int
        The run's seed: which clients are shifted (:func:`fedshift.core.metrics.shifted_metrics`).
    shift : dict
        The experiment's ``shift`` (``eps``, ``step``, ``steps``, ``fractions``; standardised input units).
    prepared_path, partition_path, model_path, artifacts_path, target_path : path
        The source dataset, the partition, the run's ``model.pt`` and ``artifacts.pt``, the target's prepared
        dataset (Table 2; None otherwise).
    curve : bool
        Evaluate the snapshots of ``artifacts_path`` too (Fig. 5's run).
    device : torch.device

    Returns
    -------
    DataFrame
        Columns experiment, algorithm, kind, gamma (NaN for a baseline), seed, round, population, fraction,
        metric, value.
    """
    dev = device
    data = load_data(resolved, prepared_path, partition_path, dev, target_path)
    module = build_module(resolved, data["input_shape"]).to(dev)
    final = torch.load(model_path, map_location=dev, weights_only=True)
    thetas = {resolved["train"]["rounds"]: final}
    if curve:
        snaps = torch.load(artifacts_path, map_location=dev, weights_only=True)
        thetas.update({int(r): p for r, p in snaps.items()})
    rows: list[dict[str, Any]] = []
    for rnd in sorted(thetas):
        params = thetas[rnd]
        if data["target"] is not None:
            loss, corr = _per_example(module, params, *data["target"])
            rows += [{"round": rnd, "population": "target", "fraction": 0.0, "metric": "accuracy",
                      "value": corr.float().mean().item()},
                     {"round": rnd, "population": "target", "fraction": 0.0, "metric": "loss",
                      "value": loss.mean().item()}]
        sets = [("clients", data["test"], 0)]
        if data["validation"] and rnd == resolved["train"]["rounds"]:
            sets.append(("validation", data["validation"], 1))
        for population, pairs, stream in sets:
            clean = [_per_example(module, params, x, y) for x, y in pairs]
            if any(f > 0 for f in shift["fractions"]):
                shifted = [_per_example(module, params, _attack(module, params, x, y, shift), y)
                           for x, y in pairs]
            else:
                shifted = clean
            for r in shifted_metrics(clean, shifted, shift["fractions"], seed, stream):
                rows += [{"round": rnd, "population": population, "fraction": r["fraction"], "metric": m,
                          "value": r[m]} for m in ("accuracy", "loss")]
    if resolved["kind"] == "wafl":
        rows.append({"round": resolved["train"]["rounds"], "population": "clients_train", "fraction": 0.0,
                     "metric": "rho2", "value": _rho2(module, final, data["clients"], resolved["perturb"])})
    kind = resolved["kind"]
    gamma = resolved["perturb"]["gamma"] if kind == "wafl" else None
    df = pd.DataFrame(rows)
    for col, val in reversed([("experiment", resolved["experiment"]), ("algorithm", resolved["algorithm"]),
                              ("kind", kind), ("gamma", gamma if gamma is not None else np.nan), ("seed", seed)]):
        df.insert(0, col, val)
    return df
