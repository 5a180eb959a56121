"""One cell of the shift matrix: its model, its algorithm built on the common budget, and its training.

Which algorithm runs in which cell, and why a cell is "n/a", is read from the algorithms' declarations
(:mod:`.rows`). A cell builds its algorithm in one of two ways, neither of which names an algorithm:

* no cell hook declared (``register(..., cell=...)`` absent): the common round — one model module, the common
  round's keywords (``clients_per_round``, ``local_epochs``, ``batch_size``, ``client_lr``), the method's fixed
  settings and one value of its hyper-parameter grid, through :func:`fedshift.algorithms.registry.build` with the
  cell's data as context (:func:`cell_context`: the number of clients and domains, T from the shift's side
  information and S from the clients' labels); w₀ = ``init_params(module, seed)``; the clients as they are;
* a cell hook: the hook builds the algorithm, its w₀ and the form of the clients its ``apply`` takes on the same
  budget (:mod:`.rows` states its contract); e.g. Stochastic-AFL's per-domain steps
  (:func:`fedshift.algorithms.afl.matrix_cell`), the DANN family's network of the CNN
  (:func:`fedshift.algorithms.sgda.dann_cell`), FedPALS's λ from an ESS
  (:func:`fedshift.algorithms.fedpals.matrix_cell`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedshift.algorithms import registry
from fedshift.core.base import Params
from fedshift.core.training import run_training
from fedshift.models import build_model, init_params
from fedshift.papers.shift_matrix import rows
from fedshift.shifts import Instance

__all__ = ["cell_context", "common_round", "model_of", "setup_cell", "train_cell"]


def cell_context(module: Any, instance: Instance) -> registry.BuildContext:
    """What a cell's data gives the factories (:class:`~fedshift.algorithms.registry.BuildContext`).

    The number of clients; with the shift's ``domain_ids`` the number of domains p; with its target label marginal
    T, T and the clients' own label marginals S (FedPALS), over the shift's ``num_labels`` classes.
    """
    from fedshift.partition import label_marginals

    side = instance.side
    t = s = None
    if "target_label_marginal" in side:
        y = [c.y.cpu().numpy() for c in instance.clients]
        offsets = np.cumsum([0] + [len(v) for v in y])
        s = label_marginals(np.concatenate(y), [np.arange(offsets[i], offsets[i + 1]) for i in range(len(y))],
                            instance.num_labels)
        t = np.asarray(side["target_label_marginal"], dtype=np.float64)
    return registry.BuildContext(module, num_clients=len(instance.clients),
                                 num_domains=max(side["domain_ids"]) + 1 if "domain_ids" in side else None,
                                 target_label_marginal=t, client_label_marginals=s)


def common_round(train: Mapping[str, Any], instance: Instance) -> dict[str, Any]:
    """The common round's keywords (:data:`.rows.OFFERED`) of ``train``, participants capped at the clients."""
    kw = {k: train[k] for k in rows.OFFERED}
    kw["clients_per_round"] = min(kw["clients_per_round"], len(instance.clients))
    return kw


def model_of(name: str, image_side: int, num_labels: int) -> torch.nn.Module:
    """The matrix's model family on a shift's common format (grey ``image_side``² inputs, ``num_labels`` classes).

    ``logreg`` (MLR) or ``cnn2`` (the small two-layer CNN, :class:`fedshift.models.TwoLayerCNN`).

    Raises
    ------
    ValueError
        For another name.
    """
    if name == "logreg":
        return build_model("logreg", input_dim=image_side * image_side, num_classes=num_labels)
    if name == "cnn2":
        return build_model("cnn2", num_classes=num_labels, in_channels=1, image_size=image_side)
    raise ValueError(f"shift_matrix.model: expected one of {sorted(rows.MODEL_PARTS)}, got {name!r}")


def setup_cell(name: str, module: torch.nn.Module, instance: Instance, seed: int, *, train: Mapping[str, Any],
               fixed: Mapping[str, Any], value: Mapping[str, Any]) -> tuple[Any, Params, Any]:
    """Algorithm ``name`` of one grid ``value``, its w₀ and the clients its ``apply`` takes (one seed of a cell).

    Through the algorithm's cell hook when it declares one (the settings its hook's keyword-only parameters name go
    to those), else on the common round (module docstring).

    Returns
    -------
    algorithm, params0, clients

    Raises
    ------
    ValueError
        From :func:`fedshift.algorithms.registry.build` for a keyword the factory rejects.
    """
    settings = dict(fixed) | dict(value)
    context = cell_context(module, instance)
    common = common_round(train, instance)
    hook = rows.hook(name)
    if hook is not None:
        own = {k: settings.pop(k) for k in rows.hook_keys(name) if k in settings}
        return hook(name, context, instance, common, settings, seed, **own)
    device = next(module.parameters()).device
    return (registry.build(name, context, **(common | settings)), init_params(module, seed, device=device),
            instance.clients)


def train_cell(name: str, instance: Instance, seed: int, *, model: str, train: Mapping[str, Any],
               fixed: Mapping[str, Any], grid: Sequence[Mapping[str, Any]], device: Any
               ) -> list[tuple[Params, list[dict[str, float]]]]:
    """Train algorithm ``name`` on one seed of a shift once per grid value.

    Every grid value starts from the same w₀ (``init_params(module, seed)``) and draws the same clients and
    batches (``RoundKey(seed, round)``): the grid values and the algorithms of a seed differ only in the method.
    ``train["rounds"]`` rounds of the algorithm's ``apply``; its ``eval_params`` are the matrix model's parameters.

    Returns
    -------
    list of (params, history)
        Per grid value, the final model and the training history (:func:`fedshift.core.training.run_training`).
    """
    module = model_of(model, instance.image_side, instance.num_labels).to(device)
    out = []
    for value in grid:
        alg, params0, data = setup_cell(name, module, instance, seed, train=train, fixed=fixed, value=value)
        result = run_training(alg, params0, data, rounds=train["rounds"], seed=seed, log_every=train["rounds"])
        out.append((alg.eval_params(result.state), result.history))
    return out
