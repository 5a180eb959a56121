"""Partitions as index maps: which examples each domain/client holds, from an explicit seed.

Flower-style pure functions (``flwr_datasets.partitioner``): inputs are label/domain arrays and
an explicit seed, outputs are ``{name: sorted int64 index array}``; they never read files.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["partition_by_domain", "split_clients"]


def partition_by_domain(domain_ids: np.ndarray, domain_names: Sequence[str]) -> dict[str, np.ndarray]:
    """Group example indices by domain.

    Parameters
    ----------
    domain_ids : ndarray of int, shape (n,)
        Domain index of each example; -1 marks an example that belongs to no domain (dropped).
    domain_names : sequence of str, length p
        Name of domain k = ``domain_names[k]``.

    Returns
    -------
    dict[str, ndarray]
        ``{domain_names[k]: indices of the examples with domain k}`` in increasing order.

    Raises
    ------
    ValueError
        If an id is outside [-1, p) or a domain is empty.
    """
    ids = np.asarray(domain_ids)
    p = len(domain_names)
    if ids.size and (ids.min() < -1 or ids.max() >= p):
        raise ValueError(f"domain ids must lie in [-1, {p}), got range [{ids.min()}, {ids.max()}]")
    out = {name: np.flatnonzero(ids == k).astype(np.int64) for k, name in enumerate(domain_names)}
    empty = [name for name, idx in out.items() if idx.size == 0]
    if empty:
        raise ValueError(f"empty domain(s): {empty}")
    return out


def split_clients(indices: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """Split one domain's indices uniformly at random into ``num_clients`` near-equal parts.

    Parameters
    ----------
    indices : ndarray of int
        The domain's example indices.
    num_clients : int
        Number of clients (>= 1, <= len(indices)).
    seed : int
        Seed of the permutation (``numpy.random.default_rng(seed)``).

    Returns
    -------
    list of ndarray
        Sorted index arrays whose sizes differ by at most one and whose union is ``indices``.
    """
    if not 1 <= num_clients <= len(indices):
        raise ValueError(f"num_clients must be in [1, {len(indices)}], got {num_clients}")
    perm = np.random.default_rng(seed).permutation(np.asarray(indices))
    return [np.sort(part) for part in np.array_split(perm, num_clients)]
