"""FedPALS: settings and declaration, read without importing :mod:`fedshift.algorithms.fedpals` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, Code, Interval, RoundSettings, Weight

__all__ = ["FedPALSSettings", "FedPALSCellSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedPALSSettings(RoundSettings):
    """FedPALS: λ of the aggregation weights and an optional proximal term, the rest passed to FedAvg."""

    lam: Weight
    prox_mu: Weight = 0.0
    prox_squared: bool = True
    client_weights: Code | None = None
    name: str = "fedpals"



@dataclass(frozen=True, kw_only=True)
class FedPALSCellSettings:
    """The shift matrix's FedPALS hook: λ chosen for an effective sample size of ``ess_fraction`` of the round's."""

    ess_fraction: Annotated[float | None, Interval.parse("(0, 1]")] = None


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fedpals", _A + "fedpals", "build_fedpals", FedPALSSettings,
                         needs=frozenset({"target_label_marginal"}), cell=_A + "fedpals:matrix_cell",
                         cell_settings=FedPALSCellSettings, cell_supplies=frozenset({"lam"}), payload=MODEL_EACH_WAY),
)
