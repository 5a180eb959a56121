"""FedBN: settings and declaration, read without importing :mod:`fedshift.algorithms.fedbn` (no torch)."""

from __future__ import annotations

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, ClientRound

__all__ = ["DECLARATIONS"]

_A = "fedshift.algorithms."


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("fedbn", _A + "fedbn", "build_fedbn", ClientRound, loop="own",
                         payload=MODEL_EACH_WAY),
)
