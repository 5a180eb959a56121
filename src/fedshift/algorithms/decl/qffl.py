"""q-FFL: settings and declaration, read without importing :mod:`fedshift.algorithms.qffl` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fedshift.algorithms.declarations import MODEL_EACH_WAY, AlgorithmDeclaration, ClientRound, Interval, LocalPath

__all__ = ["QFFLSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class QFFLSettings(ClientRound):
    """q-FFL: the fairness exponent q."""

    q: Annotated[float, Interval.parse("[0, 100]")]
    path: LocalPath = "auto"


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("qffl", _A + "qffl", "build_qffl", QFFLSettings, payload=MODEL_EACH_WAY),
)
