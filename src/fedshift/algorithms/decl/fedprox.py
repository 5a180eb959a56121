"""FedProx: settings and declaration, read without importing :mod:`fedshift.algorithms.fedprox` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, Code, RoundSettings, Weight

__all__ = ["FedProxSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedProxSettings(RoundSettings):
    """FedProx: μ and the norm's form, the rest passed to FedAvg."""

    mu: Weight
    squared: bool = True
    client_weights: Code | None = None
    name: str = "fedprox"


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fedprox", _A + "fedprox", "build_fedprox", FedProxSettings, payload=MODEL_EACH_WAY),
)
