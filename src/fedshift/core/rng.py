"""Deterministic random streams derived from (seed, round, client).

FedJAX's idea (``fedjax.core.prng``): never carry a mutable RNG across rounds; derive the stream
of every (seed, round[, client]) from integers. A run resumed from a checkpoint at round r
then draws exactly what an uninterrupted run draws, and the sequential and batched execution
paths see identical batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["RoundKey"]


@dataclass(frozen=True)
class RoundKey:
    """The randomness of one round of one run.

    Attributes
    ----------
    seed : int
        The run's seed (from the config / the ``seed`` wildcard), >= 0.
    round : int
        0-based round (step) index.
    """

    seed: int
    round: int

    def numpy(self, *stream: int) -> np.random.Generator:
        """A NumPy generator for ``(seed, round, *stream)``, e.g. ``stream = (client_id,)``."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, self.round, *stream]))

    def torch(self, *stream: int, device: str | torch.device = "cpu") -> torch.Generator:
        """A torch generator seeded from the same ``(seed, round, *stream)`` sequence."""
        seed = int(np.random.SeedSequence([self.seed, self.round, *stream]).generate_state(1, np.uint64)[0])
        g = torch.Generator(device=device)
        g.manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
        return g
