"""FedPALS training and evaluation of one run: the algorithm from its resolved hyper-parameters, fit, metrics.

The algorithms live in :mod:`fedshift.algorithms` (``fedpals``, ``fedavg``, ``fedprox``, ``scaffold``); λ is
resolved once (:func:`fedshift.algorithms.fedpals.resolve_lambda`). Part of :mod:`fedshift.papers.fedpals`.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from fedshift.algorithms import registry
from fedshift.algorithms.fedpals import (
    effective_sample_size,
    fedpals_weights,
    resolve_lambda,
)
from fedshift.contract import Fit
from fedshift.core.base import FederatedAlgorithm
from fedshift.core.engine import FilePool
from fedshift.core.selection import with_model_selection
from fedshift.core.training import NonFiniteLossError, run_training
from fedshift.data.wilds import ImageFiles
from fedshift.io import read_json
from fedshift.models import build_model, forward, init_params
from fedshift.papers.fedpals.config import IMAGE_SHAPE, NUM_LABELS, PALS_KINDS, registered_algorithm
from fedshift.papers.fedpals.data import job_data, num_workers

__all__ = ["accuracy_and_f1", "build_run_algorithm", "train_run", "evaluate_run"]

log = logging.getLogger(__name__)

def _model(resolved: dict[str, Any], input_dim: int, weights_path: str | Path | None = None) -> torch.nn.Module:
    k = NUM_LABELS[resolved["dataset"]]
    if resolved["model"] == "resnet50":
        if resolved.get("pretrained") and weights_path is None:
            raise ValueError(f"{resolved['experiment']}: a pretrained resnet50 needs its weights file")
        return build_model("resnet50", num_classes=k, weights_path=str(weights_path) if weights_path else None)
    if resolved["model"] == "cnn2":
        c, side = IMAGE_SHAPE[resolved["dataset"]]
        return build_model("cnn2", num_classes=k, in_channels=c, image_size=side)
    return build_model("logreg", input_dim=input_dim, num_classes=k)


def _classification_metrics(yt: np.ndarray, yp: np.ndarray, loss_sum: float, num_labels: int) -> dict[str, float]:
    conf = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(conf, (yt, yp), 1)
    tp = np.diag(conf).astype(np.float64)
    prec_den, rec_den = conf.sum(0), conf.sum(1)
    present = (rec_den > 0) | (prec_den > 0)
    f1 = np.where(prec_den + rec_den > 0, 2 * tp / np.maximum(prec_den + rec_den, 1), 0.0)
    return {"accuracy": float((yp == yt).mean()), "macro_f1": float(f1[present].mean()), "loss": loss_sum / len(yt)}


@torch.no_grad()
def accuracy_and_f1(module: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor | ImageFiles,
                    y: torch.Tensor | None, num_labels: int, batch_size: int = 4096,
                    device: torch.device | None = None, num_workers: int = 0) -> dict[str, float]:
    """Accuracy, macro-F1 and mean cross-entropy of a model on one labelled set.

    Macro-F1 averages the per-class F1 over the classes present in ``y`` or predicted (WILDS's
    ``F1-macro_all`` for iWildCam averages over all classes present in the labels; a class never
    present and never predicted is left out).

    Parameters
    ----------
    x : Tensor (n, ...) or ImageFiles
        Inputs; or image files, decoded in batches of ``batch_size`` by ``num_workers`` DataLoader
        worker processes, as in training (then ``y`` is ignored and the batches go to ``device``; the
        module is evaluated in eval mode).
    y : Tensor (n,) or None

    Returns
    -------
    dict
        ``accuracy`` and ``macro_f1`` in [0, 1]; ``loss`` in nats.
    """
    preds, labels, loss = [], [], 0.0
    if isinstance(x, ImageFiles):
        was = module.training
        module.eval()
        # Predictions, labels and the loss (float64, the same sums as Python floats) stay on the device until the
        # set is done: no batch waits for the device to report.
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        try:
            loader = torch.utils.data.DataLoader(x, batch_size=batch_size, num_workers=num_workers,
                                                 pin_memory=device is not None and torch.device(device).type == "cuda")
            for xb, yb in loader:
                xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
                logits = forward(module, params, xb)
                preds.append(logits.argmax(1))
                labels.append(yb)
                loss_sum += F.cross_entropy(logits.double(), yb, reduction="sum")
        finally:
            module.train(was)
        yt, yp = torch.cat(labels).cpu().numpy(), torch.cat(preds).cpu().numpy()
        return _classification_metrics(yt, yp, float(loss_sum), num_labels)
    for i in range(0, y.shape[0], batch_size):
        logits = forward(module, params, x[i : i + batch_size])
        preds.append(logits.argmax(1))
        loss += float(F.cross_entropy(logits.double(), y[i : i + batch_size], reduction="sum"))
    return _classification_metrics(y.cpu().numpy(), torch.cat(preds).cpu().numpy(), loss, num_labels)


def build_run_algorithm(resolved: dict[str, Any], module: torch.nn.Module, partition: dict[str, Any],
                        num_clients: int) -> tuple[FederatedAlgorithm, dict[str, Any]]:
    """A run's algorithm, built by :func:`fedshift.algorithms.registry.build`, and what FedPALS resolved.

    Returns
    -------
    algorithm : FederatedAlgorithm
    info : dict
        For FedPALS kinds, λ (``"inf"`` for ∞), the aggregation weights α of all clients, the ESS and its fraction
        of the training examples (FedPALS §4.2); empty otherwise.
    """
    kind, variant = resolved["kind"], resolved["variant"]
    tr, opt = resolved["train"], resolved["options"]
    common = {"clients_per_round": tr["clients_per_round"] or num_clients, "local_epochs": tr["local_epochs"],
              "batch_size": tr["batch_size"], "client_lr": tr["client_lr"], "server_lr": tr["server_lr"]}
    info: dict[str, Any] = {}
    if kind not in PALS_KINDS:  # the registered algorithm, with the options it declares
        name = registered_algorithm(kind)
        offered = {"name": kind, "mu": 0.0}  # FedProx without mu: μ = 0, as before
        hp = {**{k: v for k, v in offered.items() if k in registry.get(name).hparams}, **opt}
        return registry.build(name, registry.BuildContext(module, num_clients=num_clients), **common, **hp), info
    t, s, n = partition["target"], partition["marginals"], partition["sizes"]
    lam = resolve_lambda(t, s, n, lam=variant.get("lambda"), ess_fraction=variant.get("ess_fraction"))
    alpha = fedpals_weights(t, s, n, lam)
    info = {"lambda": lam if math.isfinite(lam) else "inf", "alpha_all_clients": alpha.tolist(),
            "ess": effective_sample_size(alpha, n), "ess_fraction": effective_sample_size(alpha, n) / float(sum(n))}
    prox = opt.get("mu", 0.0) if kind == "fedprox_fedpals" else 0.0
    context = registry.BuildContext(module, target_label_marginal=t, client_label_marginals=s)
    return registry.build("fedpals", context, lam=lam, prox_mu=prox, prox_squared=opt.get("squared", True),
                          **common), info


def train_run(resolved: dict[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
              device: torch.device, checkpoint_path: str | Path | None, fingerprint: str,
              weights_path: str | Path | None = None) -> Fit:
    """Train one (experiment, run id, seed) FedPALS-paper run with validation-based selection.

    The job skeleton (:func:`fedshift.jobs.train_job`) sets threads and device, computes ``fingerprint`` and
    writes the returned :class:`~fedshift.contract.Fit` (``model.pt`` = the selected parameters).

    Parameters
    ----------
    resolved : dict
        The run's hyper-parameters (:func:`resolved_runs`, ``RunSpec.hparams``).
    seed : int
        Seed of initialisation and every round's batches and sampling (the partition was drawn with
        the same seed by the partition job).
    prepared_path, partition_path : path
        The prepared dataset and :func:`make_partition`'s JSON.
    device : torch.device
    checkpoint_path : path, optional
        Resume point (taken only when its fingerprint matches).
    fingerprint : str
        The job's checkpoint identity (:func:`fedshift.jobs.input_fingerprint`).
    weights_path : path, optional
        ImageNet weights of a pretrained model (:func:`weights_file`).

    Returns
    -------
    Fit
        The selected parameters (best target-validation ``select_metric``, accuracy or macro-F1, checked every
        ``eval_every`` rounds), the per-check history (round, mean local loss,
        ``eval/validation_<select_metric>`` and the target test metrics ``eval/test_*``), and the ``run.json``
        fields: the selected round and score, α, λ and ESS for FedPALS. A run whose loss becomes NaN or infinite
        (:class:`~fedshift.core.training.NonFiniteLossError`, e.g. SCAFFOLD at the grid's larger client step) is
        recorded as diverged: an empty model, ``run.json`` ``diverged`` true with the error, a one-row history
        with a NaN score, ``Fit.result`` None; :func:`evaluate_run` and
        :func:`fedshift.papers.fedpals.report.select_per_seed` then rank it below every finite candidate.
    """
    dev = device
    part = read_json(partition_path)
    clients, sets, input_dim = job_data(resolved, part, prepared_path, dev)
    module = _model(resolved, input_dim, weights_path).to(dev)
    k = part["num_labels"]
    num_clients = clients.num_clients if isinstance(clients, FilePool) else len(clients)
    algorithm, info = build_run_algorithm(resolved, module, part, num_clients)
    tr = resolved["train"]
    select = resolved.get("select_metric") or "accuracy"
    ebs = resolved.get("eval_batch_size") or 4096

    def metrics(p: dict[str, torch.Tensor], name: str) -> dict[str, float]:
        return accuracy_and_f1(module, p, *sets[name], k, batch_size=ebs, device=dev,
                               num_workers=num_workers(resolved))

    algorithm = with_model_selection(
        algorithm, every=tr["eval_every"], rounds=tr["rounds"],
        score=lambda p: metrics(p, "validation")[select],
        monitor=lambda p: {f"test_{m}": v for m, v in metrics(p, "test").items()},
    )
    params0 = init_params(module, seed, device=dev)
    ckpt_every = tr["checkpoint_every"] - tr["checkpoint_every"] % tr["eval_every"]
    run = {"experiment": resolved["experiment"], "algorithm": resolved["algorithm"], "seed": seed,
           "resolved": resolved, "selection_metric": select, "num_clients": num_clients,
           "client_sizes": (clients.sizes().tolist() if isinstance(clients, FilePool)
                            else [c.num_examples for c in clients]),
           "projection_distance": part["projection_distance"], **info, "rounds": tr["rounds"],
           **{key: part[key] for key in ("target_coverage", "target_redraws") if key in part}}
    try:
        result = run_training(algorithm, params0, clients, rounds=tr["rounds"], seed=seed,
                              checkpoint_path=checkpoint_path, checkpoint_every=ckpt_every,
                              log_every=tr["eval_every"], fingerprint=fingerprint)
    except NonFiniteLossError as err:  # one grid value of a validation choice diverged: recorded, not a failure
        log.warning("%s / %s / seed %d diverged: %s (the job records it; fedshift.jobs logs what it writes)",
                    resolved["experiment"], resolved["algorithm"], seed, err)
        hist = pd.DataFrame([{"round": tr["rounds"], f"eval/validation_{select}": float("nan"), "diverged": True}])
        return Fit({}, hist, {**run, "selected_round": None, "selected_validation_score": None, "diverged": True,
                              "diverged_error": str(err)}, None)
    state = result.state
    hist = pd.DataFrame(result.history).rename(columns={"eval/score": f"eval/validation_{select}"})
    run |= {"selected_round": state.best_round, "selected_validation_score": state.best_score}
    return Fit(state.best_params, hist, run, result)


def evaluate_run(resolved: dict[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
                 model_path: str | Path, run_json_path: str | Path, device: torch.device,
                 weights_path: str | Path | None = None) -> pd.DataFrame:
    """Target metrics of a trained (selected) model: the tidy rows of its ``metrics.csv``.

    Rows ``experiment, algorithm, kind, seed, split, metric, value`` for split ∈ {validation, test}
    and metric ∈ {accuracy, macro_f1, loss}, plus split ``run`` rows with the projection distance,
    λ, ESS fraction and the selected round (the job skeleton adds the ``paper`` and ``run`` columns). A diverged
    run (``run.json`` ``diverged``) has NaN metrics, no model read, and a ``run`` row ``diverged`` = 1.
    """
    dev = device
    run = read_json(run_json_path)
    rows = []
    if run.get("diverged"):  # no model to evaluate: NaN metrics and a `diverged` flag (select_per_seed ranks it last)
        rows = [{"split": split, "metric": metric, "value": float("nan")} for split in ("validation", "test")
                for metric in ("accuracy", "macro_f1", "loss")]
        rows.append({"split": "run", "metric": "diverged", "value": 1.0})
    else:
        part = read_json(partition_path)
        _, sets, input_dim = job_data(resolved, part, prepared_path, dev, with_clients=False)
        params = torch.load(model_path, map_location=dev, weights_only=True)
        module = _model(resolved, input_dim, weights_path).to(dev)  # (frozen BN statistics come from the weights)
        ebs = resolved.get("eval_batch_size") or 4096
        for split in ("validation", "test"):
            for metric, value in accuracy_and_f1(module, params, *sets[split], part["num_labels"], batch_size=ebs,
                                                 device=dev, num_workers=num_workers(resolved)).items():
                rows.append({"split": split, "metric": metric, "value": value})
    for key in ("projection_distance", "ess_fraction", "selected_round"):
        if run.get(key) is not None:
            rows.append({"split": "run", "metric": key, "value": float(run[key])})
    if "lambda" in run:
        rows.append({"split": "run", "metric": "lambda", "value": float(run["lambda"])})
    df = pd.DataFrame(rows)
    df.insert(0, "seed", seed)
    df.insert(0, "kind", resolved["kind"])
    df.insert(0, "algorithm", resolved["algorithm"])
    df.insert(0, "experiment", resolved["experiment"])
    return df
