"""FedMM: settings and declaration, read without importing :mod:`fedshift.algorithms.fedmm` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fedshift.algorithms.decl.sgda import DANN_CELL_SUPPLIES, DANNCellSettings
from fedshift.algorithms.declarations import POSITIVE, AlgorithmDeclaration, Count, Interval, Payload, Weight

__all__ = ["FedMMSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedMMSettings:
    """FedMM (Shen et al. 2023, Algorithm 1)."""

    local_steps: Count
    lr: Annotated[tuple[float, float], POSITIVE]
    mu: Annotated[tuple[float, float], POSITIVE]
    eta3: Weight = 1.0
    eta3_decay: Annotated[float, Interval.parse("[1, inf)")] = 1.0
    eta3_every: Count = 100


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fedmm", _A + "fedmm", "build_fedmm", FedMMSettings, cell=_A + "fedmm:matrix_cell",
                         needs=frozenset({"unlabelled_target"}), loop="own",
                         model_parts=frozenset({"features", "head"}), cell_settings=DANNCellSettings,
                         cell_supplies=DANN_CELL_SUPPLIES, builds_on="directions",
                         payload=Payload(1, 1, "discriminator")),
)
