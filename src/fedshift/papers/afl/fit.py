"""AFL's training and evaluation: Stochastic-AFL for every model, one run or several seeds batched.

:func:`train_runs` trains the seeds of one (experiment, algorithm) at once on the batched path (one model per seed
on a run axis) and returns one :class:`~fedshift.contract.Fit` per seed; the job skeleton
(:func:`fedshift.jobs.train_job`) writes them. With ``train.select`` it trains each candidate γ_w and keeps the
(γ_w, T, iterate) with the best mean validation score (:func:`train_and_select`). :func:`evaluate_run` gives the
tidy per-domain, U and D_Λ test metrics of one trained model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fedshift.algorithms import registry
from fedshift.contract import Fit
from fedshift.core.base import FederatedAlgorithm
from fedshift.core.selection import with_snapshots
from fedshift.core.training import NonFiniteLossError, run_training
from fedshift.data.prepare import load_prepared
from fedshift.io import read_json
from fedshift.models import build_model, init_params
from fedshift.papers.afl.data import ExperimentData, evaluate_domains, load_experiment
from fedshift.provenance import fingerprint as digest

__all__ = ["DTYPES", "setup", "build_algorithm", "train_run", "train_runs", "train_and_select", "validation_score",
           "evaluate_run"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def setup(resolved: Mapping[str, Any], prepared_path: str | Path, partition_path: str | Path,
          device: torch.device) -> tuple[ExperimentData, torch.nn.Module]:
    """The experiment's tensors on ``device`` and its model (not yet initialised), in the run's dtype.

    Parameters
    ----------
    resolved : mapping
        :func:`~fedshift.papers.afl.config.resolve_run` (``dtype``, ``model``, the experiment's settings).
    prepared_path, partition_path : path
        The prepared dataset (``data/prepared/<dataset>.pt``) and the experiment's partition (JSON index map).
    device : torch.device

    Returns
    -------
    (ExperimentData, torch.nn.Module)
        The clients (one per domain), validation and test sets (:func:`~fedshift.papers.afl.data.load_experiment`)
        and the model of ``model`` (:func:`fedshift.models.build_model`), both on ``device`` in :data:`DTYPES`
        ``[dtype]``.
    """
    prepared = load_prepared(prepared_path)
    partition = read_json(partition_path)
    data = load_experiment(dict(resolved), prepared, partition, device, DTYPES[resolved["dtype"]])
    module = build_model(resolved["model"], input_dim=data.input_dim, num_classes=data.num_classes)
    return data, module.to(device=device, dtype=DTYPES[resolved["dtype"]])


def build_algorithm(resolved: Mapping[str, Any], module: torch.nn.Module, data: ExperimentData,
                    seeds: list[int] | None = None) -> FederatedAlgorithm:
    """The run's Stochastic-AFL (Mohri et al. 2019, Fig. 3) from its resolved hyper-parameters.

    Every model of the paper is Stochastic-AFL: ``afl`` learns λ with step γ_λ = ``lambda_lr``; ``uniform`` and
    ``domain~k`` keep λ fixed (``lambda_lr = 0``). γ_w = ``client_lr`` is the model step of the
    ``optimizer``. With ``seeds``, one algorithm runs all those runs at once (the batched path).

    Parameters
    ----------
    resolved : mapping
        :func:`~fedshift.papers.afl.config.resolve_run`; its ``hparams`` are passed by name.
    module : torch.nn.Module
        The run's model (:func:`setup`).
    data : ExperimentData
        Its clients give the domain count p and sizes m_k (the empirical λ of ``uniform``).
    seeds : list of int, optional
        The runs batched on the run axis; None: one unbatched run.

    Returns
    -------
    FederatedAlgorithm
        ``registry.build("afl", BuildContext(module, num_domains=p, domain_sizes=m), ...)``.
    """
    hp = resolved["hparams"]
    context = registry.BuildContext(module, num_domains=len(data.domain_names),
                                    domain_sizes=[c.num_examples for c in data.clients])
    return registry.build(
        "afl",
        context,
        batch_size=hp["batch_size"],
        client_lr=hp["client_lr"],
        lambda_lr=hp["lambda_lr"],
        optimizer=hp["optimizer"],
        optimizer_kwargs=hp.get("optimizer_kwargs") or {},
        w_gradient=hp["w_gradient"],
        lambda_gradient=hp["lambda_gradient"],
        init_lambda=hp["init_lambda"],
        w_radius=hp["w_radius"],
        gamma=hp["gamma"],
        mu=hp["mu"],
        average_iterates=hp["average_iterates"],
        seeds=seeds,
    )


def train_run(resolved: Mapping[str, Any], seed: int, **files: Any) -> Fit:
    """Train one run: :func:`train_runs` with a run axis of one (the same code and numbers).

    ``files``: ``prepared_path``, ``partition_path``, ``device``, ``checkpoint_path`` and ``fingerprint``, as there.
    """
    return train_runs(resolved, [seed], **files)[0]


def train_runs(resolved: Mapping[str, Any], seeds: Sequence[int], *, prepared_path: str | Path,
               partition_path: str | Path, device: torch.device, checkpoint_path: str | Path | None,
               fingerprint: str) -> list[Fit]:
    """Train several runs (seeds) of one (experiment, algorithm) at once; one :class:`Fit` per seed.

    Every step is one batched computation over the run axis (:func:`fedshift.algorithms.afl.build_stochastic_afl`
    with ``seeds``); run r's result equals the single run with seed ``seeds[r]`` (tested to 1e-10 in float64), so
    one seed is the same code with a run axis of one.

    Parameters
    ----------
    resolved : mapping
        The runs' :func:`~fedshift.papers.afl.config.resolve_run` (the RunSpec's ``hparams``).
    seeds : sequence of int
        The runs' seeds: initialisation and every step's batches.
    prepared_path, partition_path : path
        The prepared dataset and the experiment's partition.
    device : torch.device
    checkpoint_path : path, optional
        The job's resume point (``train.select``: one per γ_w candidate beside it, ``.lr<i>.pt``).
    fingerprint : str
        The job's checkpoint identity (:func:`fedshift.jobs.input_fingerprint`).

    Returns
    -------
    list of Fit
        Per seed: the evaluated parameters (run axis removed, on the CPU), the per-logged-step history (domain
        columns by name) and the run's ``run.json`` fields (resolved settings, domains, sizes, final and averaged
        λ, rounds, ``selection`` under ``train.select``).

    Raises
    ------
    NonFiniteLossError
        On NaN/inf in any run (naming the batched seeds); nothing is returned.
    """
    seeds = list(seeds)
    data, module = setup(resolved, prepared_path, partition_path, device)
    hp = resolved["hparams"]
    dtype = DTYPES[resolved["dtype"]]
    inits = [init_params(module, s, dtype=dtype, device=device) for s in seeds]
    params0 = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    selection = None
    try:
        if hp.get("select"):
            result, final, lam, avg_lam, selection = train_and_select(
                resolved, module, data, seeds, params0, checkpoint_path=checkpoint_path, fingerprint=fingerprint)
        else:
            algorithm = build_algorithm(resolved, module, data, seeds=seeds)
            result = run_training(
                algorithm, params0, data.clients, rounds=hp["rounds"], seed=-1, checkpoint_path=checkpoint_path,
                checkpoint_every=hp["checkpoint_every"], log_every=hp["log_every"], fingerprint=fingerprint,
            )
            final = {k: v.detach().cpu() for k, v in algorithm.eval_params(result.state).items()}
            lam, avg_lam = result.state.lam, result.state.avg_lam
    except NonFiniteLossError as err:  # the batched runs' seeds, in the order of the loss values
        raise NonFiniteLossError(f"{err} Seeds of the runs: {seeds}.") from None
    names = data.domain_names
    fits = []
    for r, _ in enumerate(seeds):
        rows = [{k: (v[r] if isinstance(v, list) else v) for k, v in row.items()} for row in result.history]
        hist = pd.DataFrame(rows).rename(
            columns={f"domain_loss/{k}": f"domain_loss/{n}" for k, n in enumerate(names)}
            | {f"lambda/{k}": f"lambda/{n}" for k, n in enumerate(names)})
        info = {
            "resolved": dict(resolved), "domains": names, "domain_sizes": [c.num_examples for c in data.clients],
            "validation_sizes": [int(y.shape[0]) for _, y in data.validation],
            "final_lambda": lam[r].tolist(), "average_lambda": avg_lam[r].tolist(),
            "rounds": hp["rounds"], "batched_with_seeds": seeds,
        }
        if selection is not None:
            info["selection"] = {**selection, "validation_score": selection["scores"][r]}
            del info["selection"]["scores"]
        fits.append(Fit({k: v[r].clone() for k, v in final.items()}, hist, info, result))
    return fits


def validation_score(resolved: Mapping[str, Any], module: torch.nn.Module, params: dict[str, torch.Tensor],
                     data: ExperimentData) -> float:
    """Validation accuracy of one model on the mixture it is trained for (the criterion of ``train.select``).

    AFL (Mohri et al. 2019, eq. 3): the worst domain's accuracy (the D_Λ column over Λ = Δ_p); the uniform
    model L_Û: accuracy on the pooled validation sample (U); the model of domain k: domain k's accuracy.

    Parameters
    ----------
    resolved : mapping
        :func:`~fedshift.papers.afl.config.resolve_run` (``algorithm``: the run id that picks the column).
    module : torch.nn.Module
    params : dict of str to Tensor
        One run's parameters (no run axis).
    data : ExperimentData
        Its ``validation`` split, per domain.

    Returns
    -------
    float
        The accuracy, a fraction in [0, 1].

    Raises
    ------
    ValueError
        If the experiment has no validation split.
    """
    if not data.validation:
        raise ValueError(f"experiment {resolved['experiment']} has no validation split (validation_fraction)")
    kind, _, dom = resolved["algorithm"].partition("~")
    column = {"afl": "D_Lambda", "uniform": "U"}.get(kind, dom)
    rows = evaluate_domains(module, params, data.validation, data.domain_names)
    return next(float(r["value"]) for r in rows if r["column"] == column and r["metric"] == "accuracy")


def train_and_select(resolved, module, data, seeds, params0, *, checkpoint_path, fingerprint):
    """``train.select``: train each γ_w, snapshot both iterates at each T, keep the best mean validation score.

    Candidate i resumes from ``<checkpoint>.lr<i>.pt`` under the fingerprint of the job and its γ_w; ties keep the
    first candidate (γ_w in config order, then T ascending, then the iterate in config order).

    Parameters
    ----------
    resolved : mapping
        :func:`~fedshift.papers.afl.config.resolve_run`; ``hparams.select`` holds the candidate ``client_lr``
        values, ``rounds`` (T) and ``iterate`` views (``averaged``, ``last``).
    module : torch.nn.Module
    data : ExperimentData
    seeds : list of int
        The batched runs' seeds.
    params0 : dict of str to Tensor
        The initial parameters, run axis first (one row per seed).
    checkpoint_path : path, optional
        The job's resume point; None: no checkpoints.
    fingerprint : str
        The job's checkpoint identity.

    Returns
    -------
    tuple
        The chosen γ_w's TrainResult (history, wall time), the chosen parameters (run axis first, on the CPU), λ
        and the averaged λ after the chosen T (run axis first), and the ``selection`` record of run.json (chosen
        setting, every candidate's mean validation score, and the per-run ``scores`` of the chosen one).

    Raises
    ------
    NonFiniteLossError
        On NaN/inf in any candidate's training.
    """
    hp = resolved["hparams"]
    sel = hp["select"]
    views = {"averaged": lambda s: s.avg_params, "last": lambda s: s.params,
             "lambda": lambda s: {"lam": s.lam, "avg_lam": s.avg_lam}}
    candidates, results, best = [], [], None
    for i, lr in enumerate(sel["client_lr"]):
        variant = {**resolved, "hparams": {**hp, "client_lr": float(lr)}}
        algorithm = with_snapshots(build_algorithm(variant, module, data, seeds=seeds), rounds=sel["rounds"],
                                   views=views)
        ckpt = None if checkpoint_path is None else Path(checkpoint_path).with_suffix(f".lr{i}.pt")
        result = run_training(
            algorithm, params0, data.clients, rounds=hp["rounds"], seed=-1, checkpoint_path=ckpt,
            checkpoint_every=hp["checkpoint_every"], log_every=hp["log_every"],
            fingerprint=digest(fingerprint, float(lr)),
        )
        results.append(result)
        for t in sorted(set(sel["rounds"])):
            for view in sel["iterate"]:
                params = result.state.snapshots[f"{t}/{view}"]
                scores = [validation_score(resolved, module, {k: v[r] for k, v in params.items()}, data)
                          for r in range(len(seeds))]
                cand = {"client_lr": float(lr), "rounds": int(t), "iterate": view,
                        "mean_validation_score": float(sum(scores) / len(scores))}
                candidates.append(cand)
                if best is None or cand["mean_validation_score"] > best[0]["mean_validation_score"]:
                    best = (cand, i, params, scores, result.state.snapshots[f"{t}/lambda"])
        if ckpt is not None:
            ckpt.unlink(missing_ok=True)
    cand, i, params, scores, lam = best
    record = {"chosen": {k: cand[k] for k in ("client_lr", "rounds", "iterate")},
              "criterion": "validation accuracy of the model's own mixture (AFL: D_Λ, uniform: U, domain k: k)",
              "mean_validation_score": cand["mean_validation_score"], "scores": scores, "candidates": candidates}
    final = {k: v.detach().cpu() for k, v in params.items()}
    return results[i], final, lam["lam"], lam["avg_lam"], record


def evaluate_run(resolved: Mapping[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
                 model_path: str | Path, device: torch.device) -> pd.DataFrame:
    """Test accuracy and loss of one trained model per domain, on U and D_Λ (Mohri et al. 2019, Tables 1–2).

    Parameters
    ----------
    resolved : mapping
        :func:`~fedshift.papers.afl.config.resolve_run`.
    seed : int
        The run's seed (a column).
    prepared_path, partition_path : path
        As for :func:`setup`.
    model_path : path
        The run's ``model.pt`` (parameters, no run axis).
    device : torch.device

    Returns
    -------
    DataFrame
        Tidy rows: experiment, model (``domain~x`` shown as ``domain:x``), seed, column, metric, value
        (accuracy in [0, 1], loss in nats; :func:`~fedshift.papers.afl.data.evaluate_domains`).
    """
    data, module = setup(resolved, prepared_path, partition_path, device)
    params = torch.load(model_path, map_location=device, weights_only=True)
    df = pd.DataFrame(evaluate_domains(module, params, data.test, data.domain_names))
    df.insert(0, "seed", seed)
    df.insert(0, "model", resolved["algorithm"].replace("~", ":", 1))
    df.insert(0, "experiment", resolved["experiment"])
    return df
