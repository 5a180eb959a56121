"""Data of the AgnosticFedAvg experiments: the toy regression, and spreading domains over clients.

Ro et al. (2021) §3 name two domain types: *client partition* (each client holds one domain: EMNIST's
writers, high school or census) and *data partition* (a client holds several domains: a Stack Overflow
user's questions and answers). :func:`spread_over_clients` builds either from per-example domain ids.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DOMAIN_TYPES", "spread_over_clients", "toy_regression"]

DOMAIN_TYPES = ("client", "data")


def spread_over_clients(domain: np.ndarray, num_clients: int, domain_type: str, seed: int) -> list[np.ndarray]:
    """Indices of each client's examples.

    Parameters
    ----------
    domain : ndarray of int, shape (N,)
        Domain id of every example (0..p−1).
    num_clients : int
        M; at least p for the client partition, at most N.
    domain_type : {"client", "data"}
        "client": domain i gets ≈ M·N_i/N clients (at least one), and its examples, shuffled, are dealt
        to them in near-equal shares, so each client holds one domain. "data": all examples, shuffled,
        are dealt to the M clients in near-equal shares, so a client holds several domains in about the
        pooled proportions.
    seed : int
        NumPy seed of the shuffles.

    Returns
    -------
    list of ndarray
        M sorted index arrays, none empty.

    Raises
    ------
    ValueError
        Unknown ``domain_type``; too few examples or (client partition) fewer clients than domains.
    """
    if domain_type not in DOMAIN_TYPES:
        raise ValueError(f"domain_type must be one of {DOMAIN_TYPES}, got {domain_type!r}")
    domain = np.asarray(domain, dtype=np.int64)
    if num_clients < 1 or num_clients > len(domain):
        raise ValueError(f"num_clients must be in [1, {len(domain)}] (examples), got {num_clients}")
    rng = np.random.default_rng(seed)
    if domain_type == "data":
        return [np.sort(part) for part in np.array_split(rng.permutation(len(domain)), num_clients)]
    present = np.unique(domain)
    if num_clients < len(present):
        raise ValueError(f"client partition needs at least one client per domain: {num_clients} < {len(present)}")
    sizes = np.array([(domain == d).sum() for d in present], dtype=np.float64)
    share = np.maximum(1, np.floor(num_clients * sizes / sizes.sum())).astype(np.int64)
    while share.sum() < num_clients:  # largest remainders first
        share[np.argmax(num_clients * sizes / sizes.sum() - share)] += 1
    while share.sum() > num_clients:
        share[np.argmax(np.where(share > 1, share, 0))] -= 1
    out: list[np.ndarray] = []
    for d, m in zip(present, share, strict=True):
        idx = rng.permutation(np.flatnonzero(domain == d))
        if m > len(idx):
            raise ValueError(f"domain {d} has {len(idx)} examples for {m} clients")
        out += [np.sort(part) for part in np.array_split(idx, m)]
    return out


def toy_regression(*, num_domains: int, dim: int, points_per_domain: int, radius: float,
                   seed: int) -> dict[str, Any]:
    """Points of p domains in R^d whose minimax point is known in closed form (Ro et al. 2021, App. A).

    The paper's objective is min_w max_i ‖w − c_i‖², c_i the centre of domain i; with the per-example loss
    ‖w − y‖² the domain loss is ‖w − c_i‖² + s_i², so every domain gets the *same* zero-mean offsets
    (y = c_i + e_j, one set e of ``points_per_domain`` Gaussian offsets), which makes s_i² equal and
    leaves the minimax point unchanged. The first min(d + 1, p) centres are the vertices of a regular
    simplex of radius R centred at 0; the others lie inside the ball of radius R/2 [ours; FedJAX's toy
    data use d = 1, spec §2.5]. Hence the minimax point is w* = 0 and the maximising mixture weight puts
    1/(d + 1) on each vertex domain and 0 on the inner ones (unique when p ≥ d + 1).

    Returns
    -------
    dict
        ``y`` float32 (p·n, d), ``domain`` int64 (p·n,), ``centres`` (p, d), ``w_star`` (d,),
        ``lambda_star`` (p,).

    Raises
    ------
    ValueError
        For ``num_domains < d + 1`` (the minimax weights would not be unique), ``dim < 1``, fewer than 2
        points per domain or ``radius <= 0``.
    """
    if dim < 1 or num_domains < dim + 1 or points_per_domain < 2 or not radius > 0:
        raise ValueError(f"need dim >= 1, num_domains >= dim + 1, points_per_domain >= 2, radius > 0; got "
                         f"{dim}, {num_domains}, {points_per_domain}, {radius}")
    rng = np.random.default_rng(seed)
    k = dim + 1
    # regular simplex: the k standard basis vectors of R^k, centred, in an orthonormal basis of their span
    basis = np.eye(k) - 1.0 / k
    q, _ = np.linalg.qr(basis[:, :dim])
    vert = basis @ q
    vert = radius * vert / np.linalg.norm(vert, axis=1, keepdims=True)
    inner = rng.normal(size=(num_domains - k, dim))
    inner *= (radius * rng.uniform(0.1, 0.5, size=(num_domains - k, 1))) / np.linalg.norm(inner, axis=1, keepdims=True)
    centres = np.concatenate([vert, inner])
    e = rng.normal(size=(points_per_domain, dim))
    e -= e.mean(0)
    y = (centres[:, None, :] + e[None]).reshape(-1, dim)
    lam = np.zeros(num_domains)
    lam[:k] = 1.0 / k
    return {"y": y.astype(np.float32), "domain": np.repeat(np.arange(num_domains), points_per_domain),
            "centres": centres, "w_star": np.zeros(dim), "lambda_star": lam}
