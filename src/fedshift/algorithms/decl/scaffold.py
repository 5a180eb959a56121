"""SCAFFOLD: settings and declaration, read without importing :mod:`fedshift.algorithms.scaffold` (no torch)."""

from __future__ import annotations

from fedshift.algorithms.declarations import AlgorithmDeclaration, Payload, ServerStepRound

__all__ = ["DECLARATIONS"]

_A = "fedshift.algorithms."


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("scaffold", _A + "scaffold", "build_scaffold", ServerStepRound,
                         payload=Payload(2, 2)),  # x and c down, Δy_i and Δc_i up (Karimireddy et al. 2020, Alg. 1)
)
