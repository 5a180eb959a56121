"""Federated stochastic gradient descent ascent: FedAvgSGDA, FedProxSGDA and FedSGDA (FedMM's baselines).

Paper: Shen et al., *FedMM*, AAMAS 2023, §4.2 and Algorithm 3 (appendix): every client runs M local SGDA steps
on its own minimax objective f_i(ω, ψ) from the server model, descending ω and ascending ψ,

    ω ← ω − η₁ [∇_ω f_i(ω, ψ) + μ (ω − ω₀)],     ψ ← ψ + η₂ [∇_ψ f_i(ω, ψ) − μ (ψ − ψ₀)],

with μ = 0 (FedAvgSGDA) or μ > 0 (FedProxSGDA, official ``pgd.py``), and the server averages the clients'
models with equal weights (official ``trainer/fedavg.py``, ``trainer/fedprox.py``). FedSGDA (Peng et al.,
*Federated Adversarial Domain Adaptation*, ICLR 2020) is FedAvgSGDA with one local step per round.

The clients' local SGDA loop, their data and the direction of a client's objective are in
:mod:`fedshift.algorithms.sgda_local`; this module builds the algorithms on it (and the shift matrix's cell hooks).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from fedshift.algorithms.decl.sgda import DECLARATIONS, SGDAKind
from fedshift.algorithms.domain_adaptation import AdaptationNet
from fedshift.algorithms.registry import register
from fedshift.algorithms.sgda_local import (
    AdaptationClient,
    DirectionFactory,
    local_sgda,
    mean_params,
    network_directions,
)
from fedshift.core.base import FederatedAlgorithm, Params
from fedshift.core.rng import RoundKey

__all__ = ["SGDAState", "build_federated_sgda", "KINDS", "DOMAIN_HIDDEN", "CNNFeatures", "model_split", "dann_network",
           "cnn_params", "adaptation_clients", "dann_cell", "matrix_cell", "one_step_cell"]

#: Baseline kinds built by :func:`build_federated_sgda`.
KINDS = typing.get_args(SGDAKind)


@dataclass(frozen=True)
class SGDAState:
    """Server state of FedAvgSGDA / FedProxSGDA / FedSGDA: rounds done and the server model (ω₀, ψ₀)."""

    round: int
    params: Params


# μ: FedProxSGDA's proximal weight (> 0), absent (0) from the other two; FedSGDA takes one local step per round.
@register(DECLARATIONS[0])  # fedavg_sgda
@register(DECLARATIONS[1])  # fedprox_sgda
@register(DECLARATIONS[2])  # fedsgda
def build_federated_sgda(directions: DirectionFactory, *, kind: SGDAKind, local_steps: int, lr: tuple[float, float],
                         mu: float | tuple[float, float] = 0.0) -> FederatedAlgorithm[SGDAState]:
    """Build FedAvgSGDA, FedProxSGDA or FedSGDA (paper Algorithm 3; module docstring).

    Parameters
    ----------
    directions : DirectionFactory
        e.g. :func:`network_directions`.
    kind : {"fedavg_sgda", "fedprox_sgda", "fedsgda"}
        FedSGDA requires ``local_steps == 1``; FedAvgSGDA requires μ = 0 and FedProxSGDA μ > 0.
    local_steps : int
        M.
    lr : (η₁, η₂)
    mu : float or (μ₁, μ₂)
        FedProx penalty (official ``lambda1`` = 2.0).

    Returns
    -------
    FederatedAlgorithm[SGDAState]
        Every round all clients train (cross-silo); diagnostics ``loss`` (mean local f) and
        ``metric/drift`` (mean ‖θ_i − θ₀‖ over clients).

    Raises
    ------
    ValueError
        For an unknown kind or settings that contradict it.
    """
    mus = (float(mu), float(mu)) if np.isscalar(mu) else (float(mu[0]), float(mu[1]))

    def init(params: Params) -> SGDAState:
        return SGDAState(0, {k: v.detach().clone() for k, v in params.items()})

    def apply(state: SGDAState, clients: Sequence[AdaptationClient], key: RoundKey):
        models, losses = [], []
        for c in clients:
            p, loss = local_sgda(state.params, directions(c, key), steps=local_steps, lr=lr, mu=mus)
            models.append(p)
            losses.append(loss)
        drift = torch.stack([_dist(m, state.params) for m in models]).mean()
        return SGDAState(state.round + 1, mean_params(models)), {"loss": torch.stack(losses).mean(),
                                                                 "metric/drift": drift}

    return FederatedAlgorithm(kind, init, apply, lambda s: s.params, SGDAState)



def _mu_as_pair(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords as their declared ranges check them: one μ is the pair (μ, μ) (:func:`build_federated_sgda`)."""
    mu = kwargs.get("mu")
    return {**kwargs, "mu": (mu, mu)} if mu is not None and np.isscalar(mu) else kwargs


build_federated_sgda.range_values = _mu_as_pair

def _dist(a: Params, b: Params) -> torch.Tensor:
    return torch.sqrt(sum((a[k] - b[k]).pow(2).sum() for k in a))


# ---- the shift matrix's cell hooks (declared ``cell``): the DANN network of a CNN on a common budget ----------------
#: Hidden widths of the domain discriminator h_ψ (official FedMM toy domain head: one hidden layer of 100).
DOMAIN_HIDDEN = (100,)


class CNNFeatures(nn.Module):
    """ζ¹ of the DANN network: a :class:`~fedshift.models.TwoLayerCNN`'s conv layers, shared (not copied).

    Maps (n, c·s²) or (n, c, s, s) inputs to (n, 32 · side²) features, as :meth:`TwoLayerCNN.forward` before its
    linear layer.
    """

    def __init__(self, cnn: Any) -> None:
        super().__init__()
        self.conv1, self.conv2 = cnn.conv1, cnn.conv2
        self.in_channels, self.image_size = cnn.in_channels, cnn.image_size
        self.out_dim = cnn.fc.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        from fedshift.models import pool_relu

        x = x.reshape(x.shape[0], self.in_channels, self.image_size, self.image_size)
        return pool_relu(self.conv2(pool_relu(self.conv1(x)))).flatten(1)


def model_split(model: nn.Module) -> tuple[nn.Module, nn.Linear]:
    """The feature extractor and the classification head of ``model`` (its declaration's ``model_parts``).

    A :class:`~fedshift.models.TwoLayerCNN`: its conv layers (:class:`CNNFeatures`) and its linear ``fc``, both
    shared with ``model`` (training them trains it).

    Raises
    ------
    ValueError
        For a model with no feature extractor (multinomial logistic regression is a head alone).
    """
    from fedshift.models import TwoLayerCNN

    if not isinstance(model, TwoLayerCNN):
        raise ValueError(f"{type(model).__name__} has no feature extractor to split from its head")
    return CNNFeatures(model), model.fc


def dann_network(cnn: nn.Module) -> tuple[AdaptationNet, dict[str, str]]:
    """The DANN network of a CNN (Ganin et al. 2016; FedMM paper §4, official ``DANN`` network) and its names map.

    The CNN's conv layers are the feature extractor, its ``fc`` the task head (both shared), and the domain
    discriminator h_ψ an MLP of hidden widths :data:`DOMAIN_HIDDEN`.

    Returns
    -------
    net : AdaptationNet
    names : dict
        DANN parameter name → the CNN's parameter name, for every parameter but h_ψ's (``adversary.*``).

    Raises
    ------
    ValueError
        From :func:`model_split` for a model with no feature extractor.
    """
    feats, head = model_split(cnn)
    net = AdaptationNet(feats, feats.out_dim, head.out_features, "dann", task_hidden=(), domain_hidden=DOMAIN_HIDDEN)
    net.classifier = nn.Sequential(head)
    own = {id(p): n for n, p in cnn.named_parameters()}
    names = {n: own[id(p)] for n, p in net.named_parameters() if id(p) in own}
    return net.to(head.weight.device), names


def cnn_params(params: Params, names: dict[str, str]) -> Params:
    """The CNN's parameters of DANN parameters (h_ψ dropped), by the map of :func:`dann_network`."""
    return {names[k]: v for k, v in params.items() if k in names}


def adaptation_clients(instance: Any) -> list[AdaptationClient]:
    """A shift's clients as :class:`AdaptationClient`: labelled rows and the unlabelled target rows placed on them.

    Client i gets the target inputs of side information ``unlabelled_target`` (pairs (client id, inputs)); their
    labels are never read. Source ``x`` (n_i, d) float32, ``y`` (n_i,) int64; target inputs (t_i, d), t_i = 0 on
    a client that holds none (FedMM paper §4).
    """
    held = {int(i): x for i, x in instance.side["unlabelled_target"]}
    return [AdaptationClient(c.client_id, c.x, c.y, held.get(c.client_id, c.x[:0])) for c in instance.clients]


def dann_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int, *, nu: float = 1.0,
              one_step: bool = False, full_participation: bool = False
              ) -> tuple[FederatedAlgorithm, Params, list[AdaptationClient]]:
    """A DANN-family algorithm (FedAvgSGDA, FedProxSGDA, FedSGDA, FedMM) on the common budget of a cell.

    Shen et al. 2023 §4, Algorithms 1 and 3. The network is :func:`dann_network` of the cell's CNN; its w₀ is the
    CNN's ``init_params(module, seed)`` (FedAvg's) and h_ψ is initialised from the same seed; the evaluated model
    is the CNN without h_ψ (:func:`cnn_params`). Budget: ``clients_per_round`` clients sampled per round as FedAvg
    samples them (:func:`fedshift.algorithms.fedavg.sample_clients`: the same ids as FedAvg's in each round),
    M = local_epochs · ⌈n_max / B⌉ local SGDA steps (FedAvg's steps on the largest client), batches of B rows split
    between the client's source and target rows in proportion to its rows
    (:func:`~fedshift.algorithms.sgda_local.batch_split`), η₁ = η₂ = ``client_lr``.

    Parameters
    ----------
    name : str
        A registered algorithm whose factory takes :func:`network_directions` first.
    context : BuildContext
        The cell's model (``context.module``, a CNN: :func:`model_split`).
    instance : fedshift.shifts.Instance
        A seed of a shift that gives ``unlabelled_target``.
    train, settings : mapping
        The common round, and the method's fixed settings and grid value (``mu``, ``eta3``, ...; ``client_lr``
        wins over the common one).
    seed : int
    nu : float
        ν ≥ 0, the DANN weight of L₂ (official ``coef`` 1.0): f = L₁ − νL₂ also scales the discriminator's step
        (:func:`network_directions`).
    one_step : bool
        One local step per round (FedSGDA, the FedSGDA baseline of the FedMM paper: FedAvgSGDA with M = 1, spec
        §4.2 [open]): a comparison at equal *communication*, as the paper's.
    full_participation : bool
        Train every client each round with M' = max(1, round(M · clients_per_round / N)) local steps (FedMM,
        Algorithm 1: its server averages every client's primal-dual message, and the duals of clients left out
        do not cancel); a round then evaluates as many gradients as the others'. [ours]

    Returns
    -------
    algorithm, params0, clients

    Raises
    ------
    ValueError
        For a model with no feature extractor, or a keyword the factory rejects.
    """
    from fedshift.algorithms import registry
    from fedshift.algorithms.fedavg import sample_clients
    from fedshift.models import init_params

    module = context.module
    net, names = dann_network(module)
    dev = next(module.parameters()).device
    w0 = init_params(module, seed, device=dev)
    params0 = {k: w0[names[k]] if k in names else v for k, v in init_params(net, seed, device=dev).items()}
    clients = adaptation_clients(instance)
    kw = dict(settings)
    for k in ("clients_per_round", "local_epochs", "batch_size"):
        kw.pop(k, None)
    lr = float(kw.pop("client_lr", train["client_lr"]))
    batch = train["batch_size"]
    steps = 1 if one_step else train["local_epochs"] * math.ceil(max(c.num_source for c in clients) / batch)
    cpr = min(train["clients_per_round"], len(clients))
    if full_participation:
        steps, cpr = max(1, round(steps * cpr / len(clients))), len(clients)
    kw |= {"local_steps": steps, "lr": (lr, lr)}
    own = registry.BuildContext(network_directions(net, nu=float(nu), batch_size=batch, steps=steps),
                                client_ids=[c.client_id for c in clients])
    inner = registry.build(name, own, **kw)

    def apply(state: Any, all_clients: Sequence[Any], key: RoundKey):
        ids = sample_clients(key, len(all_clients), cpr)
        return inner.apply(state, [all_clients[i] for i in ids], key)

    alg = replace(inner, apply=apply, eval_params=lambda s: cnn_params(inner.eval_params(s), names))
    return alg, params0, clients


def matrix_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int, *, nu: float = 1.0
                ) -> tuple[FederatedAlgorithm, Params, list[AdaptationClient]]:
    """FedAvgSGDA / FedProxSGDA on a cell's common budget (:func:`dann_cell`, M local steps)."""
    return dann_cell(name, context, instance, train, settings, seed, nu=nu)


def one_step_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int, *, nu: float = 1.0
                  ) -> tuple[FederatedAlgorithm, Params, list[AdaptationClient]]:
    """FedSGDA on a cell's common budget: one local step per round (:func:`dann_cell` with ``one_step``)."""
    return dann_cell(name, context, instance, train, settings, seed, nu=nu, one_step=True)
