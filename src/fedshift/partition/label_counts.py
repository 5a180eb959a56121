"""Draws of examples by label counts: a label histogram to follow, or a table of counts per part and label.

Pure functions like :mod:`fedshift.partition`: inputs are label arrays, counts and an explicit generator; outputs are
sorted int64 index arrays. The target's test set and the Oracle's clients of the label-shift federation
(:mod:`fedshift.partition.label_shift`) are drawn with them.
"""

from __future__ import annotations

import numpy as np

from fedshift.partition import largest_remainder

__all__ = ["sample_with_marginal", "sample_label_counts", "split_label_counts"]


def sample_with_marginal(
    labels: np.ndarray, marginal: np.ndarray, size: int | None, rng: np.random.Generator,
    exclude: np.ndarray | None = None,
) -> np.ndarray:
    """Examples whose label histogram follows ``marginal`` (largest remainder), without replacement.

    Used for the target's test set and the Oracle's clients (FedPALS App. A.1).

    Parameters
    ----------
    labels : ndarray of int, shape (N,)
    marginal : ndarray, shape (K,)
        Label distribution to follow.
    size : int, optional
        Number of examples; None takes the largest size the available examples allow.
    rng : numpy Generator
    exclude : ndarray of int, optional
        Indices that must not be drawn.

    Returns
    -------
    ndarray of int64
        Sorted indices.

    Raises
    ------
    ValueError
        If ``size`` exceeds what the available examples allow for this marginal.
    """
    labels = np.asarray(labels)
    marginal = np.asarray(marginal, dtype=np.float64)
    pools = _available_by_label(labels, marginal.size, exclude)
    support = marginal > 0
    most = int(min(len(pools[k]) / marginal[k] for k in np.flatnonzero(support)))
    size = most if size is None else int(size)
    counts = largest_remainder(marginal, size)
    short = [k for k in range(marginal.size) if counts[k] > len(pools[k])]
    if short:
        raise ValueError(f"cannot draw {size} examples with this label marginal: labels {short} have too few "
                         f"examples (at most {most})")
    return _draw(pools, counts, rng)


def _available_by_label(labels: np.ndarray, num_labels: int, exclude: np.ndarray | None) -> list[np.ndarray]:
    """Indices of each label, in increasing order, without ``exclude``."""
    avail = np.ones(labels.size, dtype=bool)
    if exclude is not None:
        avail[np.asarray(exclude, dtype=np.int64)] = False
    return [np.flatnonzero(avail & (labels == k)) for k in range(num_labels)]


def _draw(pools: list[np.ndarray], counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.sort(np.concatenate([rng.choice(pools[k], size=counts[k], replace=False)
                                   for k in range(len(pools))])).astype(np.int64)


def sample_label_counts(
    labels: np.ndarray, counts: np.ndarray, rng: np.random.Generator, exclude: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Disjoint parts holding exactly ``counts[i, k]`` examples of label k, uniformly without replacement.

    Part after part, label after label, one ``rng.choice`` from the label's examples not yet drawn
    (in increasing index order): the same draws as successive :func:`sample_with_marginal` calls,
    each excluding the parts before it, when row i is that function's largest-remainder count vector.

    Parameters
    ----------
    labels : ndarray of int, shape (N,)
    counts : ndarray of int, shape (P, K)
        Examples wanted per part and label (>= 0).
    rng : numpy Generator
    exclude : ndarray of int, optional
        Indices that must not be drawn.

    Returns
    -------
    list of ndarray of int64
        P sorted, disjoint index arrays; part i has ``counts[i].sum()`` entries.

    Raises
    ------
    ValueError
        If the parts together ask a label for more examples than are available (before any draw).
    """
    labels = np.asarray(labels)
    counts = np.asarray(counts, dtype=np.int64)
    pools = _available_by_label(labels, counts.shape[1], exclude)
    need = counts.sum(0)
    short = [k for k in range(counts.shape[1]) if need[k] > len(pools[k])]
    if short:
        raise ValueError(f"cannot draw {need.tolist()} examples per label: labels {short} have only "
                         f"{[len(pools[k]) for k in short]} available")
    parts = []
    for row in counts:
        part = _draw(pools, row, rng)
        pools = [np.setdiff1d(pool, part, assume_unique=True) for pool in pools]
        parts.append(part)
    return parts


def split_label_counts(totals: np.ndarray, parts: int, rng: np.random.Generator) -> np.ndarray:
    """Split per-label totals over ``parts`` equal-size parts, each label as evenly as possible.

    Part i receives ⌊totals_k / parts⌋ or ⌈totals_k / parts⌉ examples of label k, and every part
    the same number of examples (``totals.sum()`` must be a multiple of ``parts``). The remainders
    r_k = totals_k mod parts are dealt round-robin, label after label, over the parts in a random
    order; since r_k < ``parts``, no part gets two of a label's spare examples, and since
    Σ r_k is a multiple of ``parts``, every part gets Σ r_k / ``parts`` of them. The column sums are
    the totals, so the parts together never ask a label for more than its total. Used for the
    FedPALS Oracle's clients (App. A.1), drawn jointly like T.

    Parameters
    ----------
    totals : ndarray of int, shape (K,)
        Examples of each label over all parts (>= 0).
    parts : int
        >= 1.
    rng : numpy Generator
        Orders the parts for the remainders; not used when every total divides evenly.

    Returns
    -------
    ndarray of int64, shape (parts, K)
        Column sums ``totals``, equal row sums.

    Raises
    ------
    ValueError
        If ``parts`` < 1 or ``totals.sum()`` is not a multiple of ``parts``.
    """
    totals = np.asarray(totals, dtype=np.int64)
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    if int(totals.sum()) % parts:
        raise ValueError(f"{int(totals.sum())} examples cannot be split into {parts} equal parts")
    table = np.tile(totals // parts, (parts, 1))
    spare = np.repeat(np.arange(totals.size), totals % parts)
    if spare.size:
        order = rng.permutation(parts)
        np.add.at(table, (order[np.arange(spare.size) % parts], spare), 1)
    return table
