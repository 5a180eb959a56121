"""WAFL and its adversarial baselines: settings and declaration.

Read without importing :mod:`fedshift.algorithms.wafl` (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from fedshift.algorithms.declarations import (
    MODEL_EACH_WAY,
    NON_NEGATIVE,
    AlgorithmDeclaration,
    ClientRound,
    LocalPath,
    Weight,
)

__all__ = ["RobustKind", "Cost", "StepRule", "RobustSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."

#: The local update (the ``kind`` each registered name fixes): plain SGD, WAFL's surrogate, PGD or FGSM training.
RobustKind = Literal["fedavg", "wafl", "fedpgm", "fedfgsm"]
#: WAFL's transport-cost convention: the paper's γ‖ζ − z‖² (eq. 5) or the official code's (γ/2)‖ζ − z‖².
Cost = Literal["paper", "code"]
#: WAFL's inner step: α_in as given, or min(α_in, 1/(2cγ)), the stable step.
StepRule = Literal["fixed", "stable"]


@dataclass(frozen=True, kw_only=True)
class RobustSettings(ClientRound):
    """WAFL and its adversarial baselines on FedAvg's server.

    The last eight fields are the local perturbation's (:func:`fedshift.algorithms.wafl.make_perturb`).
    """

    snapshot_every: Annotated[int, NON_NEGATIVE] = 0
    l2: Weight = 0.0
    path: LocalPath = "auto"
    gamma: float = 0.0
    inner_lr: float = 1.0
    inner_steps: int = 10
    cost: Cost = "paper"
    step_rule: StepRule = "stable"
    eps: float = 0.0
    step: float = 0.0
    steps: int = 1


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("wafl", _A + "wafl", "build_robust_fedavg", RobustSettings, fixed={"kind": "wafl"},
                         bounds={"gamma": "[0, inf)", "inner_lr": "(0, inf)", "inner_steps": "[0, inf)"}, payload=MODEL_EACH_WAY),
    AlgorithmDeclaration("fedpgm", _A + "wafl", "build_robust_fedavg", RobustSettings, fixed={"kind": "fedpgm"},
                         bounds={"eps": "[0, inf)", "step": "(0, inf)", "steps": "[1, inf)"}, payload=MODEL_EACH_WAY),
    AlgorithmDeclaration("fedfgsm", _A + "wafl", "build_robust_fedavg", RobustSettings, fixed={"kind": "fedfgsm"},
                         bounds={"eps": "[0, inf)"}, payload=MODEL_EACH_WAY),
    AlgorithmDeclaration("robust_fedavg", _A + "wafl", "build_robust_fedavg", RobustSettings,
                         fixed={"kind": "fedavg"}, payload=MODEL_EACH_WAY),
)
