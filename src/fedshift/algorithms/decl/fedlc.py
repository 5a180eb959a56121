"""FedLC: settings and declaration, read without importing :mod:`fedshift.algorithms.fedlc` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, ClientRound, Weight

__all__ = ["FedLCSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedLCSettings(ClientRound):
    """FedLC: τ of the logit calibration."""

    tau: Weight


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fedlc", _A + "fedlc", "build_fedlc", FedLCSettings, payload=MODEL_EACH_WAY),
)
