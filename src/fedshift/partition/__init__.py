"""Partitions as index maps: which examples each domain/client holds, from an explicit seed.

Small pure draws sharing label helpers; the draws by label counts (:mod:`.label_counts`) and the label-shift
federation (:mod:`.label_shift`) have their own modules.

Flower-style pure functions (``flwr_datasets.partitioner``): inputs are label/domain arrays and
an explicit seed, outputs are ``{name: sorted int64 index array}``; they never read files.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["partition_by_domain", "split_clients", "sparsity_partition", "dirichlet_partition", "label_marginals",
           "largest_remainder", "label_removal_partition", "domain_heterogeneity_partition"]


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


def _by_label(labels: np.ndarray, num_labels: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled example indices of each label."""
    return [rng.permutation(np.flatnonzero(labels == k)) for k in range(num_labels)]


def _check_labels(labels: np.ndarray, num_labels: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_labels):
        raise ValueError(f"labels must lie in [0, {num_labels}), got [{labels.min()}, {labels.max()}]")
    return labels


def _check_nonempty(parts: list[np.ndarray], what: str) -> list[np.ndarray]:
    empty = [i for i, p in enumerate(parts) if p.size == 0]
    if empty:
        raise ValueError(f"{what} leaves client(s) {empty} without examples; use more data or fewer clients")
    return parts


def sparsity_partition(
    labels: np.ndarray, *, num_clients: int, labels_per_client: int, num_labels: int, seed: int | Sequence[int],
    samples_per_label: int | None = None,
) -> tuple[list[np.ndarray], list[list[int]]]:
    """Sparsity sampling: every client holds C random labels, equally many examples of each, disjointly.

    Listo Zec et al. (2024, FedPALS) §5, after McMahan et al. (2017)'s pathological non-IID split:
    client i draws C distinct labels uniformly at random; a label chosen by m_k clients has its
    examples shuffled and cut into m_k disjoint shares; every client takes q examples of each of
    its labels, q = min over the chosen labels of ⌊N_k / m_k⌋ (capped by ``samples_per_label``), so
    all clients hold C·q examples and no example is held twice.

    Parameters
    ----------
    labels : ndarray of int, shape (N,)
        Label of every example of the pool.
    num_clients : int
        M (the target, when drawn by the same mechanism, is one of them).
    labels_per_client : int
        C, in [1, K].
    num_labels : int
        K.
    seed : int or sequence of int
        Seed of the label choice and the shuffles (``numpy.random.default_rng(seed)``).
    samples_per_label : int, optional
        Upper bound on q (smaller clients, e.g. for a quick run).

    Returns
    -------
    parts : list of ndarray
        Sorted example indices of each client.
    label_sets : list of list of int
        The C labels of each client, sorted.

    Raises
    ------
    ValueError
        If C is not in [1, K], ``num_clients`` < 1, or a client would be left empty.
    """
    labels = _check_labels(labels, num_labels)
    if not 1 <= labels_per_client <= num_labels:
        raise ValueError(f"labels_per_client (C) must be in [1, {num_labels}] (the number of labels), "
                         f"got {labels_per_client}")
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    rng = np.random.default_rng(seed)
    label_sets = [sorted(rng.choice(num_labels, size=labels_per_client, replace=False).tolist())
                  for _ in range(num_clients)]
    pools = _by_label(labels, num_labels, rng)
    holders = {k: [i for i, ls in enumerate(label_sets) if k in ls] for k in range(num_labels)}
    q = min(len(pools[k]) // len(holders[k]) for k in range(num_labels) if holders[k])
    if samples_per_label is not None:
        q = min(q, int(samples_per_label))
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k, ids in holders.items():
        for j, i in enumerate(ids):
            parts[i].append(pools[k][j * q : (j + 1) * q])
    out = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
    return _check_nonempty(out, "sparsity sampling"), label_sets


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``weights`` summing to ``total`` (Hamilton's method).

    Parameters
    ----------
    weights : ndarray, shape (K,)
        Non-negative, not all zero.
    total : int
        >= 0.

    Returns
    -------
    ndarray of int64, shape (K,)
        Zero wherever the weight is zero.
    """
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * total
    counts = np.floor(exact).astype(np.int64)
    short = int(total - counts.sum())
    if short:
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:short]] += 1
    return counts


def dirichlet_partition(
    labels: np.ndarray, *, num_clients: int, beta: float, num_labels: int, seed: int | Sequence[int],
    samples_per_client: int | None = None,
) -> list[np.ndarray]:
    """Dirichlet sampling: client i's label marginal p_i ~ Dir_K(β·1), disjoint examples.

    Listo Zec et al. (2024, FedPALS) §5, after Yurochkin et al. (2019). Client i asks for
    round(p_i · n) examples of each label (largest remainder), n = ``samples_per_client``
    (default ⌊N / M⌋); when the clients together ask for more examples of a label than exist,
    every request for that label is scaled down proportionally. Each label's shuffled examples are
    then dealt out in client order.

    Parameters
    ----------
    labels : ndarray of int, shape (N,)
    num_clients : int
        M.
    beta : float
        Concentration β > 0 (small: sparse, heterogeneous clients).
    num_labels : int
        K.
    seed : int or sequence of int
        Seed of the marginals and shuffles (``numpy.random.default_rng(seed)``).
    samples_per_client : int, optional
        n; default ⌊N / M⌋.

    Returns
    -------
    list of ndarray
        Sorted example indices of each client.

    Raises
    ------
    ValueError
        If β <= 0, ``num_clients`` < 1, or a client is left empty.
    """
    labels = _check_labels(labels, num_labels)
    if not beta > 0:
        raise ValueError(f"Dirichlet beta must be > 0, got {beta}")
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    rng = np.random.default_rng(seed)
    n = int(samples_per_client) if samples_per_client is not None else labels.size // num_clients
    marginals = rng.dirichlet(np.full(num_labels, float(beta)), size=num_clients)
    want = np.stack([largest_remainder(p, n) for p in marginals])  # (M, K)
    pools = _by_label(labels, num_labels, rng)
    supply = np.array([len(p) for p in pools])
    demand = want.sum(0)
    scale = np.where(demand > supply, supply / np.maximum(demand, 1), 1.0)
    counts = np.floor(want * scale).astype(np.int64)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for k in range(num_labels):
        start = 0
        for i in range(num_clients):
            parts[i].append(pools[k][start : start + counts[i, k]])
            start += counts[i, k]
    out = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
    return _check_nonempty(out, "Dirichlet sampling")


def label_marginals(labels: np.ndarray, parts: Sequence[np.ndarray], num_labels: int) -> np.ndarray:
    """Empirical label marginal S_i(Y) of each part.

    Parameters
    ----------
    labels : ndarray of int, shape (N,)
    parts : sequence of ndarray
        Example indices of each client (non-empty).
    num_labels : int
        K.

    Returns
    -------
    ndarray, shape (M, K)
        Rows on the simplex.
    """
    labels = np.asarray(labels)
    counts = np.stack([np.bincount(labels[p], minlength=num_labels) for p in parts]).astype(np.float64)
    return counts / counts.sum(1, keepdims=True)


def label_removal_partition(
    labels: np.ndarray, removed_labels: Sequence[int], *, small_client: int, small_fraction: float, seed: int,
) -> list[np.ndarray]:
    """FedPALS's PACS clients (App. A.3): a random split, one label removed per client, one client shrunk.

    The examples are shuffled and cut into ``len(removed_labels)`` near-equal parts; client j then
    drops every example of label ``removed_labels[j]``, and client ``small_client`` keeps a random
    ``small_fraction`` of what remains (the paper: labels 0, 1, 2; the client missing label 2 keeps
    10 %).

    Parameters
    ----------
    labels : ndarray of int, shape (N,)
    removed_labels : sequence of int
        One label per client.
    small_client : int
        Index of the client that is reduced.
    small_fraction : float
        In (0, 1].
    seed : int

    Returns
    -------
    list of ndarray of int64
        Sorted, disjoint index arrays, one per client.

    Raises
    ------
    ValueError
        For a fraction outside (0, 1], a ``small_client`` out of range, or a client left empty.
    """
    if not 0 < small_fraction <= 1:
        raise ValueError(f"small_fraction must be in (0, 1], got {small_fraction}")
    if not 0 <= small_client < len(removed_labels):
        raise ValueError(f"small_client must index one of the {len(removed_labels)} clients, got {small_client}")
    labels = np.asarray(labels)
    rng = np.random.default_rng([seed, 31])
    parts = []
    for j, part in enumerate(np.array_split(rng.permutation(labels.size), len(removed_labels))):
        keep = part[labels[part] != removed_labels[j]]
        if j == small_client:
            keep = rng.choice(keep, int(small_fraction * keep.size), replace=False)
        parts.append(np.sort(keep).astype(np.int64))
    return _check_nonempty(parts, "label-removal partition")


def domain_heterogeneity_partition(domains: np.ndarray, num_clients: int, *, iid: float, seed: int
                                   ) -> list[np.ndarray]:
    """Bai et al. (2024)'s heterogeneity split when there are more domains than clients (iWildCam).

    ``inouye-lab/FedDG_Benchmark`` ``src/splitter.py`` ``NonIIDSplitter`` (spec §5.6): the domains,
    largest first, are each given whole to the client with the fewest examples so far (the
    domain-separated split); each domain's examples, in a seeded random order, then go a fraction
    1 − ``iid`` to that client and ``iid`` spread evenly over all clients. ``iid = 0`` (FedPALS App. A.4:
    "heterogeneity set to the maximum") keeps domains whole; ``iid = 1`` is homogeneous.

    Parameters
    ----------
    domains : ndarray of int, shape (N,)
        Domain of every example (iWildCam: camera location).
    num_clients : int
        M; at most the number of domains.
    iid : float
        Bai et al.'s λ in [0, 1].
    seed : int

    Returns
    -------
    list of ndarray of int64
        Sorted, disjoint index arrays covering all examples, one per client.

    Raises
    ------
    ValueError
        For ``iid`` outside [0, 1], more clients than domains, or a client left empty.
    """
    if not 0 <= iid <= 1:
        raise ValueError(f"iid must be in [0, 1], got {iid}")
    domains = np.asarray(domains)
    names, counts = np.unique(domains, return_counts=True)
    if num_clients > names.size:
        raise ValueError(f"{num_clients} clients but only {names.size} domains: this split needs at least as many "
                         "domains as clients")
    load = np.zeros(num_clients, dtype=np.int64)
    owner = {}
    for d in names[np.argsort(-counts, kind="stable")]:
        c = int(np.argmin(load))
        owner[d] = c
        load[c] += counts[names == d][0]
    rng = np.random.default_rng([seed, 37])
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for d in names:
        idx = rng.permutation(np.flatnonzero(domains == d))
        spread = int(round(iid * idx.size))
        parts[owner[d]].append(idx[spread:])
        for c, chunk in enumerate(np.array_split(idx[:spread], num_clients)):
            parts[c].append(chunk)
    out = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
    return _check_nonempty(out, "domain-heterogeneity partition")
