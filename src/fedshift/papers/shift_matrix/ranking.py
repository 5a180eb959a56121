"""The shift matrix's validity gates, its blocks without pseudo-replication and its rank tests (:mod:`.report`).

* :func:`validity`: a shift whose baseline is at or below chance (1/K on its primary column's test mean), or whose
  baseline's validation score still moves between the last two rungs of the tuning (more than
  ``plateau_tolerance``), is reported with that reason and never ranked or tested (:func:`gated_shifts`).
* :func:`blocks`: one block per valid shift, its *primary* column (the first: the metric the tuning selects on; the
  other columns of a shift re-evaluate the same models and are not independent blocks).
* :func:`ranks`: average rank, Friedman's test (``scipy.stats.friedmanchisquare``) and Nemenyi's critical
  difference (Demšar, JMLR 2006, §3.2.2), Wilcoxon signed-rank tests against the baseline over (block, seed) pairs
  (``scipy.stats.wilcoxon``) with Holm's correction (``statsmodels.stats.multitest.multipletests``); the
  baseline's copies (``copies``: the baseline under another name in a cell, :func:`is_copy`) are left out and shown
  as a measured noise floor (:func:`noise_floor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

__all__ = ["primary_columns", "validity", "gated_shifts", "blocks", "is_copy", "noise_floor", "ranks"]


def primary_columns(params: Mapping[str, Any]) -> dict[str, str]:
    """Shift → its primary column's label (a shift's first column: the metric its tuning selects on)."""
    out: dict[str, str] = {}
    for c in params.get("columns", []):
        out.setdefault(c["shift"], c["label"])
    return out


def validity(chosen: pd.DataFrame, metrics: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Per shift: whether its cells may be ranked and tested, and why not.

    Two gates on the baseline (``params["baseline"]``) in the shift's primary column:

    * chance: its mean test value over seeds at or below ``params["chance"][shift]`` (1/K for K classes: a model
      that guesses uniformly; a constant predictor scores 0 on a target without its class), for a primary metric
      that is an accuracy (its name contains "accuracy"). A score below chance is a broken cell (e.g. a model
      still predicting one class), not a result;
    * plateau: where ``metrics`` gives the chosen configuration's own validation score at the rung before the full
      budget (``rung_value`` at ``rung_rounds``, :meth:`ShiftMatrixPaper.evaluate`), per seed its score at the full
      budget R minus that one; its mean over seeds beyond ± ``params["plateau_tolerance"]`` (a fraction; None:
      this gate off) means the chosen configuration's validation curve still moves when its budget triples
      (R/η → R rounds): "not at plateau". Rows without ``rung_value`` (runs evaluated before it was recorded; the
      other values' scores at that rung belong to other configurations) leave this gate unmeasured (NaN).

    Parameters
    ----------
    chosen : DataFrame
        :func:`.report.selected`'s rows.
    metrics : DataFrame
        The runs' tidy rows (``shift, algorithm, seed, grid, rounds, role, metric, value`` and, when recorded,
        ``rung_rounds, rung_value``).
    params : mapping
        ``columns``, ``baseline``, optional ``chance`` (shift → level) and ``plateau_tolerance``.

    Returns
    -------
    DataFrame
        ``shift, column, reference, chance, plateau_gap, valid, reason`` (``reference``: the baseline's test mean;
        ``plateau_gap``: the mean move R/η → R of the chosen configuration, NaN when not measurable; ``reason``
        empty when valid).
    """
    base, tol = params["baseline"], params.get("plateau_tolerance")
    rows = []
    for shift, label in primary_columns(params).items():
        metric = next(c["metric"] for c in params["columns"] if c["label"] == label)
        ref = chosen[(chosen["column"] == label) & (chosen["algorithm"] == base)]["test"].astype(float)
        mean = float(ref.mean()) if ref.notna().any() else np.nan
        chance = (params.get("chance") or {}).get(shift, np.nan) if "accuracy" in metric else np.nan
        gap = np.nan
        if "rung_value" in metrics and len(metrics):
            v = metrics[(metrics["shift"] == shift) & (metrics["algorithm"] == base) & (metrics["metric"] == metric)
                        & (metrics["role"] == "validation") & metrics["rung_value"].notna()]
            d = (v["value"] - v["rung_value"]).astype(float).dropna()
            gap = float(d.mean()) if len(d) else np.nan
        reason = ""
        if np.isnan(mean):
            reason = f"no value of the reference {base}"
        elif np.isfinite(chance) and mean <= chance:
            reason = (f"reference {base} at or below chance ({100 * mean:.1f} % ≤ {100 * chance:.1f} %, "
                      f"1/K): a broken cell, not a result")
        elif tol is not None and np.isfinite(gap) and abs(gap) > tol:
            reason = (f"reference {base} not at plateau (its chosen configuration's validation score moves "
                      f"{100 * gap:+.1f} points from the rung before the full budget to the full budget; tolerance "
                      f"± {100 * tol:.1f})")
        rows.append({"shift": shift, "column": label, "reference": mean, "chance": chance, "plateau_gap": gap,
                     "valid": not reason, "reason": reason})
    return pd.DataFrame(rows, columns=["shift", "column", "reference", "chance", "plateau_gap", "valid", "reason"])


def gated_shifts(params: Mapping[str, Any]) -> dict[str, str]:
    """Shift → reason of the shifts :func:`validity` (passed in ``params["gates"]``) keeps out of ranks and tests."""
    return dict(params.get("gates") or {})


def blocks(chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """The rows the tests and aggregates read: one column per valid shift (its primary), no pseudo-replicates.

    With ``params["columns"]``: the primary column of every shift that :func:`validity` did not gate
    (``params["gates"]``); without it every column of ``chosen`` is a block of its own.
    """
    if "columns" not in params:
        return chosen
    gates = gated_shifts(params)
    keep = [label for shift, label in primary_columns(params).items() if shift not in gates]
    return chosen[chosen["column"].isin(keep)]


def is_copy(alg: str, column: str, params: Mapping[str, Any]) -> bool:
    """Whether ``alg`` is the baseline under another name in ``column``'s shift (``params["copies"]``)."""
    shift = next((c["shift"] for c in params.get("columns", []) if c["label"] == column), column)
    return shift in (params.get("copies") or {}).get(alg, [])


def noise_floor(chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """The baseline against itself: per copy (``params["copies"]``), its paired Δ against the baseline by seed.

    Over the (block, seed) pairs of :func:`blocks` where the algorithm is a copy: the mean Δ, its standard
    deviation and the largest |Δ| (fractions). A method's Δ within this floor is no difference at all.

    Returns
    -------
    DataFrame
        ``algorithm, blocks, pairs, mean_delta, sd_delta, max_abs_delta``.
    """
    base, b = params["baseline"], blocks(chosen, params)
    wide = b.pivot_table(index=["column", "seed"], columns="algorithm", values="test")
    rows = []
    for alg in params.get("copies") or {}:
        if alg not in wide or base not in wide:
            continue
        mask = np.array([is_copy(alg, col, params) for col in wide.index.get_level_values("column")], dtype=bool)
        d = (wide[alg] - wide[base])[mask].dropna()
        if d.empty:
            continue
        rows.append({"algorithm": alg, "blocks": int(d.index.get_level_values("column").nunique()), "pairs": len(d),
                     "mean_delta": float(d.mean()), "sd_delta": float(d.std(ddof=1)) if len(d) > 1 else np.nan,
                     "max_abs_delta": float(d.abs().max())})
    return pd.DataFrame(rows, columns=["algorithm", "blocks", "pairs", "mean_delta", "sd_delta", "max_abs_delta"])


def ranks(chosen: pd.DataFrame, params: Mapping[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Average ranks (1 = best) over the blocks where every ranked algorithm has a value; tests.

    Blocks: :func:`blocks` (one primary column per valid shift). Ranked algorithms: those with a value in every
    block, less the baseline's copies (an algorithm that is the baseline under another name in any block: its
    difference is the noise floor, :func:`noise_floor`, not a method's). Friedman's test and Nemenyi's critical
    difference CD = q_α √(k(k+1)/(6N)) over the blocks (mean over seeds), q_α the studentized range quantile / √2
    (Demšar 2006, eq. after Table 5). Wilcoxon signed-rank against the baseline over the (block, seed) pairs,
    Holm-corrected over the algorithms.

    Returns
    -------
    DataFrame
        ``algorithm, average_rank, columns, wilcoxon_p, holm_p, differs_from_baseline`` sorted by rank.
    dict
        ``friedman_statistic, friedman_p, cd, k, n_columns, alpha, not_ranked`` (algorithm → columns it runs in).
    """
    alpha = 1 - float(params.get("confidence", 0.95))
    chosen = blocks(chosen, params)
    means = chosen.groupby(["column", "algorithm"])["test"].mean().unstack("algorithm")
    n_blocks = len(primary_columns(params)) - len(gated_shifts(params)) if "columns" in params else len(means)
    copies = {a for a in params["algorithms"] if any(is_copy(a, c, params) for c in means.index)}
    complete = [a for a in params["algorithms"] if a in means.columns and means[a].notna().all()
                and len(means) == n_blocks and a not in copies]
    not_ranked = {a: int(means[a].notna().sum()) if a in means.columns else 0 for a in params["algorithms"]
                  if a not in complete and a not in copies}
    m = means[complete]
    r = m.rank(axis=1, ascending=False, method="average")
    avg = r.mean(axis=0)
    k, n = len(complete), len(m)
    info: dict[str, Any] = {"k": k, "n_columns": n, "alpha": alpha, "not_ranked": not_ranked,
                            "copies": sorted(copies), "gates": gated_shifts(params), "blocks": list(m.index),
                            "friedman_statistic": np.nan, "friedman_p": np.nan, "cd": np.nan}
    if k >= 3 and n >= 2:
        stat, p = stats.friedmanchisquare(*[m[a].to_numpy() for a in complete])
        q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2)
        cd = float(q * np.sqrt(k * (k + 1) / (6 * n)))
        info |= {"friedman_statistic": float(stat), "friedman_p": float(p), "cd": cd}
    base = params["baseline"]
    paired = chosen.pivot_table(index=["column", "seed"], columns="algorithm", values="test")
    pvals = {}
    for a in complete:
        if a == base:
            continue
        d = (paired[a] - paired[base]).dropna().to_numpy()
        pvals[a] = float(stats.wilcoxon(d).pvalue) if len(d) and np.any(d != 0) else 1.0
    holm = dict(zip(pvals, multipletests(list(pvals.values()), method="holm")[1], strict=True)) if pvals else {}
    out = pd.DataFrame({"algorithm": complete, "average_rank": [float(avg[a]) for a in complete],
                        "columns": n, "wilcoxon_p": [pvals.get(a, np.nan) for a in complete],
                        "holm_p": [float(holm[a]) if a in holm else np.nan for a in complete]})
    out["differs_from_baseline"] = out["holm_p"] < alpha
    return out.sort_values("average_rank", kind="stable").reset_index(drop=True), info
