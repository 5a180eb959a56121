"""FedMM training and evaluation of one run (Shen et al., AAMAS 2023, Algorithm 1; the baselines of §6).

The network (:mod:`fedshift.algorithms.domain_adaptation`) and the optimizer, always built by the registry
(:func:`fedshift.algorithms.registry.build`) from the run's resolved hyper-parameters
(:func:`fedshift.papers.fedmm.config.resolve_setting`); :func:`train_run` trains it, evaluating the target test set
every ``eval_every`` rounds (the run's history), and :func:`evaluate_run` turns that history into tidy rows. Part
of :mod:`fedshift.papers.fedmm`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fedshift.algorithms import registry
from fedshift.algorithms.domain_adaptation import build_digits_network, build_office_network
from fedshift.algorithms.sgda_local import network_directions
from fedshift.errors import ConfigError
from fedshift.contract import Fit
from fedshift.core.selection import with_monitor
from fedshift.core.training import NonFiniteLossError, run_training
from fedshift.io import read_json
from fedshift.models import init_params
from fedshift.papers.fedmm.config import BATCH_SPLITS
from fedshift.papers.fedmm.data import load_data

__all__ = ["build_network", "build_algorithm", "EVAL_CHUNK_ELEMENTS", "eval_chunk", "accuracy", "train_run",
           "evaluate_run"]

log = logging.getLogger(__name__)


def build_network(resolved: dict[str, Any], weights_path: str | Path | None = None) -> torch.nn.Module:
    """The digits or Office-31 network of a run (:mod:`fedshift.algorithms.domain_adaptation`).

    Parameters
    ----------
    resolved : dict
        The run's ``hparams``; reads ``head`` (``dann``, ``cdan``, ``mdd``) and ``network``.
    weights_path : path, optional
        MobileNetV2's ImageNet weights (Office-31's backbone; official code's pre-trained feature extractor).

    Returns
    -------
    torch.nn.Module
        Feature extractor, task classifier and domain head; uninitialised but a pre-trained backbone.
    """
    net = resolved["network"]
    if net["kind"] == "digits":
        return build_digits_network(resolved["head"], conv_layers=net["conv_layers"],
                                    task_hidden=net["task_hidden"], domain_hidden=net["domain_hidden"])
    return build_office_network(resolved["head"], bottleneck_dim=net["bottleneck_dim"],
                                task_hidden=net["task_hidden"], domain_hidden=net["domain_hidden"],
                                dropout=net["dropout"],
                                weights_path=None if weights_path is None else str(weights_path))


def build_algorithm(resolved: dict[str, Any], module: torch.nn.Module, client_ids: list[int],
                    domain_sizes: tuple[int, int] | None = None):
    """FedMM, FedAvgSGDA, FedProxSGDA or FedSGDA of a resolved run.

    ``train.batch_split`` (:data:`BATCH_SPLITS`) sets every client's batch composition: ``domain_shares`` (the
    default, official ``dataset_factory.py``) splits it by the client's shares of the two domains, whose sizes
    ``domain_sizes`` (source and target rows over all clients) gives; ``client_rows`` by the client's own rows
    (:func:`fedshift.algorithms.sgda_local.batch_split`). At p = 1 and in the s<k>t<l> settings every client holds one
    domain and both give its whole batch to it.

    Parameters
    ----------
    resolved : dict
        The run's ``hparams`` (:func:`fedshift.papers.fedmm.config.resolve_setting`): ``optimizer``, ``nu``,
        ``train``, ``optimizer_settings``, ``preprocessing``.
    module : torch.nn.Module
        :func:`build_network`'s network.
    client_ids : list of int
        The clients' ids (:class:`fedshift.algorithms.registry.BuildContext`).
    domain_sizes : (int, int), optional
        Source and target rows over all clients.

    Returns
    -------
    FederatedAlgorithm
        :func:`fedshift.algorithms.registry.build` of the optimizer's registered name.

    Raises
    ------
    ConfigError
        ``domain_shares`` without ``domain_sizes``, or an unknown ``batch_split``.
    """
    tr, opt = resolved["train"], resolved["optimizer_settings"]
    m = tr["local_steps"]
    split = tr.get("batch_split", "domain_shares")
    if split not in BATCH_SPLITS:
        raise ConfigError(f"config error at fedmm.tasks.{resolved.get('task')}.train.batch_split: {split!r} is not "
                          f"one of {BATCH_SPLITS}")
    if split == "domain_shares" and domain_sizes is None:
        raise ConfigError("train.batch_split domain_shares needs the domain sizes (source and target rows)")
    dirs = network_directions(module, nu=resolved["nu"], batch_size=tr["batch_size"], steps=m,
                              domain_sizes=domain_sizes if split == "domain_shares" else None,
                              centre=resolved.get("preprocessing", "per_domain") == "official")
    lr = (tr["client_lr"], tr["client_lr_adversary"])  # (η₁, η₂): the clients' descent and ascent steps
    name = resolved["optimizer"]  # a registered name (fedshift.algorithms.registry)
    if name == "fedmm":
        hp = {"mu": (opt["mu"], opt["mu_adversary"]), "eta3": opt["eta3"], "eta3_decay": opt["eta3_decay"],
              "eta3_every": opt["eta3_every"]}
    else:
        hp = {"mu": opt.get("mu", 0.0) if name == "fedprox_sgda" else 0.0}
    return registry.build(name, registry.BuildContext(dirs, client_ids=client_ids), local_steps=m, lr=lr, **hp)


EVAL_CHUNK_ELEMENTS = 2 ** 23
"""Input elements per evaluation forward pass (32 MiB of float32): 1,024 digits (3 × 28 × 28) but 55 Office-31
images (3 × 224 × 224) at a time, so that MobileNetV2's activations stay under ~1 GB (a fixed 1,024 images at
224 px asked for over 10 GB and was killed out of memory in the rehearsal)."""


def eval_chunk(x: torch.Tensor, cap: int = 1024) -> int:
    """Images per evaluation forward pass: at most ``cap``, and at most :data:`EVAL_CHUNK_ELEMENTS` input elements.

    Parameters
    ----------
    x : torch.Tensor, shape (n, ...)
        The images to evaluate.
    cap : int
        The most images per pass (small inputs).

    Returns
    -------
    int
        In [1, cap].
    """
    per_image = max(int(x[0].numel()), 1) if len(x) else 1
    return max(1, min(cap, EVAL_CHUNK_ELEMENTS // per_image))


def accuracy(module: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
             chunk: int | None = None) -> float:
    """Top-1 accuracy of the task classifier (eval mode, no gradient), in [0, 1].

    ``x`` (n, C, H, W) is evaluated ``chunk`` images at a time (default :func:`eval_chunk`: bounded memory at any
    image size).
    """
    chunk = chunk or eval_chunk(x)
    was = module.training
    module.eval()
    try:
        with torch.no_grad():
            hits = sum(int((torch.func.functional_call(module, params, (x[i: i + chunk],)).argmax(1)
                            == y[i: i + chunk]).sum()) for i in range(0, len(y), chunk))
    finally:
        module.train(was)
    return hits / max(len(y), 1)


def train_run(resolved: dict[str, Any], seed: int, *, source_path: str | Path, target_path: str | Path,
              partition_path: str | Path, device: torch.device, checkpoint_path: str | Path | None, fingerprint: str,
              weights_path: str | Path | None = None) -> Fit:
    """Train one (task, run, seed): the final model and the target accuracy every ``eval_every`` rounds.

    ``seed`` seeds the initialisation (``init_params(module, seed)``; the MobileNetV2 backbone keeps its ImageNet
    weights) and every round's batches (``RoundKey(seed, round)``). The history holds per ``eval_every`` rounds
    the mean local objective, client drift, FedMM's dual norm and η₃, and ``target_accuracy`` (the target test
    set, [0, 1]). Algorithm 1 (FedMM) or a baseline (FedAvgSGDA, FedProxSGDA, FedSGDA): :func:`build_algorithm`.

    A run whose objective becomes NaN or infinite (:class:`~fedshift.core.training.NonFiniteLossError`) is recorded
    as diverged (``diverged`` true, accuracy NaN, an empty model, ``Fit.result`` None): Fig. 5 leaves such settings
    blank.

    Parameters
    ----------
    resolved : dict
        The run's ``hparams`` (:func:`fedshift.papers.fedmm.config.resolve_setting`; ``task`` and ``run`` name it).
    seed : int
    source_path, target_path, partition_path : path
        The prepared source and target datasets and the run's partition (:func:`fedshift.papers.fedmm.data`).
    device : torch.device
    checkpoint_path : path, optional
        Resume point (resumed when its fingerprint matches ``fingerprint``).
    fingerprint : str
        The job's checkpoint identity (:func:`fedshift.jobs.input_fingerprint`).
    weights_path : path, optional
        MobileNetV2's ImageNet weights (Office-31).

    Returns
    -------
    Fit
        The evaluated parameters (``alg.eval_params``, ``{}`` when diverged), the history (one row per evaluated
        round, ``diverged`` column), ``run.json``'s fields (``task``, ``resolved``, ``client_sizes``,
        ``test_size``, ``final_target_accuracy``, ``rounds``, ``diverged``).
    """
    task, run = resolved["task"], resolved["run"]
    partition = read_json(partition_path)
    clients, x_test, y_test = load_data(resolved, partition, source_path, target_path, device)
    module = build_network(resolved, weights_path).to(device)
    tr = resolved["train"]
    sizes = (sum(c.num_source for c in clients), sum(c.num_target for c in clients))
    alg = with_monitor(build_algorithm(resolved, module, [c.client_id for c in clients], sizes),
                       lambda p: {"target_accuracy": accuracy(module, p, x_test, y_test)},
                       every=tr["eval_every"], rounds=tr["rounds"])
    params0 = init_params(module, seed, device=device)  # a pre-trained backbone is kept
    try:
        result = run_training(alg, params0, clients, rounds=tr["rounds"], seed=seed,
                              checkpoint_path=checkpoint_path, checkpoint_every=tr["checkpoint_every"],
                              log_every=tr["eval_every"], fingerprint=fingerprint)
    except NonFiniteLossError as err:  # a setting FedMM diverges in: a blank cell of Fig. 5, not a failure
        log.warning("%s / %s / seed %d diverged, recorded as such (run.json diverged: true, accuracy NaN, an "
                    "empty model) for Fig. 5's blank cell: %s", task, run, seed, err)
        result, final = None, {}
        hist = pd.DataFrame([{"round": tr["rounds"], "target_accuracy": float("nan"), "diverged": True}])
    else:
        final = alg.eval_params(result.state)
        hist = pd.DataFrame(result.history).rename(columns=lambda c: c.split("/", 1)[-1]).assign(diverged=False)
    info = {"task": task, "resolved": resolved, "client_sizes": partition["sizes"],
            "test_size": len(partition["test"]),
            "final_target_accuracy": float(hist["target_accuracy"].iloc[-1]), "rounds": tr["rounds"],
            "diverged": result is None}
    log.info("%s / %s / seed %d: target accuracy %.4f after %d rounds", task, run, seed,
             info["final_target_accuracy"], tr["rounds"])
    return Fit(final, hist, info, result)


def evaluate_run(resolved: dict[str, Any], history_path: str | Path) -> pd.DataFrame:
    """The run's target test accuracy by round, from its history (training evaluated it every ``eval_every``).

    Parameters
    ----------
    resolved : dict
        The run's ``hparams`` (:func:`fedshift.papers.fedmm.config.resolve_setting`).
    history_path : path
        The run's ``history.csv`` (:func:`train_run`).

    Returns
    -------
    DataFrame
        One row per evaluated round: the run setting (``optimizer``, ``head``, ``clients``, ``local_steps``,
        ``eta3``), ``round``, ``metric`` = ``"target_accuracy"``, ``value`` in [0, 1] (NaN for a diverged run).
    """
    h = pd.read_csv(history_path)
    setting = {k: resolved[k] for k in ("optimizer", "head", "clients", "local_steps", "eta3")}
    return pd.DataFrame({**setting, "round": h["round"], "metric": "target_accuracy", "value": h["target_accuracy"]})
