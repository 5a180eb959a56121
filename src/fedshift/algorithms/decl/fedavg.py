"""FedAvg: settings and declaration, read without importing :mod:`fedshift.algorithms.fedavg` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, Code, RoundSettings, Weight

__all__ = ["FedAvgSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedAvgSettings(RoundSettings):
    """FedAvg (:func:`fedshift.algorithms.fedavg.build_fedavg`)."""

    prox_mu: Weight = 0.0
    prox_squared: bool = True
    client_weights: Code | None = None
    name: str = "fedavg"


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fedavg", _A + "fedavg", "build_fedavg", FedAvgSettings, payload=MODEL_EACH_WAY),
)
