"""Adapters of the algorithms that train through their own loop: Stochastic-AFL and the DANN minimax family.

The common round of the matrix (:mod:`.cells`) is FedAvg's: ``clients_per_round`` clients, ``local_epochs`` passes
over their rows in batches of ``batch_size``, step ``client_lr``. Two kinds of registered algorithm do not take it
as it is, and are adapted here to the same budget:

* **Stochastic-AFL** (Mohri et al. 2019, Fig. 3; :func:`fedshift.algorithms.afl.build_stochastic_afl`) takes one
  stochastic step per ``apply`` on one client per *domain*. In the matrix one round of AFL is S steps of Fig. 3
  (:func:`afl_steps_per_round`), with S chosen so that a round evaluates as many per-example gradients as
  FedAvg's round: S · p · B ≈ clients_per_round · local_epochs · n̄ (PERDOMAIN draws B rows of each of the p
  domains per step; n̄ the mean client size). [ours] The gradient count is the cost every method pays on the
  clients; a count of local *steps* would give AFL p times fewer examples (one step sees p · B rows). γ_w is
  the common ``client_lr``; the grid tunes γ_λ (``lambda_lr``). The evaluated model is w^A, the average of all
  iterates (Fig. 3), through the same shift metric (D_Λ, U) as every mixture cell.
* **The DANN family** (FedMM, FedAvgSGDA, FedProxSGDA, FedSGDA; Shen et al. 2023 §4, Algorithm 1 and 3;
  :mod:`fedshift.algorithms.fedmm`, :mod:`fedshift.algorithms.sgda`): every registered factory whose first
  parameter is ``directions`` (:func:`is_minimax`). Its network (:func:`dann_network`) is built from the
  matrix's CNN: the feature extractor is ``cnn2``'s two conv layers (with their ReLU/max-pool), the task head
  its linear classifier, and the domain discriminator h_ψ a one-hidden-layer net (100 units, the official toy
  domain head). Its model is the matrix's model (the same w₀ as FedAvg's, :func:`init_params` of ``cnn2``,
  h_ψ initialised from the same seed), and its evaluated model is that ``cnn2`` without h_ψ
  (:func:`cnn_params`), scored by the shift's own metric. MLR (``logreg``) has no feature extractor to align:
  those cells are "n/a" (:func:`model_gap`). Budget: ``clients_per_round`` clients sampled per round as FedAvg
  samples them (:func:`fedshift.algorithms.fedavg.sample_clients`: the same ids as FedAvg's in each round), M =
  local_epochs · ⌈n_max / B⌉ local SGDA steps (FedAvg's steps on the largest client), batches of B rows
  split between the client's source and target rows in proportion to its rows
  (:func:`fedshift.algorithms.sgda.batch_split`; with as many target as source rows a step sees B/2 labelled
  rows, as in the official batch split), η₁ = η₂ = ``client_lr``. FedSGDA takes one local step per round (the
  FedSGDA baseline of the FedMM paper: FedAvgSGDA with M = 1, spec §4.2 [open]), so it evaluates 1/M of the
  others' gradients per round: a comparison at equal *communication*, as the paper's. **FedMM** (Algorithm 1)
  averages every client's primal-dual message ω_i + (η₃/μ)λ_i each round; on a subset the duals of the clients
  left out do not cancel (:data:`FULL_PARTICIPATION`). [ours] It therefore trains every client each round with
  M' = max(1, round(M · clients_per_round / N)) local steps, so that a round evaluates as many gradients as the
  others' (clients_per_round · M); at clients_per_round = N it is M, Algorithm 1 exactly. The grids tune ν (the
  DANN weight ``nu``; note that f = L₁ − νL₂ also scales the discriminator's step by ν,
  :func:`fedshift.algorithms.sgda.network_directions`) or the method's own μ.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from fedshift.algorithms import registry
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.rng import RoundKey
from fedshift.models import TwoLayerCNN, init_params, pool_relu
from fedshift.shifts import Instance

__all__ = ["FULL_PARTICIPATION", "builds_on", "is_minimax", "model_gap", "afl_steps_per_round", "afl_domain_clients",
           "build_afl", "CNNFeatures", "dann_network", "cnn_params", "adaptation_clients", "build_minimax",
           "MINIMAX_KEYS", "AFL_KEYS"]

#: Keywords of a minimax factory that :func:`build_minimax` supplies.
MINIMAX_KEYS = frozenset({"local_steps", "lr"})
#: Keywords of Stochastic-AFL's factory that :func:`build_afl` supplies.
AFL_KEYS = frozenset({"batch_size", "client_lr"})
#: Minimax algorithms that take one local step per round by their definition (FedSGDA, Peng et al. 2020).
ONE_LOCAL_STEP = frozenset({"fedsgda"})
#: Algorithms whose server step averages a per-client dual message over *every* client (FedMM, Algorithm 1): they
#: train all N clients each round with local steps scaled by clients_per_round / N (the module docstring).
FULL_PARTICIPATION = frozenset({"fedmm"})
#: Hidden widths of the domain discriminator h_ψ (official FedMM toy domain head: one hidden layer of 100).
DOMAIN_HIDDEN = (100,)


def builds_on(name: str) -> tuple[str, ...]:
    """Registered algorithms whose modules an adapter runs besides ``name``'s own (for the code hash).

    A job's rerun trigger hashes the modules of the algorithms its run names (``RunSpec.algorithms``,
    :mod:`fedshift.codehash`), and cuts every other registered algorithm module. The DANN adapter draws the
    round's clients with FedAvg's ``sample_clients`` and the minimax directions of ``fedshift.algorithms.sgda``
    (the module of ``fedavg_sgda``), so a minimax cell names both: editing either reruns it.
    """
    return ("fedavg", "fedavg_sgda") if is_minimax(name) else ()


def is_minimax(name: str) -> bool:
    """True for a registered algorithm whose factory takes SGDA ``directions`` first (the DANN family)."""
    params = list(inspect.signature(registry.get(name).factory).parameters)
    return bool(params) and params[0] == "directions"


def model_gap(name: str, model: str | None) -> str | None:
    """Why algorithm ``name`` cannot train the matrix's ``model``, or None.

    A minimax (DANN) algorithm needs a feature extractor for its domain discriminator: ``cnn2`` has one (its
    conv layers), MLR (``logreg``) none.
    """
    if model == "logreg" and is_minimax(name):
        return ("a DANN minimax network needs a feature extractor for its domain discriminator; "
                "MLR (model: logreg) has none")
    return None


# ---- Stochastic-AFL -----------------------------------------------------------------------------------------------
def afl_steps_per_round(train: Mapping[str, Any], instance: Instance) -> int:
    """S, the steps of Fig. 3 in one matrix round: ⌈clients_per_round · local_epochs · n̄ / (p · B)⌉, at least 1.

    n̄ is the mean client size and p the number of domains (module docstring: the same number of per-example
    gradients per round as FedAvg).
    """
    sizes = [c.num_examples for c in instance.clients]
    p = max(instance.side["domain_ids"]) + 1
    cpr = min(train["clients_per_round"], len(sizes))
    examples = cpr * train["local_epochs"] * sum(sizes) / len(sizes)
    return max(1, math.ceil(examples / (p * train["batch_size"])))


def afl_domain_clients(instance: Instance) -> list[ClientData]:
    """One client per domain k (id k): the rows of every client whose domain id (side information) is k.

    Returns
    -------
    list of ClientData
        p clients (Stochastic-AFL's per-domain samplers, Mohri et al. 2019 Fig. 3): ``x`` (n_k, 784) float32 grey
        28 × 28 pixels in [0, 1], ``y`` (n_k,) int64 labels in 0..9, n_k the domain's training rows.

    Raises
    ------
    ValueError
        If a domain id has no client.
    """
    ids = instance.side["domain_ids"]
    out = []
    for k in range(max(ids) + 1):
        mine = [c for c, d in zip(instance.clients, ids, strict=True) if d == k]
        if not mine:
            raise ValueError(f"Stochastic-AFL: domain {k} has no client")
        out.append(ClientData(k, torch.cat([c.x for c in mine]), torch.cat([c.y for c in mine]), k))
    return out


def _repeat(inner: FederatedAlgorithm, steps: int) -> FederatedAlgorithm:
    """``inner`` with ``steps`` of its ``apply`` per round; step s of round t uses ``RoundKey(seed, t·steps + s)``."""

    def apply(state: Any, clients: Sequence[Any], key: RoundKey):
        diag = {}
        for s in range(steps):
            state, diag = inner.apply(state, clients, RoundKey(key.seed, key.round * steps + s))
        return state, diag

    return replace(inner, apply=apply)


def build_afl(module: nn.Module, instance: Instance, train: Mapping[str, Any], kwargs: Mapping[str, Any]
              ) -> tuple[FederatedAlgorithm, list[ClientData]]:
    """Stochastic-AFL on the common budget, and its per-domain clients.

    Parameters
    ----------
    module : nn.Module
        The matrix's model.
    instance : Instance
        A mixture-shift seed (its ``domain_ids``).
    train : mapping
        The common round (``clients_per_round``, ``local_epochs``, ``batch_size``, ``client_lr``).
    kwargs : mapping
        Fixed settings and the grid value (``lambda_lr``, estimators, ...); they win over the common ones.

    Returns
    -------
    algorithm, clients
        One round = :func:`afl_steps_per_round` steps; ``clients[k]`` holds domain k.
    """
    clients = afl_domain_clients(instance)
    kw = {"batch_size": train["batch_size"], "client_lr": float(train["client_lr"])} | dict(kwargs)
    for k in ("clients_per_round", "local_epochs"):  # client_lr (a grid value too) is γ_w
        kw.pop(k, None)
    context = registry.BuildContext(module, num_domains=len(clients), domain_sizes=[c.num_examples for c in clients])
    inner = registry.build("afl", context, **kw)
    return _repeat(inner, afl_steps_per_round(train, instance)), clients


# ---- the DANN family --------------------------------------------------------------------------------------------
class CNNFeatures(nn.Module):
    """ζ¹ of the DANN network: ``cnn2``'s conv layers, shared (not copied) with the given :class:`TwoLayerCNN`.

    Maps (n, c·s²) or (n, c, s, s) inputs to (n, 32 · side²) features, as :meth:`TwoLayerCNN.forward` before its
    linear layer.
    """

    def __init__(self, cnn: TwoLayerCNN) -> None:
        super().__init__()
        self.conv1, self.conv2 = cnn.conv1, cnn.conv2
        self.in_channels, self.image_size = cnn.in_channels, cnn.image_size
        self.out_dim = cnn.fc.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = x.reshape(x.shape[0], self.in_channels, self.image_size, self.image_size)
        return pool_relu(self.conv2(pool_relu(self.conv1(x)))).flatten(1)


def dann_network(cnn: nn.Module) -> tuple[nn.Module, dict[str, str]]:
    """The DANN network of the matrix's CNN and the map of its parameter names to the CNN's.

    Parameters
    ----------
    cnn : TwoLayerCNN
        The matrix's ``cnn2`` (input (B, 784), logits (B, 10)); its conv layers become the feature extractor and
        its ``fc`` the task head (Ganin et al. 2016's DANN; FedMM paper §4 / official ``DANN`` network).

    Returns
    -------
    net : AdaptationNet
        Features :class:`CNNFeatures`, task head the CNN's ``fc`` (shared), DANN head with hidden widths
        :data:`DOMAIN_HIDDEN`.
    names : dict
        DANN parameter name → ``cnn2`` parameter name, for every parameter but h_ψ's (``adversary.*``).

    Raises
    ------
    ValueError
        For a model other than :class:`TwoLayerCNN` (MLR has no feature extractor: :func:`model_gap`).
    """
    from fedshift.algorithms.domain_adaptation import AdaptationNet

    if not isinstance(cnn, TwoLayerCNN):
        raise ValueError(f"the DANN network is built from the matrix's cnn2, got {type(cnn).__name__}")
    feats = CNNFeatures(cnn)
    net = AdaptationNet(feats, feats.out_dim, cnn.fc.out_features, "dann", task_hidden=(),
                        domain_hidden=DOMAIN_HIDDEN)
    net.classifier = nn.Sequential(cnn.fc)
    own = {id(p): n for n, p in cnn.named_parameters()}
    names = {n: own[id(p)] for n, p in net.named_parameters() if id(p) in own}
    return net.to(cnn.fc.weight.device), names


def cnn_params(params: Params, names: Mapping[str, str]) -> Params:
    """The ``cnn2`` parameters of DANN parameters (h_ψ dropped), by the map of :func:`dann_network`."""
    return {names[k]: v for k, v in params.items() if k in names}


def adaptation_clients(instance: Instance) -> list[Any]:
    """The clients as :class:`~fedshift.algorithms.sgda.AdaptationClient`: labelled rows and unlabelled target rows.

    Client i gets the target inputs the domain shift places on it (side information ``unlabelled_target``);
    their labels are never read (the shift does not give them).

    Returns
    -------
    list of AdaptationClient
        One per client of ``instance``: source ``x`` (n_i, 784) float32 and ``y`` (n_i,) int64, target inputs
        (t_i, 784) float32 (t_i = 0 on a client that holds none; FedMM paper §4, the unlabelled target domain).
    """
    from fedshift.algorithms.sgda import AdaptationClient

    held = {int(i): x for i, x in instance.side["unlabelled_target"]}
    out = []
    for c in instance.clients:
        tgt = held.get(c.client_id, c.x[:0])
        out.append(AdaptationClient(c.client_id, c.x, c.y, tgt))
    return out


def build_minimax(name: str, module: nn.Module, instance: Instance, train: Mapping[str, Any],
                  kwargs: Mapping[str, Any], seed: int) -> tuple[FederatedAlgorithm, Params, list[Any]]:
    """A DANN-family algorithm on the common budget: the algorithm, its w₀ and its clients (module docstring).

    Parameters
    ----------
    name : str
        Registered minimax algorithm (:func:`is_minimax`).
    module : TwoLayerCNN
        The matrix's CNN (on the device).
    instance : Instance
        A domain-shift seed.
    train : mapping
        The common round.
    kwargs : mapping
        Fixed settings and the grid value: ``nu`` (ν, the DANN weight; default 1.0, official ``coef``) and the
        factory's own (``mu``, ``eta3``, ...).
    seed : int
        w₀ = ``init_params(module, seed)`` (FedAvg's) and h_ψ from the same seed.

    Returns
    -------
    algorithm, params0, clients
        ``algorithm.eval_params`` returns ``cnn2`` parameters (:func:`cnn_params`).

    Raises
    ------
    ValueError
        For a model that is not ``cnn2``, or a keyword the factory rejects.
    """
    from fedshift.algorithms.fedavg import sample_clients
    from fedshift.algorithms.sgda import network_directions

    net, names = dann_network(module)
    dev = module.fc.weight.device
    w0 = init_params(module, seed, device=dev)
    params0 = {k: w0[names[k]] if k in names else v for k, v in init_params(net, seed, device=dev).items()}
    clients = adaptation_clients(instance)
    kw = dict(kwargs)
    nu = float(kw.pop("nu", 1.0))
    lr = float(kw.pop("client_lr", train["client_lr"]))
    batch = train["batch_size"]
    steps = train["local_epochs"] * math.ceil(max(c.num_source for c in clients) / batch)
    steps = 1 if name in ONE_LOCAL_STEP else steps
    cpr = min(train["clients_per_round"], len(clients))
    if name in FULL_PARTICIPATION:  # every client, the same gradients per round (module docstring)
        steps, cpr = max(1, round(steps * cpr / len(clients))), len(clients)
    kw |= {"local_steps": steps, "lr": (lr, lr)}
    context = registry.BuildContext(network_directions(net, nu=nu, batch_size=batch, steps=steps),
                                    client_ids=[c.client_id for c in clients])
    inner = registry.build(name, context, **kw)

    def apply(state: Any, all_clients: Sequence[Any], key: RoundKey):
        ids = sample_clients(key, len(all_clients), cpr)
        return inner.apply(state, [all_clients[i] for i in ids], key)

    alg = replace(inner, apply=apply, eval_params=lambda s: cnn_params(inner.eval_params(s), names))
    return alg, params0, clients
