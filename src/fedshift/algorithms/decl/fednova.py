"""FedNova: settings and declaration, read without importing :mod:`fedshift.algorithms.fednova` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from fedshift.algorithms.declarations import AlgorithmDeclaration, ClientRound, Step, Weight

__all__ = ["FedNovaSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedNovaSettings(ClientRound):
    """FedNova: normalised averaging, with FedProx's μ on the client (η·μ < 1, a cross-knob bound)."""

    server_lr: Step = 1.0
    path: str = "auto"
    prox_mu: Weight = 0.0


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fednova", _A + "fednova", "build_fednova", FedNovaSettings,
                         bounds={"client_lr*prox_mu": "[0, 1)"}),
)
