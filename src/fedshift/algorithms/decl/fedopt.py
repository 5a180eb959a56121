"""FedAdam, FedYogi and FedAdagrad: settings and declaration.

Read without importing :mod:`fedshift.algorithms.fedopt` (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from fedshift.algorithms.declarations import (
    MODEL_EACH_WAY,
    UNIT,
    AlgorithmDeclaration,
    ClientRound,
    LocalPath,
    Step,
)

__all__ = ["FedOptKind", "FedOptSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."

#: The adaptive server optimisers of Algorithm 2 (the ``kind`` each registered name fixes).
FedOptKind = Literal["adagrad", "yogi", "adam"]


@dataclass(frozen=True, kw_only=True)
class FedOptSettings(ClientRound):
    """FedAdam / FedYogi / FedAdagrad (Reddi et al. 2021, Algorithm 2)."""

    server_lr: Step = 0.01
    beta1: Annotated[float, UNIT] = 0.9
    beta2: Annotated[float, UNIT] = 0.99
    tau: Step = 0.001
    path: LocalPath = "auto"


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    *(AlgorithmDeclaration(name, _A + "fedopt", "build_fedopt", FedOptSettings, fixed={"kind": kind},
                          payload=MODEL_EACH_WAY)
      for name, kind in (("fedadam", "adam"), ("fedyogi", "yogi"), ("fedadagrad", "adagrad"))),
)
