"""Euclidean simplex projection against a cvxpy QP (random and edge-case vectors)."""

import cvxpy as cp
import numpy as np
import pytest
import torch

from fedshift.core.simplex import project_simplex


def qp_projection(v: np.ndarray) -> np.ndarray:
    x = cp.Variable(v.size)
    cp.Problem(cp.Minimize(cp.sum_squares(x - v)), [x >= 0, cp.sum(x) == 1]).solve(solver=cp.CLARABEL)
    return np.asarray(x.value)


def assert_is_projection(v: np.ndarray, got: np.ndarray) -> None:
    """Feasible, as close to v as the QP's solution (solver tolerance ~1e-5), and near it."""
    ref = qp_projection(v)
    assert got.min() >= 0 and abs(got.sum() - 1) < 1e-12
    assert np.sum((got - v) ** 2) <= np.sum((ref - v) ** 2) + 1e-9
    np.testing.assert_allclose(got, ref, atol=2e-4)


EDGE_CASES = [
    [0.5, 0.5],            # already on the simplex
    [1.0, 0.0, 0.0],       # a vertex
    [0.0, 0.0, 0.0],       # origin -> barycentre
    [5.0, 5.0, 5.0],       # ties
    [10.0, -10.0, 0.3],    # one dominant coordinate
    [-1.0, -2.0, -3.0],    # all negative
    [0.2, 0.2, 0.2],       # inside {x >= 0, sum <= 1}: must still be moved onto sum = 1
    [3.0],                 # p = 1
    [2.0, 0.6],            # the off-by-one rule (sum excluding u_j) over-estimates rho here
]


@pytest.mark.parametrize("v", EDGE_CASES)
def test_edge_cases_match_qp(v):
    v = np.asarray(v, dtype=np.float64)
    assert_is_projection(v, project_simplex(torch.tensor(v)).numpy())


def test_random_vectors_match_qp():
    rng = np.random.default_rng(0)
    for _ in range(40):
        p = int(rng.integers(2, 12))
        v = rng.normal(scale=rng.choice([0.1, 1.0, 10.0]), size=p)
        assert_is_projection(v, project_simplex(torch.tensor(v)).numpy())


def test_batched_rows_are_projected_independently():
    v = torch.randn(7, 5, dtype=torch.float64)
    rows = torch.stack([project_simplex(r) for r in v])
    torch.testing.assert_close(project_simplex(v), rows)


def test_off_by_one_variant_differs_and_ours_is_optimal():
    # the public copies' rule (cumulative sum excluding u_j) on this vector gives a point that is not
    # the projection; ours satisfies the KKT conditions.
    v = np.array([2.0, 0.6])
    u = np.sort(v)[::-1]
    css_excl = np.concatenate([[0.0], np.cumsum(u)[:-1]])
    rho_bad = max(j for j in range(len(u)) if u[j] + (1 - css_excl[j]) / (j + 1) > 0) + 1
    bad = np.maximum(v + (1 - np.cumsum(u)[rho_bad - 1]) / rho_bad, 0)
    assert abs(bad.sum() - 1) > 0.1  # the buggy rule leaves the simplex: [1.2, 0]
    np.testing.assert_allclose(project_simplex(torch.tensor(v)).numpy(), [1.0, 0.0])


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        project_simplex(torch.tensor([]))
    with pytest.raises(ValueError):
        project_simplex(torch.tensor([0.1, float("nan")]))
