"""One training job and one evaluation job, as the workflow's scripts call them.

:func:`train_run` builds the model and algorithm from the resolved ``params`` of the job, trains
with checkpoint/resume, and writes ``model.pt``, ``history.csv`` and ``run.json`` atomically, in
that order, only when training finished with finite values. :func:`evaluate_run` reloads the
model and writes the tidy per-domain metrics.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fedshift.algorithms import registry
from fedshift.algorithms.base import FederatedAlgorithm
from fedshift.algorithms.selection import with_snapshots
from fedshift.budget import is_rehearsal, standin_of_workflow
from fedshift.data.prepare import load_prepared
from fedshift.experiments import ExperimentData, evaluate_domains, load_experiment
from fedshift.io import atomic_write, read_json, torch_save_atomic, write_json
from fedshift.models import build_model, init_params
from fedshift.provenance import environment_info, fingerprint, git_commit, pick_device
from fedshift.training import NonFiniteLossError, TrainResult, run_training

__all__ = ["job_fingerprint", "write_job_outputs", "build_algorithm", "train_run", "train_runs", "evaluate_run",
           "evaluate_runs", "validation_score"]

log = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def build_algorithm(resolved: dict[str, Any], module: torch.nn.Module, data: ExperimentData,
                    seeds: list[int] | None = None) -> FederatedAlgorithm:
    """Build the job's algorithm from its resolved hyper-parameters (all kinds map to Stochastic-AFL).

    With ``seeds``, one algorithm runs all those runs at once (the batched path).
    """
    hp = resolved["hparams"]
    return registry.get("afl").build(
        module,
        num_domains=len(data.domain_names),
        domain_sizes=[c.num_examples for c in data.clients],
        batch_size=hp["batch_size"],
        lr_w=hp["lr_w"],
        lr_lambda=hp["lr_lambda"],
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


def job_fingerprint(resolved: dict[str, Any], seeds: Any, partition_path: str | Path,
                    prepared_path: str | Path) -> str:
    """Identity of a job for its checkpoint.

    Config, seed(s), library version, partition content, and the prepared file's size and
    modification time (hashing it would cost seconds per job).
    """
    import hashlib

    import fedshift

    st = Path(prepared_path).stat()
    part = hashlib.sha256(Path(partition_path).read_bytes()).hexdigest()
    return fingerprint(resolved, seeds, fedshift.__version__, part, st.st_size, st.st_mtime_ns)


def write_job_outputs(params: dict[str, torch.Tensor], history: pd.DataFrame, info: dict[str, Any], *,
                      result: TrainResult | None, t0: float, device: torch.device, fingerprint: str,
                      model_path: str | Path, history_path: str | Path, run_json_path: str | Path,
                      checkpoint_path: str | Path | None, workdir: str | Path = ".",
                      extra: list[tuple[Any, str | Path]] | None = None) -> dict[str, Any]:
    """Write one training job's outputs atomically, provenance last, and drop its checkpoint.

    The common end of every paper's training job: ``model.pt`` (``params`` detached, on the CPU), any
    ``extra`` ``(object, path)`` pairs (``torch.save``), ``history.csv``, then ``run.json`` = ``info`` plus
    the provenance fields below. Because ``run.json`` is written last and the checkpoint removed only
    after it, a job killed at any point either left a complete run or resumes from its checkpoint.

    Parameters
    ----------
    params : dict[str, Tensor]
        The parameters to store (the final, averaged or selected model).
    history : DataFrame
        One row per logged round.
    info : dict
        The job's own ``run.json`` fields; must hold ``"rounds"`` (rounds the run covers).
    result : TrainResult or None
        :func:`fedshift.training.run_training`'s result (None when training was abandoned, e.g. diverged:
        then nothing was resumed and the training time is the job's).
    t0 : float
        ``time.time()`` at the job's start.
    device : torch.device
        The device the job ran on (recorded with the environment).
    fingerprint : str
        The job's checkpoint identity.
    model_path, history_path, run_json_path : path
    checkpoint_path : path, optional
    workdir : path
        Folder whose git commit is recorded.
    extra : list of (object, path), optional
        Further ``torch.save`` outputs, written before ``run.json``.

    Returns
    -------
    dict
        The ``run.json`` content: ``info`` plus ``resumed_from_round``, ``train_wall_time_s``,
        ``job_wall_time_s``, ``seconds_per_round``, ``git_commit``, ``environment`` and ``fingerprint``; at the
        rehearsal scale also ``scale: "rehearsal"`` and ``standin_data``, the registry datasets the workflow
        replaced by generated stand-ins (:func:`fedshift.budget.standin_of_workflow`).

    Raises
    ------
    KeyError
        If ``info`` lacks ``"rounds"``.
    """
    rounds = info["rounds"]
    torch_save_atomic({k: v.detach().cpu() for k, v in params.items()}, model_path)
    for obj, path in extra or []:
        torch_save_atomic(obj, path)
    with atomic_write(history_path) as fh:
        history.to_csv(fh, index=False)
    start = result.resumed_from if result is not None else 0
    wall = result.wall_time_s if result is not None else time.time() - t0
    run = {**info, "resumed_from_round": start, "train_wall_time_s": wall, "job_wall_time_s": time.time() - t0,
           "seconds_per_round": wall / max(rounds - start, 1), "git_commit": git_commit(workdir),
           "environment": environment_info(device), "fingerprint": fingerprint}
    if is_rehearsal():  # the rehearsal: its scale and the workflow's datasets replaced by stand-ins
        run["scale"] = "rehearsal"
        run["standin_data"] = standin_of_workflow()
    write_json(run_json_path, run)
    if checkpoint_path is not None:
        Path(checkpoint_path).unlink(missing_ok=True)
    return run


def _setup(resolved: dict[str, Any], prepared_path: str | Path, partition_path: str | Path,
           device: torch.device) -> tuple[ExperimentData, torch.nn.Module]:
    prepared = load_prepared(prepared_path)
    partition = read_json(partition_path)
    data = load_experiment(resolved, prepared, partition, device, DTYPES[resolved["dtype"]])
    module = build_model(resolved["model"], input_dim=data.input_dim, num_classes=data.num_classes)
    return data, module.to(device=device, dtype=DTYPES[resolved["dtype"]])


def train_run(
    resolved: dict[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
    model_path: str | Path, history_path: str | Path, run_json_path: str | Path,
    checkpoint_path: str | Path | None, device: str = "auto", threads: int = 1, workdir: str | Path = ".",
) -> dict[str, Any]:
    """Train one (experiment, algorithm, seed) job and write its outputs.

    :func:`train_runs` with a single seed: the same code trains one run or many at once.

    Parameters
    ----------
    resolved : dict
        Output of :func:`fedshift.config.resolve_hparams`.
    seed : int
        The run's seed: initialisation and every round's batches.
    prepared_path, partition_path : path
        Inputs written by the prepare and partition rules.
    model_path, history_path, run_json_path : path
        Outputs: ``torch.save`` of the evaluated parameters; per-logged-round history CSV;
        provenance JSON (resolved hyper-parameters, seed, versions, git commit, device, wall time).
    checkpoint_path : path, optional
        Checkpoint for resume; removed after the outputs are written.
    device : {"auto", "cpu", "cuda"}
    threads : int
        torch intra-op threads.
    workdir : path
        Folder whose git commit is recorded.

    Returns
    -------
    dict
        The ``run.json`` content.

    Raises
    ------
    NonFiniteLossError
        On NaN/inf; nothing is written.
    """
    outputs = [{"model": model_path, "history": history_path, "run": run_json_path}]
    return train_runs(resolved, [seed], prepared_path=prepared_path, partition_path=partition_path,
                      outputs=outputs, checkpoint_path=checkpoint_path, device=device, threads=threads,
                      workdir=workdir)[0]


def train_runs(
    resolved: dict[str, Any], seeds: list[int], *, prepared_path: str | Path, partition_path: str | Path,
    outputs: list[dict[str, str | Path]], checkpoint_path: str | Path | None, device: str = "auto",
    threads: int = 1, workdir: str | Path = ".",
) -> list[dict[str, Any]]:
    """Train several runs (seeds) of one (experiment, algorithm) at once and write each run's outputs.

    The runs share one process and every step is one batched computation over the run axis
    (:func:`fedshift.algorithms.afl.build_stochastic_afl` with ``seeds``); run r's result equals the
    single run with seed ``seeds[r]`` (tested to 1e-10 in float64). ``outputs[r]`` holds the paths
    ``model``, ``history`` and ``run`` of run r: ``torch.save`` of the evaluated parameters, the
    per-logged-round history CSV, and the provenance JSON (resolved hyper-parameters, seed,
    versions, git commit, device, wall time), written atomically in that order.

    Raises
    ------
    NonFiniteLossError
        On NaN/inf in any run; nothing is written.
    ValueError
        If ``outputs`` and ``seeds`` differ in length.
    """
    if len(outputs) != len(seeds):
        raise ValueError(f"{len(seeds)} seeds but {len(outputs)} output sets")
    t0 = time.time()
    torch.set_num_threads(threads)
    dev = pick_device(device)
    data, module = _setup(resolved, prepared_path, partition_path, dev)
    hp = resolved["hparams"]
    dtype = DTYPES[resolved["dtype"]]
    inits = [init_params(module, s, dtype=dtype, device=dev) for s in seeds]
    params0 = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    fp = job_fingerprint(resolved, list(seeds), partition_path, prepared_path)
    selection = None
    try:
        if hp.get("select"):
            result, final, lam, avg_lam, selection = _train_and_select(
                resolved, module, data, list(seeds), params0, checkpoint_path=checkpoint_path,
                partition_path=partition_path, prepared_path=prepared_path)
        else:
            algorithm = build_algorithm(resolved, module, data, seeds=list(seeds))
            result = run_training(
                algorithm, params0, data.clients, rounds=hp["rounds"], seed=-1, checkpoint_path=checkpoint_path,
                checkpoint_every=hp["checkpoint_every"], log_every=hp["log_every"], fingerprint=fp,
            )
            final = {k: v.detach().cpu() for k, v in algorithm.eval_params(result.state).items()}
            lam, avg_lam = result.state.lam, result.state.avg_lam
    except NonFiniteLossError as err:  # the batched runs' seeds, in the order of the loss values
        raise NonFiniteLossError(f"{err} Seeds of the runs: {list(seeds)}.") from None
    names = data.domain_names
    env = environment_info(dev)
    commit = git_commit(workdir)
    rounds_done = hp["rounds"]
    infos = []
    for r, (seed, out) in enumerate(zip(seeds, outputs, strict=True)):
        torch_save_atomic({k: v[r].clone() for k, v in final.items()}, out["model"])
        rows = [{k: (v[r] if isinstance(v, list) else v) for k, v in row.items()} for row in result.history]
        hist = pd.DataFrame(rows).rename(
            columns={f"domain_loss/{k}": f"domain_loss/{n}" for k, n in enumerate(names)}
            | {f"lambda/{k}": f"lambda/{n}" for k, n in enumerate(names)})
        with atomic_write(out["history"]) as fh:
            hist.to_csv(fh, index=False)
        info = {
            "experiment": resolved["experiment"], "algorithm": resolved["algorithm"], "seed": seed,
            "resolved": resolved, "domains": names, "domain_sizes": [c.num_examples for c in data.clients],
            "validation_sizes": [int(y.shape[0]) for _, y in data.validation],
            "final_lambda": lam[r].tolist(), "average_lambda": avg_lam[r].tolist(),
            "rounds": rounds_done, "resumed_from_round": result.resumed_from,
            "batched_with_seeds": list(seeds),
            "train_wall_time_s": result.wall_time_s, "job_wall_time_s": time.time() - t0,
            "seconds_per_round": result.wall_time_s / max(rounds_done - result.resumed_from, 1),
            "git_commit": commit, "environment": env, "fingerprint": fp,
        }
        if selection is not None:
            info["selection"] = {**selection, "validation_score": selection["scores"][r]}
            del info["selection"]["scores"]
        write_json(out["run"], info)
        infos.append(info)
    if checkpoint_path is not None:
        Path(checkpoint_path).unlink(missing_ok=True)
    return infos


def validation_score(resolved: dict[str, Any], module: torch.nn.Module, params: dict[str, torch.Tensor],
                     data: ExperimentData) -> float:
    """Validation accuracy of one model on the mixture it is trained for (the criterion of ``train.select``).

    AFL (Mohri et al. 2019, eq. 3): the worst domain's accuracy (the D_Λ column over Λ = Δ_p); the uniform
    model L_Û: accuracy on the pooled validation sample (U); the model of domain k: domain k's accuracy.

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


def _train_and_select(resolved, module, data, seeds, params0, *, checkpoint_path, partition_path, prepared_path):
    """``train.select``: train each γ_w, snapshot both iterates at each T, keep the best mean validation score.

    Returns the chosen γ_w's TrainResult (history, wall time), the chosen parameters (run axis first, on the
    CPU), λ and the averaged λ after the chosen T, and the ``selection`` record of run.json (chosen setting,
    every candidate's mean validation score, and the per-run ``scores`` of the chosen one).
    """
    hp = resolved["hparams"]
    sel = hp["select"]
    views = {"averaged": lambda s: s.avg_params, "last": lambda s: s.params,
             "lambda": lambda s: {"lam": s.lam, "avg_lam": s.avg_lam}}
    candidates, results, best = [], [], None
    for i, lr in enumerate(sel["lr_w"]):
        variant = {**resolved, "hparams": {**hp, "lr_w": float(lr)}}
        algorithm = with_snapshots(build_algorithm(variant, module, data, seeds=seeds), rounds=sel["rounds"],
                                   views=views)
        ckpt = None if checkpoint_path is None else Path(checkpoint_path).with_suffix(f".lr{i}.pt")
        result = run_training(
            algorithm, params0, data.clients, rounds=hp["rounds"], seed=-1, checkpoint_path=ckpt,
            checkpoint_every=hp["checkpoint_every"], log_every=hp["log_every"],
            fingerprint=job_fingerprint(variant, seeds, partition_path, prepared_path),
        )
        results.append(result)
        for t in sorted(set(sel["rounds"])):
            for view in sel["iterate"]:
                params = result.state.snapshots[f"{t}/{view}"]
                scores = [validation_score(resolved, module, {k: v[r] for k, v in params.items()}, data)
                          for r in range(len(seeds))]
                cand = {"lr_w": float(lr), "rounds": int(t), "iterate": view,
                        "mean_validation_score": float(sum(scores) / len(scores))}
                candidates.append(cand)
                if best is None or cand["mean_validation_score"] > best[0]["mean_validation_score"]:
                    best = (cand, i, params, scores, result.state.snapshots[f"{t}/lambda"])
        if ckpt is not None:
            ckpt.unlink(missing_ok=True)
    cand, i, params, scores, lam = best
    record = {"chosen": {k: cand[k] for k in ("lr_w", "rounds", "iterate")},
              "criterion": "validation accuracy of the model's own mixture (AFL: D_Λ, uniform: U, domain k: k)",
              "mean_validation_score": cand["mean_validation_score"], "scores": scores, "candidates": candidates}
    final = {k: v.detach().cpu() for k, v in params.items()}
    return results[i], final, lam["lam"], lam["avg_lam"], record


def evaluate_run(resolved: dict[str, Any], seed: int, *, prepared_path: str | Path, partition_path: str | Path,
                 model_path: str | Path, metrics_path: str | Path, device: str = "auto") -> pd.DataFrame:
    """Evaluate a trained model per domain, on U and D_Λ, and write tidy ``metrics.csv``.

    Columns: experiment, model, seed, column, metric, value (accuracy in [0, 1], loss in nats).
    Parameters as :func:`evaluate_runs` with one seed; returns that run's DataFrame.
    """
    return evaluate_runs(resolved, [seed], prepared_path=prepared_path, partition_path=partition_path,
                         model_paths=[model_path], metrics_paths=[metrics_path], device=device)[0]


def evaluate_runs(resolved: dict[str, Any], seeds: list[int], *, prepared_path: str | Path,
                  partition_path: str | Path, model_paths: list[str | Path], metrics_paths: list[str | Path],
                  device: str = "auto") -> list[pd.DataFrame]:
    """:func:`evaluate_run` for several seeds of one (experiment, algorithm), loading the data once.

    Parameters
    ----------
    resolved : dict
        Output of :func:`fedshift.config.resolve_hparams`.
    seeds : list of int
        The runs' seeds (written into the ``seed`` column).
    prepared_path, partition_path : path
        The experiment's data.
    model_paths, metrics_paths : list of path
        One trained ``model.pt`` and one output ``metrics.csv`` per seed.
    device : {"auto", "cpu", "cuda"}

    Returns
    -------
    list of DataFrame
        The tidy metrics of each run, as written.
    """
    dev = pick_device(device)
    data, module = _setup(resolved, prepared_path, partition_path, dev)
    out = []
    for seed, model_path, metrics_path in zip(seeds, model_paths, metrics_paths, strict=True):
        params = torch.load(model_path, map_location=dev, weights_only=True)
        df = pd.DataFrame(evaluate_domains(module, params, data.test, data.domain_names))
        df.insert(0, "seed", seed)
        df.insert(0, "model", resolved["algorithm"].replace("~", ":", 1))
        df.insert(0, "experiment", resolved["experiment"])
        with atomic_write(metrics_path) as fh:
            df.to_csv(fh, index=False)
        out.append(df)
    return out
