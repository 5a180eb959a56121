"""Metrics over client populations of which a fraction is shifted (WAFL §6; the shift matrix's adversarial column).

A shifted population is scored over all clients' examples at once: a fraction f of the clients sees its examples
perturbed (e.g. by ℓ∞ PGD against the evaluated model), the rest sees them clean. Which clients are shifted is one
seeded permutation's prefix, so the shifted sets are nested in f and identical across methods for a seed.

Shared by a paper's robustness figures and tables and by the adversarial shift of :mod:`fedshift.shifts`, so that
neither imports the other.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["attacked_clients", "shifted_metrics"]


def attacked_clients(num_clients: int, fraction: float, seed: int, stream: int = 0) -> np.ndarray:
    """The ⌊fraction · m + ½⌋ shifted clients: one permutation's prefix per (seed, stream), so sets are nested.

    Stream 0 shifts the test sets; stream 1, an independent draw, the validation sets.
    """
    entropy = [seed, 0x5EED] + ([stream] if stream else [])
    perm = np.random.default_rng(np.random.SeedSequence(entropy)).permutation(num_clients)
    return np.sort(perm[: int(round(fraction * num_clients))])


def shifted_metrics(clean: list[tuple[torch.Tensor, torch.Tensor]], shifted: list[tuple[torch.Tensor, torch.Tensor]],
                    fractions: list[float], seed: int, stream: int = 0) -> list[dict[str, float]]:
    """Accuracy and loss over all clients' examples (test or validation) when a fraction of them is shifted.

    Parameters
    ----------
    clean, shifted : list of (loss, correct)
        Per client, per-example loss and correctness on the clean and on the PGD-perturbed data (a client may
        have none).
    fractions : list of float
        Fractions of shifted clients (0 … 0.8 in the paper).
    seed, stream : int
        Which clients are shifted (:func:`attacked_clients`).

    Returns
    -------
    list of dict
        ``{"fraction", "accuracy", "loss"}``: Σ correct / Σ n and the mean loss over all examples.
    """
    out = []
    for f in fractions:
        hit = set(attacked_clients(len(clean), f, seed, stream).tolist())
        rows = [shifted[i] if i in hit else clean[i] for i in range(len(clean))]
        n = sum(len(r[0]) for r in rows)
        out.append({"fraction": float(f), "accuracy": float(sum(r[1].sum().item() for r in rows) / n),
                    "loss": float(sum(r[0].sum().item() for r in rows) / n)})
    return out
