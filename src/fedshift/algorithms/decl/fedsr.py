"""FedSR: settings and declaration, read without importing :mod:`fedshift.algorithms.fedsr` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fedshift.algorithms.declarations import AlgorithmDeclaration, ClientRound, Interval, Payload, Weight

__all__ = ["FedSRSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedSRSettings(ClientRound):
    """FedSR: the L2 and conditional-mutual-information penalties and the representation's width."""

    l2r: Weight
    cmi: Weight
    z_dim: Annotated[int, Interval.parse("[1, 4096]")] = 64


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fedsr", _A + "fedsr", "build_fedsr", FedSRSettings,
                         payload=Payload(1, 1, "representation")),
)
