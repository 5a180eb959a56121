"""FedAvgSGDA, FedProxSGDA and FedSGDA: settings and declaration.

Read without importing :mod:`fedshift.algorithms.sgda` (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedshift.algorithms.declarations import AlgorithmDeclaration, Payload

__all__ = ["SGDAKind", "SGDASettings", "DANNCellSettings", "DANN_CELL_SUPPLIES", "DECLARATIONS"]

_A = "fedshift.algorithms."

#: The baselines of :func:`fedshift.algorithms.sgda.build_federated_sgda` (the ``kind`` each registered name fixes).
SGDAKind = Literal["fedavg_sgda", "fedprox_sgda", "fedsgda"]


@dataclass(frozen=True, kw_only=True)
class SGDASettings:
    """FedAvgSGDA / FedProxSGDA / FedSGDA: M local SGDA steps with the step pair (η₁, η₂) and FedProx's μ."""

    local_steps: int
    lr: tuple[float, float]
    mu: float | tuple[float, float] = 0.0



@dataclass(frozen=True, kw_only=True)
class DANNCellSettings:
    """The shift matrix's DANN cell hooks (:func:`fedshift.algorithms.sgda.dann_cell`): the adversarial weight ν."""

    nu: float = 1.0


#: The factory keywords the DANN cell hooks set themselves (M local steps and the step pair from the common round).
DANN_CELL_SUPPLIES = frozenset({"local_steps", "lr"})

#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    *(AlgorithmDeclaration(name, _A + "sgda", "build_federated_sgda", SGDASettings, fixed={"kind": name},
                           bounds={"local_steps": steps, "lr": "(0, inf)", "mu": mu}, cell=_A + f"sgda:{cell}",
                           needs=frozenset({"unlabelled_target"}), loop="own",
                           model_parts=frozenset({"features", "head"}), cell_settings=DANNCellSettings,
                           cell_supplies=DANN_CELL_SUPPLIES, builds_on="directions",
                           payload=Payload(1, 1, "discriminator"))
      for name, steps, mu, cell in (("fedavg_sgda", "[1, inf)", "[0, 0]", "matrix_cell"),
                                    ("fedprox_sgda", "[1, inf)", "(0, inf)", "matrix_cell"),
                                    ("fedsgda", "[1, 1]", "[0, 0]", "one_step_cell"))),
)
