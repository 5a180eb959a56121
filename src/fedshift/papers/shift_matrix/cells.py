"""The cells of the shift matrix: which algorithm runs under which shift, how it is built, and one cell's training.

Every registered algorithm (:func:`fedshift.algorithms.registry.names`, plug-ins included) is a row. A cell
(shift, algorithm) is "n/a" with its reason written in the table (:func:`cell_status`, never a silent
fallback) when

1. the algorithm needs side information the shift does not give (``registry.register(..., needs=...)``,
   :attr:`~fedshift.algorithms.registry.AlgorithmSpec.needs`), or
2. the algorithm trains through its own loop and no adapter is written yet (:data:`NOT_ADAPTED`), or its
   factory asks for a keyword the matrix cannot supply (:func:`adapter_gap`), or
3. it cannot train the matrix's model (:func:`~.adapters.model_gap`: a DANN network needs the CNN's feature
   extractor; MLR has none).

Every other algorithm is built like FedAvg (:func:`build_algorithm`): one model module, the common round
(``clients_per_round``, ``local_epochs``, ``batch_size``, ``client_lr``), the method's fixed settings and one value
of its hyper-parameter grid, through :func:`fedshift.algorithms.registry.build` with the cell's data as context
(:func:`cell_context`: the number of clients and domains, T from the shift's side information and S from the
clients' labels); AgnosticFedAvg and its FedAvg baseline get the clients as DomainClients
(:func:`domain_clients`), AgnosticFedAvg the domain ids of the shift.
Stochastic-AFL and the DANN family (FedMM, FedAvgSGDA, FedProxSGDA, FedSGDA) train through :mod:`.adapters`
on the same budget (:func:`train_cell`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedshift.algorithms import registry
from fedshift.core.base import Params
from fedshift.core.training import run_training
from fedshift.models import build_model, init_params
from fedshift.papers.shift_matrix import adapters
from fedshift.shifts import IMAGE_SIDE, NUM_LABELS, Instance, Shift

__all__ = ["NOT_ADAPTED", "OFFERED", "cell_context", "cell_status", "adapter_gap", "extra_keys", "build_algorithm",
           "fedpals_kwargs",
           "model_of", "setup_cell", "train_cell"]

#: Algorithms that train through their own loop (not the FedAvg round on a list of clients) and have no adapter
#: yet, with why; their cells read "n/a: not yet adapted (...)". Stochastic-AFL and the DANN family are adapted in
#: :mod:`.adapters`.
NOT_ADAPTED: dict[str, str] = {
    "fedbn": "FedBN keeps each client's batch-norm layers local, so it trains one model per client, evaluated on that "
             "client's own data, not one model for a target population; and the matrix's models have no batch norm"}

#: Keywords the matrix supplies to every factory that asks for them (the common round).
OFFERED = frozenset({"clients_per_round", "local_epochs", "batch_size", "client_lr"})


def cell_context(module: Any, instance: Instance) -> registry.BuildContext:
    """What a cell's data gives the factories (:class:`~fedshift.algorithms.registry.BuildContext`).

    The number of clients; with the shift's ``domain_ids`` the number of domains p; with its target label marginal
    T, T and the clients' own label marginals S (FedPALS).
    """
    from fedshift.partition import label_marginals

    side = instance.side
    t = s = None
    if "target_label_marginal" in side:
        y = [c.y.cpu().numpy() for c in instance.clients]
        offsets = np.cumsum([0] + [len(v) for v in y])
        s = label_marginals(np.concatenate(y), [np.arange(offsets[i], offsets[i + 1]) for i in range(len(y))],
                            NUM_LABELS)
        t = np.asarray(side["target_label_marginal"], dtype=np.float64)
    return registry.BuildContext(module, num_clients=len(instance.clients),
                                 num_domains=max(side["domain_ids"]) + 1 if "domain_ids" in side else None,
                                 target_label_marginal=t, client_label_marginals=s)


def fedpals_kwargs(kwargs: dict[str, Any], instance: Instance, context: registry.BuildContext) -> dict[str, Any]:
    """FedPALS's λ: given directly (``lam``) or through the effective sample size it must reach.

    ``ess_fraction`` (FedPALS §4.2) is converted by :func:`fedshift.algorithms.fedpals.resolve_lambda` on the
    context's T and S.
    """
    from fedshift.algorithms.fedpals import resolve_lambda

    out = dict(kwargs)
    if "ess_fraction" in out:
        out["lam"] = resolve_lambda(context.target_label_marginal, context.client_label_marginals,
                                    np.array([c.num_examples for c in instance.clients]),
                                    ess_fraction=out.pop("ess_fraction"))
    return out


def domain_clients(instance: Instance, domain_ids: Sequence[int] | None = None) -> Any:
    """The clients as AgnosticFedAvg's :class:`~fedshift.algorithms.agnostic_fedavg.DomainClients`.

    Every example gets its client's domain id: ``domain_ids`` (the shift's side information) when given, else
    :attr:`ClientData.domain` (read only by algorithms that ignore it: AgnosticFedAvg's FedAvg baseline).
    """
    from fedshift.algorithms.agnostic_fedavg import DomainClients
    from fedshift.core.engine import ClientPool

    ids = list(domain_ids) if domain_ids is not None else [c.domain for c in instance.clients]
    pool = ClientPool.from_clients(instance.clients)
    per_example = torch.cat([torch.full((c.num_examples,), d, dtype=torch.int64, device=c.y.device)
                             for c, d in zip(instance.clients, ids, strict=True)])
    return DomainClients(pool, per_example, max(ids) + 1)


def agnostic_fedavg_kwargs(kwargs: dict[str, Any], instance: Instance, context: registry.BuildContext
                           ) -> dict[str, Any]:
    """AgnosticFedAvg's client step on FedAvg's scale (:func:`fedshift.algorithms.agnostic_fedavg.scaled_client_lr`).

    Its local objective is a batch *sum* over the client's total weight, about B / n_k times FedAvg's batch mean,
    as the AgnosticFedAvg pipeline does (``client_lr_scale: mean_client_size``): a client then moves as far per
    epoch as under FedAvg. Without it AgnosticFedAvg trains at ≈ B / n_k of every other cell's step (0.1 × at
    quick scale).
    """
    from fedshift.algorithms.agnostic_fedavg import scaled_client_lr

    sizes = [c.num_examples for c in instance.clients]
    return dict(kwargs) | {"client_lr": scaled_client_lr(kwargs["client_lr"], sizes, kwargs["batch_size"])}


#: Algorithm → adapter of its keywords from a cell's instance and context (what the common round does not supply).
ADAPTERS: dict[str, Callable[[dict[str, Any], Instance, registry.BuildContext], dict[str, Any]]] = {
    "fedpals": fedpals_kwargs, "agnostic_fedavg": agnostic_fedavg_kwargs}
#: Keywords an adapter supplies, by algorithm.
ADAPTED_KEYS = {"fedpals": frozenset({"lam"}), "afl": adapters.AFL_KEYS}
#: Algorithm → the form of the clients its ``apply`` takes, when not the list of ClientData.
DATA_ADAPTERS: dict[str, Callable[[Instance], Any]] = {
    "agnostic_fedavg": lambda inst: domain_clients(inst, inst.side["domain_ids"]),
    "domain_fedavg": domain_clients,
}


def extra_keys(name: str) -> frozenset[str]:
    """Config keys of algorithm ``name`` that its adapter reads itself (not factory keywords).

    FedPALS: ``ess_fraction`` (:func:`fedpals_kwargs`); the DANN family: ``nu`` (the DANN weight of the network's
    directions, :func:`~.adapters.build_minimax`).
    """
    if adapters.is_minimax(name):
        return frozenset({"nu"})
    return frozenset({"ess_fraction"}) if name == "fedpals" else frozenset()


def adapter_gap(name: str, grid_keys: Sequence[str] = ()) -> str | None:
    """Why ``name`` cannot be built by :func:`build_algorithm`, or None when it can.

    Its factory must take the model module first and every required keyword must be offered (:data:`OFFERED`),
    set by its grid or fixed settings (``grid_keys``) or supplied by its adapter (:data:`ADAPTED_KEYS`).
    """
    if name in NOT_ADAPTED:
        return NOT_ADAPTED[name]
    spec = registry.get(name)
    params = list(inspect.signature(spec.factory).parameters.values())
    minimax = adapters.is_minimax(name)
    if not params or (params[0].name != "module" and not minimax):
        return "its factory does not take a model module"
    required = {p.name for p in params[1:] if p.kind is p.KEYWORD_ONLY and p.default is p.empty} - set(spec.fixed)
    supplied = adapters.MINIMAX_KEYS if minimax else ADAPTED_KEYS.get(name, frozenset())
    missing = required - OFFERED - set(grid_keys) - supplied - set(registry.CONTEXT_FIELDS)
    return f"its factory needs {', '.join(sorted(missing))}" if missing else None


def cell_status(name: str, shift: Shift, grid_keys: Sequence[str] = (), model: str | None = None) -> str | None:
    """None when the cell (shift, algorithm ``name``) runs with ``model``; else its "n/a: ..." text for the table.

    In this order: side information the shift does not give, no adapter (:func:`adapter_gap`), a model the
    algorithm cannot train (:func:`~.adapters.model_gap`; ``model`` None skips this check).
    """
    missing = registry.get(name).needs - shift.side_information
    if missing:
        return f"n/a: needs {', '.join(sorted(missing))}, which the {shift.kind} shift does not give"
    gap = adapter_gap(name, grid_keys)
    if gap:
        return f"n/a: not yet adapted ({gap})"
    unfit = adapters.model_gap(name, model)
    return f"n/a: {unfit}" if unfit else None


def model_of(name: str) -> torch.nn.Module:
    """The matrix's model family on the common 784-input format: ``logreg`` (MLR) or ``cnn2`` (small CNN).

    Raises
    ------
    ValueError
        For another name.
    """
    if name == "logreg":
        return build_model("logreg", input_dim=IMAGE_SIDE * IMAGE_SIDE, num_classes=NUM_LABELS)
    if name == "cnn2":
        return build_model("cnn2", num_classes=NUM_LABELS, in_channels=1, image_size=IMAGE_SIDE)
    raise ValueError(f"shift_matrix.model: expected logreg or cnn2, got {name!r}")


def build_algorithm(name: str, module: torch.nn.Module, instance: Instance, train: Mapping[str, Any],
                    fixed: Mapping[str, Any], value: Mapping[str, Any]) -> Any:
    """One registered algorithm on the common round, its fixed settings and one grid ``value``.

    Parameters
    ----------
    name : str
        Registered algorithm.
    module : nn.Module
    instance : Instance
        The cell's seed (clients, side information).
    train : mapping
        ``clients_per_round``, ``local_epochs``, ``batch_size``, ``client_lr`` (the same in every cell).
    fixed, value : mapping
        The method's fixed keywords and one grid value (the value wins).

    Raises
    ------
    ValueError
        From :meth:`~fedshift.algorithms.registry.AlgorithmSpec.build` for a keyword the factory rejects.
    """
    kw = {k: train[k] for k in ("clients_per_round", "local_epochs", "batch_size", "client_lr")}
    kw["clients_per_round"] = min(kw["clients_per_round"], len(instance.clients))
    kw |= dict(fixed) | dict(value)
    context = cell_context(module, instance)
    if name in ADAPTERS:
        kw = ADAPTERS[name](kw, instance, context)
    return registry.build(name, context, **kw)


def setup_cell(name: str, module: torch.nn.Module, instance: Instance, seed: int, *, train: Mapping[str, Any],
               fixed: Mapping[str, Any], value: Mapping[str, Any]) -> tuple[Any, Params, Any]:
    """Algorithm ``name`` of one grid ``value``, its w₀ and the clients its ``apply`` takes (one seed of a cell).

    FedAvg-like algorithms: :func:`build_algorithm`, w₀ = ``init_params(module, seed)``, the clients (or their
    :data:`DATA_ADAPTERS` form); Stochastic-AFL and the DANN family: :mod:`.adapters`.

    Returns
    -------
    algorithm, params0, clients
    """
    device = next(module.parameters()).device
    if adapters.is_minimax(name):
        return adapters.build_minimax(name, module, instance, train, dict(fixed) | dict(value), seed)
    params0 = init_params(module, seed, device=device)
    if name == "afl":
        alg, domains = adapters.build_afl(module, instance, train, dict(fixed) | dict(value))
        return alg, params0, domains
    clients = DATA_ADAPTERS[name](instance) if name in DATA_ADAPTERS else instance.clients
    return build_algorithm(name, module, instance, train, fixed, value), params0, clients


def train_cell(name: str, instance: Instance, seed: int, *, model: str, train: Mapping[str, Any],
               fixed: Mapping[str, Any], grid: Sequence[Mapping[str, Any]], device: Any
               ) -> list[tuple[Params, list[dict[str, float]]]]:
    """Train algorithm ``name`` on one seed of a shift once per grid value.

    Every grid value starts from the same w₀ (``init_params(module, seed)``) and draws the same clients and
    batches (``RoundKey(seed, round)``): the grid values and the algorithms of a seed differ only in the method.
    Stochastic-AFL and the DANN family train through :mod:`.adapters` (:func:`~.adapters.build_afl`,
    :func:`~.adapters.build_minimax`) on the same budget; their final models are the matrix's model.

    Returns
    -------
    list of (params, history)
        Per grid value, the final model and the training history (:func:`fedshift.core.training.run_training`).
    """
    module = model_of(model).to(device)
    out = []
    for value in grid:
        alg, params0, data = setup_cell(name, module, instance, seed, train=train, fixed=fixed, value=value)
        result = run_training(alg, params0, data, rounds=train["rounds"], seed=seed, log_every=train["rounds"])
        out.append((alg.eval_params(result.state), result.history))
    return out
