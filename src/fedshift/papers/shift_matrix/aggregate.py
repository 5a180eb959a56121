"""The field's aggregates over the shift matrix's tasks (Agarwal et al., "Deep Reinforcement Learning at the Edge
of the Statistical Precipice", NeurIPS 2021; their library ``rliable``), for :mod:`.report`.

Per method the interquartile mean (IQM) of the normalised score over its (column, seed) runs and the probability of
improvement over the baseline, each with a stratified-bootstrap 95 % interval (seeds resampled within each column;
``scipy.stats.bootstrap`` with one sample per column, percentile intervals), over the blocks of
:func:`.ranking.blocks`. Normalisation per column on two fixed references (:func:`references`, :func:`normalised`):
chance (1/K) is 0 and the baseline's mean is 1, so a method's score does not move when another method joins or
leaves the pool; the bootstrap resamples the baseline's seeds with the method's, so the reference 1 is resampled
too.
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


def references(chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Each column's two fixed references: ``low`` (score 0) and ``high`` (score 1), neither read from the pool.

    ``low``: chance, 1/K of the column's shift (``params["chance"]``), for a metric that is an accuracy (its name
    contains "accuracy"; :func:`.ranking.validity` gates a shift whose baseline is at or below it); 0 for any
    other metric (every matrix metric is higher-better on [0, 1]). ``high``: the baseline's (``params["baseline"]``)
    mean test value over its seeds in the column. Neither depends on which other methods the matrix runs.

    Parameters
    ----------
    chosen : DataFrame
        :func:`.report.selected`'s rows (``column, algorithm, seed, test`` and, when known, ``shift, metric``).
    params : mapping
        ``baseline``; optional ``chance`` (shift → 1/K) and ``columns`` (label → shift and metric; without it a
        column's shift and metric are its rows' ``shift`` and ``metric``, else its label).

    Returns
    -------
    DataFrame
        ``column, low, high`` (``high`` NaN where the baseline has no value), one row per column of ``chosen``.
    """
    base, chance = params["baseline"], params.get("chance") or {}
    declared = {c["label"]: (c["shift"], c["metric"]) for c in params.get("columns", [])}
    rows = []
    for col, g in chosen.groupby("column", sort=False):
        shift, metric = declared.get(col) or (g["shift"].iloc[0] if "shift" in g else col,
                                              g["metric"].iloc[0] if "metric" in g else "accuracy")
        level = chance.get(shift, np.nan) if "accuracy" in str(metric) else 0.0
        own = g.loc[g["algorithm"] == base, "test"].astype(float).dropna()
        rows.append({"column": col, "low": float(level) if np.isfinite(level) else 0.0,
                     "high": float(own.mean()) if len(own) else np.nan})
    return pd.DataFrame(rows, columns=["column", "low", "high"])


def normalised(chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Each (column, algorithm, seed) test value on fixed references: chance 0, the baseline's mean 1.

    score = (x − c) / (b − c), c the column's chance level and b the baseline's mean over seeds there
    (:func:`references`): the baseline's runs average 1, a run at chance scores 0, and a method's scores depend on
    its own runs and the baseline's only, never on the rest of the pool (adding or dropping a method moves no
    other method's score). Agarwal et al. (2021) normalise each task by two fixed reference scores (random and
    human on Atari); here chance and FedAvg. A column without the baseline, or whose baseline is not above chance
    (b ≤ c: a gated shift), is left out.

    Returns
    -------
    DataFrame
        ``column, algorithm, seed, score``.
    """
    ref = references(chosen, params).set_index("column")
    out = []
    for col, g in chosen.groupby("column", sort=False):
        low, high = ref.loc[col, "low"], ref.loc[col, "high"]
        if not high > low:
            continue
        ok = g[g["test"].notna()]
        out += [{"column": col, "algorithm": a, "seed": int(sd), "score": (float(x) - low) / (high - low)}
                for a, sd, x in zip(ok["algorithm"], ok["seed"], ok["test"], strict=True)]
    return pd.DataFrame(out, columns=["column", "algorithm", "seed", "score"])


def _iqm(*columns: np.ndarray) -> float:
    """Interquartile mean of the pooled runs (``scipy.stats.trim_mean`` cutting 25 % at each end, as rliable)."""
    return float(stats.trim_mean(np.concatenate(columns), 0.25))


def _normalised_iqm(lows: list[float], own_reference: bool) -> Any:
    """IQM of the normalised score from raw runs, the references recomputed from the same (resampled) runs.

    ``own_reference`` (the baseline itself): k samples, column j's runs x_j, score (x_j − c_j)/(mean x_j − c_j);
    else 2k samples, the method's k columns then the baseline's k, score (x_j − c_j)/(mean b_j − c_j). In a
    bootstrap resample the baseline's seeds are drawn again, so its mean, the reference 1, moves with them.
    """
    k = len(lows)

    def statistic(*samples: np.ndarray) -> float:
        refs = samples if own_reference else samples[k:]
        return _iqm(*[(x - c) / (np.mean(b) - c) for x, b, c in zip(samples[:k], refs, lows, strict=True)])

    return statistic


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
    n/a cells have none), each run's score on the column's fixed references (:func:`normalised`); the probability of
    improvement P(X > Y) averaged over the columns both run in. Each has a stratified-bootstrap interval at
    ``params["confidence"]`` (:data:`BOOTSTRAP_RESAMPLES` resamples, the seeds of each column resampled within it,
    the method's and the baseline's each on their own, the baseline's mean, the reference 1, recomputed in every
    resample; seed 0 of NumPy's generator, so the table is reproducible). A method's row reads its own runs and the
    baseline's only: it is the same whichever other methods the pool holds.

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
    norm = normalised(chosen, params)
    ref = references(chosen, params).set_index("column")
    wide = chosen.pivot_table(index=["column", "seed"], columns="algorithm", values="test")
    rows = []
    for alg in params["algorithms"]:
        mine = norm[norm["algorithm"] == alg]
        if mine.empty:
            continue
        cols = [g["score"].to_numpy(dtype=float) for _, g in mine.groupby("column", sort=False)]
        iqm = _iqm(*cols)
        names = list(mine["column"].unique())
        raw = [wide.loc[c, alg].dropna().to_numpy(dtype=float) for c in names]
        lows = [float(ref.loc[c, "low"]) for c in names]
        refs = [] if alg == base else [wide.loc[c, base].dropna().to_numpy(dtype=float) for c in names]
        lo, hi = _interval(raw + refs, _normalised_iqm(lows, alg == base), confidence, 0)
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
            f"of the normalised score over each method's (column, seed) runs (per column chance, 1/K, = 0 and "
            f"{base}'s mean = 1: fixed references, so no score moves when a method joins or leaves the matrix), and "
            f"the probability that a run of the method beats a run of "
            f"{base} in the same column, averaged over the columns; stratified-bootstrap {level:g} % intervals "
            f"(seeds resampled within each column, {base}'s too, so its reference mean is resampled; "
            f"{BOOTSTRAP_RESAMPLES} resamples); each cell: the estimate "
            f"[its {level:g} % interval].\n\n"
            + t.to_markdown(index=False) + "\n")
