"""FedPALS: target-aware aggregation of client models under label shift.

Paper: E. Listo Zec, A. Breitholtz, F. D. Johansson. *Overcoming label shift in targeted federated
learning* (FedPALS), arXiv:2411.03799. The server knows the target label marginal T ∈ Δ_K, every
client's label marginal S_i ∈ Δ_K and sample count n_i, and aggregates client models with

    α^λ = argmin_{α ∈ Δ^{M−1}} ‖T − Σ_i α_i S_i‖²₂ + λ Σ_i α_i² / n_i          (eq. 7)

instead of FedAvg's n_i / N. The second term is 1/ESS(α), ESS(α) = 1 / Σ_i α_i²/n_i the effective
sample size of the weighting; λ → ∞ gives FedAvg's weights (Prop. 2), λ → 0 the projection of T
onto conv{S_i} with the largest ESS among exact matches. d(T, S) = min_α ‖T − Σ α_i S_i‖² is the
projection distance of §5. λ is given directly or found by binary search for a target ESS
fraction of N (§3.2). With partial participation α is solved over the round's participants
(App. B.3). The QP is solved with cvxpy (Clarabel).

The preliminary author code (``Breitholtz/FedDG_Benchmark``, papers spec §5.2) minimises an
unsquared norm with SciPy; this module follows the paper's squared form (spec §8).
"""

from __future__ import annotations

import functools
import importlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn

from fedshift.algorithms.decl.fedpals import DECLARATIONS
from fedshift.algorithms.fedavg import FedAvgState, build_fedavg
from fedshift.algorithms.registry import register
from fedshift.core.base import FederatedAlgorithm
from fedshift.core.simplex import check_marginal

if TYPE_CHECKING:
    import cvxpy as cp

__all__ = ["check_marginal", "fedpals_weights", "effective_sample_size", "projection_distance",
           "lambda_for_ess", "build_fedpals"]


def _cvxpy():
    """cvxpy, imported on the first solve.

    Every Snakemake parse of the workflow (it imports every paper, FedPALS included) and every matrix job imports this
    module, most without solving a QP; importing cvxpy costs them ~1.2 CPU-s alone, ~0.1–0.3 s once torch and scipy
    are loaded (measured with ``python -c "import torch, scipy.stats, pandas[, cvxpy]"``).
    """
    return importlib.import_module("cvxpy")


def _inputs(target: Any, marginals: Any, sizes: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = check_marginal(target, "target label marginal T")
    s = check_marginal(marginals, "client label marginals S")
    n = np.asarray(sizes, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] != t.shape[0]:
        raise ValueError(f"S must have shape (M, {t.shape[0]}), got {s.shape}")
    if n.shape != (s.shape[0],) or not (n > 0).all():
        raise ValueError(f"sizes must be {s.shape[0]} positive counts, got {n.tolist()}")
    return t, s, n


def _clean(alpha: np.ndarray) -> np.ndarray:
    a = np.clip(np.asarray(alpha, dtype=np.float64).ravel(), 0.0, None)
    return a / a.sum()


def _solve(problem: cp.Problem) -> None:
    cp = _cvxpy()
    # tight tolerances: for small λ the variance term is tiny next to the mismatch, and the
    # default gap tolerance (1e-8) would leave α undetermined along the flat directions (to ~1e-2)
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11, tol_ktratio=1e-9)
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"FedPALS QP: solver status {problem.status}")


def projection_distance(target: Any, marginals: Any) -> float:
    """d(T, S) = min_{α ∈ Δ} ‖T − Σ_i α_i S_i‖²₂ (§5), the squared distance from T to conv{S_i}.

    Parameters
    ----------
    target : array_like, shape (K,)
        T.
    marginals : array_like, shape (M, K)
        S_i as rows.

    Returns
    -------
    float
        Squared Euclidean distance (0 when T ∈ conv{S_i}).

    Raises
    ------
    ValueError
        For inputs that are not label distributions of matching size.
    """
    t, s, _ = _inputs(target, marginals, np.ones(np.asarray(marginals).shape[0]))
    cp = _cvxpy()
    a = cp.Variable(s.shape[0], nonneg=True)
    prob = cp.Problem(cp.Minimize(cp.sum_squares(t - s.T @ a)), [cp.sum(a) == 1])
    _solve(prob)
    alpha = _clean(a.value)
    return float(((t - s.T @ alpha) ** 2).sum())


def fedpals_weights(target: Any, marginals: Any, sizes: Any, lam: float) -> np.ndarray:
    """FedPALS aggregation weights α^λ (eq. 7).

    Parameters
    ----------
    target : array_like, shape (K,)
        Target label marginal T.
    marginals : array_like, shape (M, K)
        Client label marginals S_i (rows).
    sizes : array_like, shape (M,)
        Client sample counts n_i > 0.
    lam : float
        λ >= 0; ``math.inf`` gives FedAvg's n_i/N (Prop. 2). λ = 0 is the limit λ → 0⁺: the
        projection of T onto conv{S_i}, and among all weightings attaining it the one with the
        largest ESS (two QPs: the projection point, then the least Σ α_i²/n_i reaching it).

    Returns
    -------
    ndarray, shape (M,)
        α on the simplex.

    Raises
    ------
    ValueError
        If λ < 0 or NaN, or the inputs are not label distributions / positive counts of
        matching sizes.
    RuntimeError
        If the solver fails.
    """
    if not lam >= 0:
        raise ValueError(f"FedPALS lambda must be >= 0, got {lam}")
    t, s, n = _inputs(target, marginals, sizes)
    if math.isinf(lam):
        return n / n.sum()
    m = s.shape[0]
    cp = _cvxpy()
    a = cp.Variable(m, nonneg=True)
    mismatch = cp.sum_squares(t - s.T @ a)
    variance = cp.sum(cp.multiply(1.0 / n, cp.square(a)))
    if lam > 0:
        _solve(cp.Problem(cp.Minimize(mismatch + lam * variance), [cp.sum(a) == 1]))
        return _clean(a.value)
    # λ → 0⁺: the projection point p* of T onto conv{S_i} is unique; among the α that reach it,
    # take the one of least Σ α_i²/n_i (largest ESS).
    _solve(cp.Problem(cp.Minimize(mismatch), [cp.sum(a) == 1]))
    p_star = s.T @ _clean(a.value)
    _solve(cp.Problem(cp.Minimize(variance), [cp.sum(a) == 1, s.T @ a == p_star]))
    return _clean(a.value)


def effective_sample_size(alpha: Any, sizes: Any) -> float:
    """ESS(α) = 1 / Σ_i α_i² / n_i (§3.2); N = Σ n_i for FedAvg's weights.

    Parameters
    ----------
    alpha : array_like, shape (M,)
        Aggregation weights on the simplex.
    sizes : array_like, shape (M,)
        n_i > 0.

    Returns
    -------
    float
        Number of examples.
    """
    a = np.asarray(alpha, dtype=np.float64)
    n = np.asarray(sizes, dtype=np.float64)
    return float(1.0 / np.sum(a**2 / n))


def resolve_lambda(target: Any, marginals: Any, sizes: Any, *, lam: float | None = None,
                   ess_fraction: float | None = None) -> float:
    """FedPALS's λ (eq. 5) from a config: given as ``lam``, or as the ESS it must reach (``ess_fraction`` · N, §4.2).

    The one conversion every caller uses (the FedPALS pipeline's ``variant``, the shift matrix's grid values).

    Parameters
    ----------
    target, marginals, sizes
        As :func:`fedpals_weights`.
    lam : float, optional
        λ ≥ 0 itself (returned unchanged).
    ess_fraction : float, optional
        Target ESS / N in (0, 1] (:func:`lambda_for_ess`).

    Raises
    ------
    ValueError
        Unless exactly one of ``lam`` and ``ess_fraction`` is given; from :func:`lambda_for_ess`.
    """
    if (lam is None) == (ess_fraction is None):
        raise ValueError(f"give exactly one of lam and ess_fraction, got lam={lam!r}, ess_fraction={ess_fraction!r}")
    return lam if lam is not None else lambda_for_ess(target, marginals, sizes, ess_fraction)


def lambda_for_ess(target: Any, marginals: Any, sizes: Any, fraction: float, *, rtol: float = 1e-3,
                   max_iter: int = 100) -> float:
    """The λ whose weights α^λ have ESS = ``fraction`` · N, by binary search (§3.2).

    ESS(α^λ) increases with λ from ESS(α⁰) to N. A fraction at or below ESS(α⁰)/N returns 0; a
    fraction of 1 returns ``math.inf`` (FedAvg's weights, the only ones with ESS = N).

    Parameters
    ----------
    target, marginals, sizes
        As :func:`fedpals_weights`.
    fraction : float
        Target ESS / N in (0, 1].
    rtol : float
        Relative tolerance on the ESS.
    max_iter : int
        Bisection steps (on log λ).

    Returns
    -------
    float
        λ >= 0 (or inf).

    Raises
    ------
    ValueError
        If ``fraction`` is not in (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"ESS fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return math.inf
    n = np.asarray(sizes, dtype=np.float64)
    want = fraction * n.sum()

    def ess(lam: float) -> float:
        return effective_sample_size(fedpals_weights(target, marginals, n, lam), n)

    if ess(0.0) >= want * (1 - rtol):
        return 0.0
    hi = 1.0
    while ess(hi) < want:
        hi *= 4.0
        if hi > 1e15:
            return math.inf
    lo = 1e-12 if hi == 1.0 else hi / 4.0  # ess(lo) < want
    for _ in range(max_iter):
        mid = math.sqrt(lo * hi)
        e = ess(mid)
        if abs(e - want) <= rtol * want:
            return mid
        lo, hi = (mid, hi) if e < want else (lo, mid)
    return hi


@register(DECLARATIONS[0])
def build_fedpals(module: nn.Module, *, target_label_marginal: Any, client_label_marginals: Any, lam: float,
                  prox_mu: float = 0.0, prox_squared: bool = True,
                  **fedavg_kwargs: Any) -> FederatedAlgorithm[FedAvgState]:
    """Build FedPALS: FedAvg's round with α^λ of the round's participants as aggregation weights.

    Parameters
    ----------
    module : nn.Module
        The model.
    target_label_marginal : array_like, shape (K,)
        T.
    client_label_marginals : array_like, shape (M, K)
        S_i of all M clients (row i = client i).
    lam : float
        λ >= 0 or inf.
    prox_mu, prox_squared : float, bool
        FedProx's client objective (FedProx + FedPALS, §5.1 iWildCam); 0 for plain FedPALS.
    **fedavg_kwargs
        As :func:`fedshift.algorithms.fedavg.build_fedavg` (``clients_per_round``, ``local_epochs``,
        ``batch_size``, ``client_lr``, server optimiser, ``path``).

    Returns
    -------
    FederatedAlgorithm[FedAvgState]
        Its ``weights`` diagnostic is α^λ of the participants. With full participation α is solved
        once; otherwise once per distinct participant set (cached).

    Raises
    ------
    ValueError
        For invalid T, S or λ (before any training).
    """
    t = check_marginal(target_label_marginal, "target label marginal T")
    s = check_marginal(client_label_marginals, "client label marginals S")
    # λ = ∞ (the FedAvg limit, fedpals_weights) stays open to library callers; a config cannot write it (.inf is
    # refused by fedshift.validation.check_values), so the declared range is the finite [0, inf).

    @functools.lru_cache(maxsize=4096)
    def solve(ids: tuple[int, ...], sizes: tuple[float, ...]) -> np.ndarray:
        return fedpals_weights(t, s[list(ids)], sizes, lam)

    def weights(ids: list[int], sizes: np.ndarray) -> np.ndarray:
        order = np.argsort(ids)
        alpha_sorted = solve(tuple(int(ids[i]) for i in order), tuple(float(sizes[i]) for i in order))
        out = np.empty(len(ids))
        out[order] = alpha_sorted
        return out

    name = "fedprox+fedpals" if prox_mu > 0 else "fedpals"
    return build_fedavg(module, prox_mu=prox_mu, prox_squared=prox_squared, client_weights=weights, name=name,
                        **fedavg_kwargs)


def _lam_checked_as_finite(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords as their declared ranges check them.

    λ = ∞ (FedAvg's n_i/N, Prop. 2) is allowed on a direct call, checked as λ = 0 (a config keeps to the declared
    [0, inf)).
    """
    return {**kwargs, "lam": 0.0} if kwargs.get("lam") == math.inf else kwargs


build_fedpals.range_values = _lam_checked_as_finite


def matrix_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int, *,
                ess_fraction: float | None = None) -> tuple[FederatedAlgorithm, Any, Any]:
    """FedPALS on the common round: the shift matrix's cell hook (its declaration's ``cell``).

    FedPALS is FedAvg's round with α^λ aggregation weights; what a cell's data adds is λ given through the effective
    sample size it must reach (``ess_fraction`` · N, FedPALS §4.2), resolved by :func:`resolve_lambda` on the
    context's T (``target_label_marginal``) and S (``client_label_marginals``) and the clients' sizes.

    Parameters
    ----------
    name : str
        ``"fedpals"``.
    context : BuildContext
        Model, T and S of the cell.
    instance : fedshift.shifts.Instance
        The cell's seed (its clients).
    train, settings : mapping
        The common round, and the method's fixed settings and grid value (``lam``, ``prox_mu``, ...).
    seed : int
        w₀ = ``init_params(context.module, seed)``.
    ess_fraction : float in (0, 1], optional
        The ESS fraction λ must reach (instead of ``lam``).

    Returns
    -------
    algorithm, params0, clients
    """
    from fedshift.algorithms import registry
    from fedshift.models import init_params

    kw = dict(train) | dict(settings)
    if ess_fraction is not None:
        sizes = np.array([c.num_examples for c in instance.clients])
        kw["lam"] = resolve_lambda(context.target_label_marginal, context.client_label_marginals, sizes,
                                   ess_fraction=ess_fraction)
    device = next(context.module.parameters()).device
    return registry.build(name, context, **kw), init_params(context.module, seed, device=device), instance.clients
