"""FedNova: settings and declaration, read without importing :mod:`fedshift.algorithms.fednova` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, ServerStepRound, Weight

__all__ = ["FedNovaSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedNovaSettings(ServerStepRound):
    """FedNova: normalised averaging, with FedProx's μ on the client (η·μ < 1, a cross-knob bound)."""

    prox_mu: Weight = 0.0


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fednova", _A + "fednova", "build_fednova", FedNovaSettings,
                         bounds={"client_lr*prox_mu": "[0, 1)"}, payload=MODEL_EACH_WAY),
)
