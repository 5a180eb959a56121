"""FedDyn: settings and declaration, read without importing :mod:`fedshift.algorithms.feddyn` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, ClientRound, LocalPath, Step

__all__ = ["FedDynSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class FedDynSettings(ClientRound):
    """FedDyn: α of the dynamic regulariser."""

    alpha: Step
    path: LocalPath = "auto"


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("feddyn", _A + "feddyn", "build_feddyn", FedDynSettings, payload=MODEL_EACH_WAY),
)
