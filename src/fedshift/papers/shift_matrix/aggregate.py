"""The field's aggregates over the shift matrix's tasks (Agarwal et al., "Deep Reinforcement Learning at the Edge
of the Statistical Precipice", NeurIPS 2021; their library ``rliable``), for :mod:`.report`.

Per method the interquartile mean (IQM) of the normalised score over its (column, seed) runs and the probability of
improvement over the baseline, each with a stratified-bootstrap 95 % interval (seeds resampled within each column;
``scipy.stats.bootstrap`` with one sample per column, percentile intervals), over the blocks of
:func:`.ranking.blocks`. Normalisation per column: the baseline's mean is 0 and the spread of the methods' means
(best − worst) is 1 (:func:`normalised`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from fedshift.papers.shift_matrix import ranking

__all__ = ["BOOTSTRAP_RESAMPLES", "normalised", "aggregates", "aggregates_markdown"]

#: Bootstrap resamples of the aggregate intervals (rliable's examples use 2,000 for intervals of this kind).
BOOTSTRAP_RESAMPLES = 2000


def normalised(chosen: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Each (column, algorithm, seed) test value on the column's normalised scale: baseline 0, spread of means 1.

    score = (x − b) / (t − w), b the baseline's mean over seeds in the column, t and w the highest and the lowest
    mean of any method there: the methods' means lie in [−1, 1], the best at 1 − (b − w)/(t − w). Agarwal et al.
    (2021) normalise each task by reference scores; the references here are ours: the baseline, so that 0 means
    "as the baseline", and the column's spread rather than (best − baseline), which explodes in a column where
    the best barely beats the baseline. A column where every mean is equal, or without the baseline, is left
    out.

    Returns
    -------
    DataFrame
        ``column, algorithm, seed, score``.
    """
    out = []
    for col, g in chosen.groupby("column", sort=False):
        means = g.groupby("algorithm")["test"].mean().dropna()
        if baseline not in means:
            continue
        b, scale = means[baseline], means.max() - means.min()
        if not scale > 0:
            continue
        ok = g[g["test"].notna()]
        out += [{"column": col, "algorithm": a, "seed": int(sd), "score": (x - b) / scale}
                for a, sd, x in zip(ok["algorithm"], ok["seed"], ok["test"], strict=True)]
    return pd.DataFrame(out, columns=["column", "algorithm", "seed", "score"])


def _iqm(*columns: np.ndarray) -> float:
    """Interquartile mean of the pooled runs (``scipy.stats.trim_mean`` cutting 25 % at each end, as rliable)."""
    return float(stats.trim_mean(np.concatenate(columns), 0.25))


def _improvement(k: int) -> Any:
    """P(X > Y) averaged over k columns from 2k samples (X's k columns, then Y's): the Mann-Whitney U of each
    column over m·n (ties count one half), as rliable's ``probability_of_improvement``."""

    def statistic(*samples: np.ndarray) -> float:
        out = 0.0
        for x, y in zip(samples[:k], samples[k:], strict=True):
            diff = np.subtract.outer(x, y)
            out += float((diff > 0).mean() + 0.5 * (diff == 0).mean())
        return out / k

    return statistic


def _interval(samples: list[np.ndarray], statistic: Any, confidence: float, seed: int) -> tuple[float, float]:
    """Stratified-bootstrap percentile interval: each sample (one column's runs) resampled on its own."""
    if any(len(x) < 2 for x in samples):
        return np.nan, np.nan
    res = stats.bootstrap(tuple(samples), statistic, n_resamples=BOOTSTRAP_RESAMPLES, confidence_level=confidence,
                          method="percentile", vectorized=False, paired=False, random_state=seed)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def aggregates(chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Per algorithm: IQM of the normalised score and probability of improvement over the baseline, with intervals.

    Over :func:`.ranking.blocks` (one primary column per valid shift). Agarwal et al. (NeurIPS 2021), §4 and §5: the IQM
    over every (column, seed) run of the method (its columns:
    n/a cells have none); the probability of improvement P(X > Y) averaged over the columns both run in. Each
    has a stratified-bootstrap interval at ``params["confidence"]`` (:data:`BOOTSTRAP_RESAMPLES` resamples, the
    seeds of each column resampled within it; seed 0 of NumPy's generator, so the table is reproducible).

    Returns
    -------
    DataFrame
        ``algorithm, columns, runs, iqm, iqm_low, iqm_high, p_improvement, p_low, p_high, copy_columns`` in the
        order of ``params["algorithms"]`` (those with at least one value; ``copy_columns``: in how many of its
        columns it is the baseline under another name, where its P(improvement) is the noise floor).
    """
    confidence = float(params.get("confidence", 0.95))
    base = params["baseline"]
    chosen = ranking.blocks(chosen, params)
    norm = normalised(chosen, base)
    wide = chosen.pivot_table(index=["column", "seed"], columns="algorithm", values="test")
    rows = []
    for alg in params["algorithms"]:
        mine = norm[norm["algorithm"] == alg]
        if mine.empty:
            continue
        cols = [g["score"].to_numpy(dtype=float) for _, g in mine.groupby("column", sort=False)]
        iqm = _iqm(*cols)
        lo, hi = _interval(cols, _iqm, confidence, 0)
        p = p_lo = p_hi = np.nan
        if alg != base and alg in wide and base in wide:
            pairs = [(g[alg].dropna().to_numpy(), g[base].dropna().to_numpy())
                     for _, g in wide[[alg, base]].groupby(level="column", sort=False)]
            pairs = [(x, y) for x, y in pairs if len(x) and len(y)]
            if pairs:
                k = len(pairs)
                stat = _improvement(k)
                samples = [x for x, _ in pairs] + [y for _, y in pairs]
                p = stat(*samples)
                p_lo, p_hi = _interval(samples, stat, confidence, 0)
        rows.append({"algorithm": alg, "columns": len(cols), "runs": int(sum(len(c) for c in cols)), "iqm": iqm,
                     "iqm_low": lo, "iqm_high": hi, "p_improvement": p, "p_low": p_lo, "p_high": p_hi,
                     "copy_columns": sum(ranking.is_copy(alg, c, params) for c in mine["column"].unique())})
    return pd.DataFrame(rows, columns=["algorithm", "columns", "runs", "iqm", "iqm_low", "iqm_high", "p_improvement",
                                       "p_low", "p_high", "copy_columns"])


def aggregates_markdown(agg: pd.DataFrame, params: Mapping[str, Any]) -> str:
    """The aggregate table (:func:`aggregates`) as a Markdown section: IQM and P(improvement) with their intervals."""
    if agg.empty:
        return ""
    base, level = params["baseline"], 100 * float(params.get("confidence", 0.95))

    def ival(m: float, lo: float, hi: float) -> str:
        return "—" if np.isnan(m) else f"{m:.2f} [{lo:.2f}, {hi:.2f}]" if not np.isnan(lo) else f"{m:.2f}"

    names = [(f"{a} (copy of {base}: noise floor)" if c == n else f"{a} (copy of {base} in {c} of {n})") if c else a
             for a, c, n in zip(agg["algorithm"], agg["copy_columns"], agg["columns"], strict=True)]
    t = pd.DataFrame({"algorithm": names,
                      "IQM of normalised score": [ival(*r) for r in agg[["iqm", "iqm_low", "iqm_high"]].to_numpy()],
                      f"P(better than {base})": [ival(*r) for r in
                                                 agg[["p_improvement", "p_low", "p_high"]].to_numpy()],
                      "columns": agg["columns"], "runs": agg["runs"]})
    return (f"\nAggregates over the shifts (Agarwal et al., NeurIPS 2021), one primary column per shift that passes "
            f"the validity gates (the other columns of a shift re-evaluate the same models): the interquartile mean "
            f"of the normalised score over each method's (column, seed) runs (per column {base}'s mean = 0 and the "
            f"spread of the "
            f"methods' means, best − worst, = 1), and the probability that a run of the method beats a run of "
            f"{base} in the same column, averaged over the columns; stratified-bootstrap {level:g} % intervals "
            f"(seeds resampled within each column, {BOOTSTRAP_RESAMPLES} resamples); each cell: the estimate "
            f"[its {level:g} % interval].\n\n"
            + t.to_markdown(index=False) + "\n")
