"""SCAFFOLD: settings and declaration, read without importing :mod:`fedshift.algorithms.scaffold` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from fedshift.algorithms.declarations import AlgorithmDeclaration, ClientRound, Step

__all__ = ["ScaffoldSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class ScaffoldSettings(ClientRound):
    """SCAFFOLD: a round with a plain server step size."""

    server_lr: Step = 1.0
    path: str = "auto"


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("scaffold", _A + "scaffold", "build_scaffold", ScaffoldSettings),
)
