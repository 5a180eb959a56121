"""The shift matrix's normalisation on fixed references (aggregate.references, normalised, aggregates): chance is 0
and the baseline's mean 1 in every column, so a method's normalised scores, IQM and intervals do not depend on
which other methods the pool holds, and the bootstrap resamples the baseline's reference with its seeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fedshift.papers.shift_matrix import aggregate

COLUMNS = [{"shift": "s1", "metric": "accuracy", "label": "s1: accuracy"},
           {"shift": "s2", "metric": "worst_domain_accuracy", "label": "s2: worst_domain_accuracy"},
           {"shift": "s3", "metric": "ratio", "label": "s3: ratio"}]


def _chosen(values: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """Tidy chosen rows from algorithm → column label → per-seed test values."""
    shift = {c["label"]: (c["shift"], c["metric"]) for c in COLUMNS}
    return pd.DataFrame([{"column": col, "shift": shift[col][0], "metric": shift[col][1], "algorithm": alg,
                          "seed": s, "grid": 0, "validation": v, "test": v}
                         for alg, cols in values.items() for col, seeds in cols.items()
                         for s, v in enumerate(seeds)])


def _params(algorithms: list[str]) -> dict:
    return {"columns": COLUMNS, "baseline": "fedavg", "algorithms": algorithms,
            "chance": {"s1": 0.1, "s2": 0.25, "s3": 0.5}}


RNG = np.random.default_rng(7)
POOL = {alg: {c["label"]: list(np.clip(level + 0.05 * RNG.standard_normal(5), 0, 1)) for c in COLUMNS}
        for alg, level in (("fedavg", 0.6), ("a", 0.7), ("b", 0.45))}
NEWCOMER = {c["label"]: [0.99, 0.98, 0.97, 0.99, 0.995] for c in COLUMNS}      # a new best everywhere
LOSER = {c["label"]: [0.0, 0.01, 0.0, 0.02, 0.0] for c in COLUMNS}             # a new worst everywhere


def test_the_normalisation_by_hand_on_a_tiny_frame():
    """score = (x − c) / (b − c): c = 1/K for an accuracy (any accuracy: worst-domain too), 0 for another metric,
    b the baseline's mean over its seeds; every value below recomputed by hand."""
    chosen = _chosen({"fedavg": {"s1: accuracy": [0.5, 0.7], "s2: worst_domain_accuracy": [0.45, 0.55],
                                 "s3: ratio": [0.8, 0.6]},
                      "x": {"s1: accuracy": [0.9, 0.1], "s2: worst_domain_accuracy": [0.25, 0.65],
                            "s3: ratio": [0.35, 1.05]}})
    ref = aggregate.references(chosen, _params(["fedavg", "x"])).set_index("column")
    assert ref.loc["s1: accuracy"].tolist() == pytest.approx([0.1, 0.6])
    assert ref.loc["s2: worst_domain_accuracy"].tolist() == pytest.approx([0.25, 0.5])
    assert ref.loc["s3: ratio"].tolist() == pytest.approx([0.0, 0.7])           # not an accuracy: 0, not 0.5
    norm = aggregate.normalised(chosen, _params(["fedavg", "x"])).set_index(["column", "algorithm", "seed"])["score"]
    assert norm["s1: accuracy", "x", 0] == pytest.approx((0.9 - 0.1) / (0.6 - 0.1))          # 1.6
    assert norm["s1: accuracy", "x", 1] == pytest.approx(0.0)                                # at chance
    assert norm["s2: worst_domain_accuracy", "x", 0] == pytest.approx(0.0)
    assert norm["s2: worst_domain_accuracy", "x", 1] == pytest.approx((0.65 - 0.25) / 0.25)  # 1.6
    assert norm["s3: ratio", "x", 0] == pytest.approx(0.5) and norm["s3: ratio", "x", 1] == pytest.approx(1.5)
    base = norm.xs("fedavg", level="algorithm").groupby(level="column").mean()
    assert base.to_numpy() == pytest.approx([1.0, 1.0, 1.0])                  # the baseline averages 1 everywhere
    # a column whose baseline is at or below chance has no scale: left out
    low = _chosen({"fedavg": {"s1: accuracy": [0.1, 0.05]}, "x": {"s1: accuracy": [0.3, 0.4]}})
    assert aggregate.normalised(low, _params(["fedavg", "x"])).empty


def test_adding_a_method_to_the_pool_moves_no_other_methods_scores_or_iqm():
    """The former normalisation (the pool's best − worst spread = 1) moved every score when a method joined; fixed
    references do not: every other method's normalised scores, IQM and its interval are bit-for-bit the same."""
    small = _params(["fedavg", "a", "b"])
    before_norm = aggregate.normalised(_chosen(POOL), small)
    before = aggregate.aggregates(_chosen(POOL), small).set_index("algorithm")
    for extra in (NEWCOMER, LOSER):
        pool = POOL | {"new": extra}
        big = _params(["fedavg", "a", "b", "new"])
        after_norm = aggregate.normalised(_chosen(pool), big)
        after = aggregate.aggregates(_chosen(pool), big).set_index("algorithm")
        pd.testing.assert_frame_equal(after_norm[after_norm["algorithm"] != "new"].reset_index(drop=True),
                                      before_norm.reset_index(drop=True), check_exact=True)
        pd.testing.assert_frame_equal(after.loc[["fedavg", "a", "b"]], before, check_exact=True)
        assert after.loc["new", "iqm"] > 1.2 if extra is NEWCOMER else after.loc["new", "iqm"] < 0.1


def test_the_bootstrap_resamples_the_baseline_reference():
    """A baseline whose seeds spread widely widens the method's IQM interval even where the method's own seeds are
    constant: the reference 1 (the baseline's mean) is resampled with the baseline's seeds."""
    label = "s1: accuracy"
    steady = {"x": {label: [0.7] * 6}}
    tight = aggregate.aggregates(_chosen(steady | {"fedavg": {label: [0.6] * 6}}), _params(["fedavg", "x"]))
    wide = aggregate.aggregates(_chosen(steady | {"fedavg": {label: [0.4, 0.8, 0.45, 0.75, 0.5, 0.7]}}),
                                _params(["fedavg", "x"]))
    t, w = tight.set_index("algorithm").loc["x"], wide.set_index("algorithm").loc["x"]
    assert t["iqm"] == pytest.approx((0.7 - 0.1) / 0.5) and t["iqm_low"] == pytest.approx(t["iqm_high"])
    assert w["iqm"] == pytest.approx(t["iqm"]) and w["iqm_high"] - w["iqm_low"] > 0.1
    # the interval is that of the reference: the percentile interval of (0.7 − c)/(mean of resampled b − c)
    rng = np.random.default_rng(0)
    b = np.array([0.4, 0.8, 0.45, 0.75, 0.5, 0.7])
    boot = (0.7 - 0.1) / (b[rng.integers(0, 6, (20000, 6))].mean(axis=1) - 0.1)
    assert w["iqm_low"] == pytest.approx(np.quantile(boot, 0.025), abs=0.03)
    assert w["iqm_high"] == pytest.approx(np.quantile(boot, 0.975), abs=0.03)
    # the baseline's own IQM: its runs normalised by their own (resampled) mean
    f = wide.set_index("algorithm").loc["fedavg"]
    assert f["iqm"] == pytest.approx(stats.trim_mean((b - 0.1) / (b.mean() - 0.1), 0.25))
    assert f["iqm_low"] < f["iqm"] < f["iqm_high"]
