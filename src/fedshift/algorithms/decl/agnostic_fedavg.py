"""AgnosticFedAvg and its FedAvg baselines: settings and declaration.

Read without importing :mod:`fedshift.algorithms.agnostic_fedavg` (no torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fedshift.algorithms.declarations import (
    MODEL_EACH_WAY,
    NON_NEGATIVE,
    AlgorithmDeclaration,
    ClientRound,
    Code,
    CodeDefault,
    Count,
    ServerOptimizer,
    Weight,
)

__all__ = ["DomainAlgorithm", "InitDomainWeights", "DomainFedAvgSettings", "AgnosticFedAvgSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."

#: How the server moves λ: the exponentiated-gradient step (``"eg"``), or not at all (``"none"``: λ stays λ_0).
DomainAlgorithm = Literal["eg", "none"]
#: λ_0: uniform, or a point of the simplex.
InitDomainWeights = Sequence[float] | Literal["uniform"]


@dataclass(frozen=True, kw_only=True)
class DomainFedAvgSettings(ServerOptimizer, ClientRound):
    """AgnosticFedAvg's FedAvg baselines on any per-example loss."""

    loss_fn: Code = CodeDefault("cross_entropy_loss")
    evaluate: Callable[[Any], dict[str, float]] | None = None
    eval_every: Annotated[int, NON_NEGATIVE] = 0
    name: str = "fedavg"


@dataclass(frozen=True, kw_only=True)
class AgnosticFedAvgSettings(DomainFedAvgSettings):
    """AgnosticFedAvg (Ro et al. 2021): λ's step, the count window and λ's start."""

    lambda_lr: Weight
    window_size: Count
    init_domain_weights: InitDomainWeights = "uniform"
    init_domain_window: Sequence[float] | None = None
    domain_algorithm: DomainAlgorithm = "eg"
    name: str = "agnostic_fedavg"


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("agnostic_fedavg", _A + "agnostic_fedavg", "build_agnostic_fedavg",
                         AgnosticFedAvgSettings,
                         needs=frozenset({"domain_ids"}), cell=_A + "agnostic_fedavg:matrix_cell", payload=MODEL_EACH_WAY),
    AlgorithmDeclaration("domain_fedavg", _A + "agnostic_fedavg", "build_domain_fedavg", DomainFedAvgSettings,
                         cell=_A + "agnostic_fedavg:baseline_cell", payload=MODEL_EACH_WAY),
)
