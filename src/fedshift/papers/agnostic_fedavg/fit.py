"""Training and evaluation of one AgnosticFedAvg run: the model, the loss, the algorithm, the run and its metrics.

:func:`train_run` trains one (experiment, algorithm, seed) run on an experiment's data
(:func:`fedshift.papers.agnostic_fedavg.data.load_data`): per-domain test metrics every ``log_every`` rounds, λ
over rounds; the final evaluation and λ are the run's artifacts, which :func:`evaluate_run` turns into tidy rows.
The algorithm is built through the registry (:func:`build_algorithm`: AgnosticFedAvg, or the FedAvg baseline as
the registered ``domain_fedavg``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fedshift.algorithms import registry
from fedshift.algorithms.agnostic_fedavg_steps import (
    DomainClients,
    cross_entropy_loss,
    scaled_client_lr,
)
from fedshift.errors import ConfigError
from fedshift.contract import Fit
from fedshift.core.training import run_training
from fedshift.lm import LM_MODELS, lm_sums, token_loss
from fedshift.models import LogisticRegression, forward, init_params
from fedshift.papers.agnostic_fedavg.config import registered_algorithm
from fedshift.papers.agnostic_fedavg.data import load_data
from fedshift.papers.agnostic_fedavg.models import EmnistCNN, ToyRegression, squared_loss

__all__ = ["build_module", "loss_of", "evaluator", "effective_client_lr", "build_algorithm",
           "train_run", "evaluate_run"]

def build_module(resolved: dict[str, Any], data: dict[str, Any]) -> torch.nn.Module:
    """The experiment's model (``model.name``: toy_regression, logreg, emnist_cnn, reddi_lstm, stacked_lstm).

    Parameters
    ----------
    resolved : dict
        :func:`~fedshift.papers.agnostic_fedavg.config.resolve_run` (its ``model``: ``name`` and the LM's sizes).
    data : dict
        :func:`~fedshift.papers.agnostic_fedavg.data.load_data` (input width, number of domains, vocabulary).

    Returns
    -------
    torch.nn.Module
        On the CPU, not initialised (:func:`fedshift.models.init_params` draws its weights): the toy's w ∈ R^d; a
        logistic regression over the flattened input with one class per domain (Fashion-MNIST's AFL domains are
        its labels); the EMNIST CNN (62 classes); an LSTM over ``len(vocab) + 4`` tokens (PAD, BOS, EOS, UNK).

    Raises
    ------
    ConfigError
        For an unknown model name.
    """
    m = resolved["model"]
    name = m["name"]
    if name == "toy_regression":
        return ToyRegression(int(data["clients"].pool.y.shape[1]), m.get("init"))
    if name == "logreg":
        return LogisticRegression(int(data["clients"].pool.x[0].numel()), len(data["domains"]))
    if name == "emnist_cnn":
        return EmnistCNN(62)
    if name in LM_MODELS:
        kw = {k: v for k, v in m.items() if k != "name"}
        return LM_MODELS[name](len(data["vocab"]) + 4, **kw)
    raise ConfigError(f"unknown model {name!r}")


def loss_of(resolved: dict[str, Any]):
    """The per-example training loss of an experiment kind.

    Parameters
    ----------
    resolved : dict
        :func:`~fedshift.papers.agnostic_fedavg.config.resolve_run` (``kind``; ``train.loss_scale`` for LMs).

    Returns
    -------
    callable
        ``loss(module, params, x, y) -> Tensor`` of shape (batch,): toy ‖w − y‖²; LM the sum of a sentence's
        token cross-entropies (nats, PAD excluded) divided by ``loss_scale`` (:func:`fedshift.lm.token_loss`);
        classification the cross-entropy (nats).
    """
    if resolved["kind"] == "toy":
        return squared_loss
    if resolved["kind"] == "lm":
        scale = float(resolved["train"].get("loss_scale", 1.0))
        return lambda module, params, x, y: token_loss(module, params, x, y, scale)
    return cross_entropy_loss


def evaluator(resolved: dict[str, Any], module: torch.nn.Module, data: dict[str, Any]):
    """``evaluate(params) -> {metric/domain: value}`` on the per-domain test sets.

    Classification: ``accuracy/<d>`` (fraction), ``loss/<d>`` (nats) and ``worst_accuracy``; LM:
    ``perplexity/<d>``, ``accuracy/<d>`` (in-vocab) and ``worst_perplexity``; toy: ``w/<i>`` and ``loss/<d>``
    (mean ‖w − y‖² of the domain) and ``max_loss``.

    Parameters
    ----------
    resolved : dict
        :func:`~fedshift.papers.agnostic_fedavg.config.resolve_run` (``kind``).
    module : torch.nn.Module
        :func:`build_module`, on the data's device.
    data : dict
        :func:`~fedshift.papers.agnostic_fedavg.data.load_data` (``domains``, ``test``).

    Returns
    -------
    callable
        ``evaluate(params) -> dict[str, float]``; domains without test examples are skipped.
    """
    names, kind = data["domains"], resolved["kind"]

    def evaluate(params: dict[str, torch.Tensor]) -> dict[str, float]:
        out: dict[str, float] = {}
        with torch.no_grad():
            for name, (x, y) in zip(names, data["test"], strict=True):
                if not len(y):
                    continue
                if kind == "lm":
                    s = lm_sums(module, params, x, y)
                    out[f"perplexity/{name}"] = math.exp(s["loss"] / max(s["tokens"], 1))
                    out[f"accuracy/{name}"] = s["correct"] / max(s["words"], 1)
                elif kind == "toy":
                    out[f"loss/{name}"] = float(squared_loss(module, params, x, y).mean())
                else:
                    chunks = [(forward(module, params, x[i:i + 4096]), y[i:i + 4096]) for i in range(0, len(y), 4096)]
                    out[f"accuracy/{name}"] = float(sum((lg.argmax(1) == yy).sum() for lg, yy in chunks) / len(y))
                    out[f"loss/{name}"] = float(sum(cross_entropy_loss(module, params, xx, yy).sum()
                                                    for xx, yy in zip(x.split(4096), y.split(4096), strict=True))
                                                / len(y))
        if kind == "lm":
            out["worst_perplexity"] = max(v for k, v in out.items() if k.startswith("perplexity/"))
        elif kind == "toy":
            out.update({f"w/{i}": float(v) for i, v in enumerate(params["w"].flatten())})
            out["max_loss"] = max(v for k, v in out.items() if k.startswith("loss/"))
        else:
            out["worst_accuracy"] = min(v for k, v in out.items() if k.startswith("accuracy/"))
        return out

    return evaluate


def effective_client_lr(train: dict[str, Any], clients: DomainClients) -> float:
    """The client step size: ``client_lr``, times mean(n_k) / B with ``client_lr_scale: mean_client_size``.

    AgnosticFedAvg's local objective (1/β^k) Σ_{j∈B} α_{d_j} ℓ_j is a batch *sum* over the client's total
    weight, about B / n_k times FedAvg's batch mean (exactly, for one domain), so the step size that moves a
    client as far as FedAvg's per epoch is η · n_k / B. The scaling uses the mean client size of the training
    data, so one config holds at every scale [ours; FedJAX tunes the client lr by hand].

    Parameters
    ----------
    train : dict
        The run's ``train`` settings (``client_lr``, ``batch_size``, ``client_lr_scale``).
    clients : DomainClients
        The run's training clients (their sizes n_k, in examples).

    Returns
    -------
    float
        The client step size η (:func:`fedshift.algorithms.agnostic_fedavg_steps.scaled_client_lr` when scaled).
    """
    if train.get("client_lr_scale", "none") == "mean_client_size":
        return scaled_client_lr(train["client_lr"], clients.pool.sizes(), train["batch_size"])
    return float(train["client_lr"])


def build_algorithm(resolved: dict[str, Any], module: torch.nn.Module, data: dict[str, Any], evaluate):
    """AgnosticFedAvg or the FedAvg baseline from a resolved run, through the algorithm registry.

    Parameters
    ----------
    resolved : dict
        :func:`~fedshift.papers.agnostic_fedavg.config.resolve_run`: ``train`` holds the round settings
        (clients per round, capped at the number of clients; local epochs, batch size, client step
        :func:`effective_client_lr`, server optimizer) and, for AgnosticFedAvg, η_λ (``lambda_lr``),
        ``window_size`` and the initial domain weights.
    module : torch.nn.Module
        :func:`build_module`.
    data : dict
        :func:`~fedshift.papers.agnostic_fedavg.data.load_data` (clients, domains).
    evaluate : callable
        :func:`evaluator`, run every ``log_every`` rounds.

    Returns
    -------
    FederatedAlgorithm
        ``registry.build("agnostic_fedavg" | "domain_fedavg", BuildContext(module, num_domains=p), ...)``
        (Ro et al. 2021, Alg. 1; FedAvg for ``kind: fedavg``).
    """
    tr = resolved["train"]
    common = dict(clients_per_round=min(tr["clients_per_round"], data["clients"].num_clients),
                  local_epochs=tr["local_epochs"], batch_size=tr["batch_size"],
                  client_lr=effective_client_lr(tr, data["clients"]),
                  server_optimizer=tr["server_optimizer"], server_lr=tr["server_lr"],
                  server_optimizer_kwargs=tr.get("server_optimizer_kwargs") or {}, loss_fn=loss_of(resolved),
                  evaluate=evaluate, eval_every=tr["log_every"])
    name = registered_algorithm(tr["kind"])
    if name == "agnostic_fedavg":
        hp = dict(lambda_lr=tr["lambda_lr"], window_size=tr["window_size"],
                  init_domain_weights=tr.get("init_domain_weights", "uniform"),
                  init_domain_window=tr.get("init_domain_window"))
    else:
        hp = {"name": "fedavg"}
    return registry.build(name, registry.BuildContext(module, num_domains=len(data["domains"])), **hp, **common)




def train_run(resolved: dict[str, Any], seed: int, data_path: str | Path, *, device: torch.device,
              checkpoint: str | Path | None, fingerprint: str) -> Fit:
    """Train one (experiment, algorithm, seed) run: what :meth:`AgnosticFedAvgPaper.train` returns.

    Parameters
    ----------
    resolved : dict
        :func:`~fedshift.papers.agnostic_fedavg.config.resolve_run` (the run's ``RunSpec.hparams``).
    seed : int
        Initialisation (``init_params(module, seed)``) and every round's client sample and batches
        (``RoundKey(seed, round)``).
    data_path : path
        :func:`~fedshift.papers.agnostic_fedavg.data.build_data`'s tensors.
    device : torch.device
    checkpoint : path, optional
        Resume point, used when its ``fingerprint`` matches.
    fingerprint : str
        The job's checkpoint identity (:func:`fedshift.jobs.input_fingerprint`).

    Returns
    -------
    Fit
        Final w; history: one row per logged round (loss, λ, per-domain mean loss L̄, per-domain test
        metrics, ``eval/`` prefix removed); artifacts: ``final`` (:func:`evaluator` of the final w) and
        ``lambda`` (the final λ, None for FedAvg), read by :func:`evaluate_run`.

    Raises
    ------
    NonFiniteLossError
        On NaN / inf (nothing is written).
    ValueError
        A target domain without examples.
    """
    target = resolved["train"].get("target")
    data = load_data(data_path, device, resolved["domains"].index(target) if target is not None else None)
    module = build_module(resolved, data).to(device)
    module.eval()  # dropout off: deterministic local steps [ours]
    evaluate = evaluator(resolved, module, data)
    alg = build_algorithm(resolved, module, data, evaluate)
    tr = resolved["train"]
    result = run_training(alg, init_params(module, seed, device=device), data["clients"], rounds=tr["rounds"],
                          seed=seed, checkpoint_path=checkpoint, checkpoint_every=tr["checkpoint_every"],
                          log_every=tr["log_every"], fingerprint=fingerprint)
    state = result.state
    final = alg.eval_params(state)
    history = pd.DataFrame(result.history)
    history.columns = [c.removeprefix("eval/") for c in history.columns]
    artifacts = {"final": evaluate(final), "lambda": state.lam.tolist() if hasattr(state, "lam") else None}
    info = {"resolved": resolved, "clients": data["clients"].num_clients, "rounds": state.round,
            "effective_client_lr": effective_client_lr(tr, data["clients"])}
    return Fit(final, history, info, result, artifacts)


def evaluate_run(resolved: dict[str, Any], seed: int, artifacts: dict[str, Any]) -> pd.DataFrame:
    """Tidy final metrics of one run from its artifacts (:func:`train_run`): ``metrics.csv``.

    Parameters
    ----------
    resolved : dict
        :func:`~fedshift.papers.agnostic_fedavg.config.resolve_run` (experiment, algorithm, domains).
    seed : int
        The run's seed (a column).
    artifacts : dict
        The run's ``artifacts.pt``: ``final`` (metric/domain → value) and ``lambda`` (list or None).

    Returns
    -------
    DataFrame
        Columns experiment, algorithm, seed, domain (``all`` for worst-domain / toy summaries), metric, value:
        every metric of :func:`evaluator` on the final w, then ``lambda`` per domain (AgnosticFedAvg only).
    """
    rows = []
    for k, v in artifacts["final"].items():
        metric, _, dom = k.partition("/")
        rows.append({"experiment": resolved["experiment"], "algorithm": resolved["algorithm"], "seed": seed,
                     "domain": dom or "all", "metric": metric, "value": v})
    if artifacts.get("lambda") is not None:
        rows += [{"experiment": resolved["experiment"], "algorithm": resolved["algorithm"], "seed": seed,
                  "domain": n, "metric": "lambda", "value": float(v)}
                 for n, v in zip(resolved["domains"], artifacts["lambda"], strict=True)]
    return pd.DataFrame(rows)

