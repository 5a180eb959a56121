"""DRFA: settings and declaration, read without importing :mod:`fedshift.algorithms.drfa` (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fedshift.algorithms.declarations import COUNT, AlgorithmDeclaration, ClientRound, Payload, Weight

__all__ = ["DRFASettings", "DECLARATIONS"]

_A = "fedshift.algorithms."


@dataclass(frozen=True, kw_only=True)
class DRFASettings(ClientRound):
    """DRFA: λ's step and the local steps per round (default: E epochs)."""

    lambda_lr: Weight
    local_steps: Annotated[int | None, COUNT] = None


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("drfa", _A + "drfa", "build_drfa", DRFASettings,
                         payload=Payload(2, 2)),  # over m: D gets w down, returns w^(τ) and w^(t'); U gets w^(t') down
)
