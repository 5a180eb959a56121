"""The shift matrix's outputs from the runs' tidy ``metrics.csv`` rows (:meth:`ShiftMatrixPaper.evaluate`).

1. :func:`selected`: per column (shift, metric), algorithm and seed, the grid value best on the *validation*
   population among those tuned to the full budget (successive halving's survivor) and its *test* value (the fair
   protocol: each method tuned on a population drawn like the test one).
2. :func:`summary`: mean and Student-t confidence interval over seeds, and the paired difference Δ against the
   baseline by seed (same seed = same partition, initialisation and client draws) with its interval.
3. :func:`validity`: a shift whose baseline is at or below chance (1/K on its primary column's test mean), or
   whose baseline's validation score still moves between the last two rungs of the tuning (more than
   ``plateau_tolerance``), is reported with that reason and never ranked or tested.
   :func:`ranks`: one block per valid shift, its *primary* column (the first: the metric the tuning selects on;
   the other columns of a shift re-evaluate the same models and are not independent blocks); the baseline's copies
   (``copies``: the baseline under another name in a cell) are left out and shown as a measured noise floor
   (:func:`noise_floor`). Average rank, Friedman's test (``scipy.stats.friedmanchisquare``) and Nemenyi's critical
   difference (Demšar, JMLR 2006, §3.2.2), Wilcoxon signed-rank tests against the baseline over (block, seed)
   pairs (``scipy.stats.wilcoxon``) with Holm's correction (``statsmodels.stats.multitest.multipletests``).
4. :func:`aggregates`: the field's aggregates over many tasks (Agarwal et al., "Deep Reinforcement Learning at the
   Edge of the Statistical Precipice", NeurIPS 2021; their library ``rliable``): per method the interquartile mean
   (IQM) of the normalised score over its (column, seed) runs and the probability of improvement over the
   baseline, each with a stratified-bootstrap 95 % interval (seeds resampled within each column;
   ``scipy.stats.bootstrap`` with one sample per column, percentile intervals), over the same blocks as
   :func:`ranks`. Normalisation per column: the baseline's mean is 0 and the spread of the methods' means
   (best − worst) is 1 (:func:`normalised`).
5. :func:`tuning`: per method the configurations tried, the tuning's CPU-seconds and the grid-edge rate (the share
   of (column, seed) cells whose chosen value lies on an edge of its grid), flagged above 1/2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402

from fedshift.io import atomic_write  # noqa: E402
from fedshift.reporting import save_figure  # noqa: E402

__all__ = ["selected", "summary", "validity", "blocks", "noise_floor", "ranks", "matrix_table", "ranking_markdown",
           "wins_markdown", "normalised", "aggregates", "tuning", "on_edge", "write"]

#: Bootstrap resamples of the aggregate intervals (rliable's examples use 2,000 for intervals of this kind).
BOOTSTRAP_RESAMPLES = 2000
#: Grid-edge rate above which a method's row is flagged "grid too narrow" (its best
#: settings lie on the grid's edge more often than not: the range, not the method, may decide its score).
EDGE_FLAG = 0.5


def selected(metrics: pd.DataFrame, columns: list[Mapping[str, str]]) -> pd.DataFrame:
    """Test value of the grid value chosen on validation, per (column, algorithm, seed).

    Parameters
    ----------
    metrics : DataFrame
        Rows ``shift, algorithm, seed, grid, role, metric, value``.
    columns : list of mapping
        ``{"shift", "metric", "label"}`` per matrix column.

    Returns
    -------
    DataFrame
        ``column, shift, metric, algorithm, seed, grid, validation, test``. Only grid values tuned to the most
        rounds of their (algorithm, seed) and evaluated on test compete (``rounds``, when the rows have it:
        successive halving's survivor); ties on validation go to the first grid value; a seed whose every grid
        value diverged (NaN) keeps NaN.
    """
    out = []
    for col in columns:
        rows = metrics[(metrics["shift"] == col["shift"]) & (metrics["metric"] == col["metric"])
                       & metrics["role"].isin(["validation", "test"])]
        if rows.empty:
            continue
        index = ["algorithm", "seed", "grid"] + (["rounds"] if "rounds" in rows else [])
        wide = rows.pivot_table(index=index, columns="role", values="value", dropna=False).reset_index()
        for (alg, seed), g in wide.groupby(["algorithm", "seed"], sort=True):
            if "rounds" in g:
                g = g[g["rounds"] == g["rounds"].max()]
            g = g.sort_values("grid")
            ok = g[g["validation"].notna()]
            if ok["test"].notna().any():  # an eliminated value has no test score: only the tuned ones compete
                ok = ok[ok["test"].notna()]
            pick = ok.loc[ok["validation"].idxmax()] if not ok.empty else g.iloc[0]
            out.append({"column": col["label"], "shift": col["shift"], "metric": col["metric"], "algorithm": alg,
                        "seed": int(seed), "grid": int(pick["grid"]), "validation": pick["validation"],
                        "test": pick["test"] if not ok.empty else np.nan})
    return pd.DataFrame(out, columns=["column", "shift", "metric", "algorithm", "seed", "grid", "validation", "test"])


def _ci(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """Mean and half-width of the Student-t interval (NaN half-width for fewer than 2 values)."""
    v = values[~np.isnan(values)]
    if len(v) == 0:
        return np.nan, np.nan
    if len(v) < 2:
        return float(v.mean()), np.nan
    half = stats.t.ppf(0.5 + confidence / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
    return float(v.mean()), float(half)


def summary(chosen: pd.DataFrame, baseline: str, confidence: float = 0.95) -> pd.DataFrame:
    """Per (column, algorithm): mean test value, CI, and the paired Δ against ``baseline`` by seed with its CI.

    Returns
    -------
    DataFrame
        ``column, shift, metric, algorithm, seeds, mean, ci, delta, delta_ci, delta_crosses_zero, best``
        (``best``: highest mean of its column). Δ is NaN where the baseline has no value.
    """
    rows = []
    for col, g in chosen.groupby("column", sort=False):
        base = g[g["algorithm"] == baseline].set_index("seed")["test"]
        for alg, a in g.groupby("algorithm", sort=False):
            vals = a.set_index("seed")["test"]
            mean, ci = _ci(vals.to_numpy(dtype=float), confidence)
            common = vals.index.intersection(base.index)
            d = (vals.loc[common] - base.loc[common]).to_numpy(dtype=float)
            dm, dci = _ci(d, confidence) if len(common) else (np.nan, np.nan)
            rows.append({"column": col, "shift": a["shift"].iloc[0], "metric": a["metric"].iloc[0], "algorithm": alg,
                         "seeds": int(vals.notna().sum()), "mean": mean, "ci": ci, "delta": dm, "delta_ci": dci,
                         "delta_crosses_zero": bool(np.isnan(dci) or abs(dm) <= dci) if alg != baseline else True})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["best"] = df["mean"] == df.groupby("column")["mean"].transform("max")
    return df


def _cell(r: pd.Series, baseline: str) -> str:
    text = f"{100 * r['mean']:.1f} ± {100 * r['ci']:.1f}"
    if r["algorithm"] != baseline and not np.isnan(r["delta"]):
        text += f" (Δ {100 * r['delta']:+.1f} ± {100 * r['delta_ci']:.1f})"
    return f"**{text}**" if r["best"] else text


def matrix_table(summ: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Rows algorithms, columns the matrix's columns: "mean ± CI (Δ ± CI)" in %, best in bold, "n/a: why"."""
    labels = [c["label"] for c in params["columns"]]
    shift_of = {c["label"]: c["shift"] for c in params["columns"]}
    table = pd.DataFrame(index=list(params["algorithms"]), columns=labels, dtype=object)
    for alg in table.index:
        for lab in labels:
            reason = params["na"].get(alg, {}).get(shift_of[lab])
            hit = summ[(summ["algorithm"] == alg) & (summ["column"] == lab)] if not summ.empty else summ
            table.loc[alg, lab] = reason if reason else (_cell(hit.iloc[0], params["baseline"]) if len(hit) else "—")
    table.index.name = "algorithm"
    return table


def ranking_markdown(summ: pd.DataFrame, params: Mapping[str, Any]) -> str:
    """The matrix as a reader takes it in: per shift, its methods ranked, each with its interval.

    Parameters
    ----------
    summ : DataFrame
        :func:`summary`'s rows.
    params : mapping
        ``columns`` (each with ``shift``, ``label``; a shift's first column is its primary metric), ``algorithms``,
        ``baseline`` and ``na`` (algorithm → shift → "n/a: why").

    Returns
    -------
    str
        Per shift a bold line and a table (rank, algorithm, one column per metric of the shift: "mean ± CI (Δ ± CI)"
        in %, the best in bold, as :func:`matrix_table`), the rows ordered by the primary metric's mean, highest
        first (rank 1); the methods without a value follow in one line per reason. A shift gated by
        :func:`validity` (``params["gates"]``: shift → reason) is not ranked: its title gives the reason and its
        rows follow by name, rank "—". The same cells as
        :func:`matrix_table`, a table per shift (so each fits a page's width; the whole matrix is the ``.tex`` and
        ``.csv``).
    """
    table = matrix_table(summ, params)
    shifts = list(dict.fromkeys(c["shift"] for c in params["columns"]))
    parts = []
    for shift in shifts:
        labels = [c["label"] for c in params["columns"] if c["shift"] == shift]
        primary = labels[0]
        means = {} if summ.empty else (summ[summ["column"] == primary].set_index("algorithm")["mean"].dropna()
                                       .to_dict())
        gate = _gates(params).get(shift)
        ranked = sorted(means, key=(lambda a: a) if gate else (lambda a: (-means[a], a)))
        rows = [f"| {'—' if gate else i} | {a} | " + " | ".join(str(table.loc[a, lab]) for lab in labels) + " |"
                for i, a in enumerate(ranked, start=1)]
        heads = [lab.split(": ", 1)[1] if ": " in lab else lab for lab in labels]
        title = (f"**{shift}** (not ranked: {gate}; Δ against {params['baseline']} in points)" if gate else
                 f"**{shift}** (ranked by {heads[0]}; Δ against {params['baseline']} in points)")
        parts += [title, "",
                  "| rank | algorithm | " + " | ".join(heads) + " |", "|---:|---|" + "---|" * len(labels), *rows]
        reasons: dict[str, list[str]] = {}
        for alg in params["algorithms"]:
            why = params["na"].get(alg, {}).get(shift)
            if why:
                reasons.setdefault(why, []).append(alg)
        missing = [a for a in params["algorithms"] if a not in means and not params["na"].get(a, {}).get(shift)]
        parts += [""] + [f"- {', '.join(algs)}: {why}" for why, algs in reasons.items()]
        parts += [f"- {', '.join(missing)}: no value (—)"] if missing else []
        parts.append("")
    return "\n".join(parts)


def wins_markdown(summ: pd.DataFrame, params: Mapping[str, Any]) -> str:
    """What wins where: per column, the best mean and which methods beat or trail the baseline beyond the interval.

    Parameters
    ----------
    summ : DataFrame
        :func:`summary`'s rows.
    params : mapping
        ``columns`` (each with ``label``) and ``baseline``.

    Returns
    -------
    str
        A Markdown list, one item per column in the order of ``params["columns"]``: the highest mean ("mean ± CI" in
        %, ties listed together), then the methods whose paired interval of Δ against the baseline (at
        :func:`summary`'s confidence) lies wholly above 0 ("better than <baseline>") and wholly below 0 ("worse"),
        each with "Δ ± CI" in points; "none" when no interval clears 0. Columns without values are left out; a
        column of a gated shift (``params["gates"]``) says why it is not ranked or tested.
    """
    if summ.empty:  # no metrics at all (write() is called with an empty frame): summary() has no columns
        return ""
    base = params["baseline"]
    items = []
    gates = _gates(params)
    for col, shift in ((c["label"], c.get("shift")) for c in params["columns"]):
        g = summ[(summ["column"] == col) & summ["mean"].notna()]
        if g.empty:
            continue
        if shift in gates:
            items.append(f"- **{col}**: not ranked or tested: {gates[shift]}")
            continue
        top = g[g["best"]]
        best = ", ".join(f"{a} {100 * m:.1f} ± {100 * c:.1f}" for a, m, c in zip(top["algorithm"], top["mean"],
                                                                                  top["ci"], strict=True))
        decided = g[(g["algorithm"] != base) & ~g["delta_crosses_zero"]].sort_values("delta", ascending=False)

        def listed(rows: pd.DataFrame) -> str:
            return ", ".join(f"{a} (Δ {100 * d:+.1f} ± {100 * c:.1f})"
                             for a, d, c in zip(rows["algorithm"], rows["delta"], rows["delta_ci"], strict=True)
                             ) or "none"

        items.append(f"- **{col}**: best {best}; better than {base}: {listed(decided[decided['delta'] > 0])}; "
                     f"worse than {base}: {listed(decided[decided['delta'] < 0])}")
    return "\n".join(items)


def _primary(params: Mapping[str, Any]) -> dict[str, str]:
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
        :func:`selected`'s rows.
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
    for shift, label in _primary(params).items():
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


def _gates(params: Mapping[str, Any]) -> dict[str, str]:
    """Shift → reason of the shifts :func:`validity` (passed in ``params["gates"]``) keeps out of ranks and tests."""
    return dict(params.get("gates") or {})


def blocks(chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """The rows the tests and aggregates read: one column per valid shift (its primary), no pseudo-replicates.

    With ``params["columns"]``: the primary column of every shift that :func:`validity` did not gate
    (``params["gates"]``); without it every column of ``chosen`` is a block of its own.
    """
    if "columns" not in params:
        return chosen
    gates = _gates(params)
    keep = [label for shift, label in _primary(params).items() if shift not in gates]
    return chosen[chosen["column"].isin(keep)]


def _is_copy(alg: str, column: str, params: Mapping[str, Any]) -> bool:
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
        mask = np.array([_is_copy(alg, col, params) for col in wide.index.get_level_values("column")], dtype=bool)
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
    n_blocks = len(_primary(params)) - len(_gates(params)) if "columns" in params else len(means)
    copies = {a for a in params["algorithms"] if any(_is_copy(a, c, params) for c in means.index)}
    complete = [a for a in params["algorithms"] if a in means.columns and means[a].notna().all()
                and len(means) == n_blocks and a not in copies]
    not_ranked = {a: int(means[a].notna().sum()) if a in means.columns else 0 for a in params["algorithms"]
                  if a not in complete and a not in copies}
    m = means[complete]
    r = m.rank(axis=1, ascending=False, method="average")
    avg = r.mean(axis=0)
    k, n = len(complete), len(m)
    info: dict[str, Any] = {"k": k, "n_columns": n, "alpha": alpha, "not_ranked": not_ranked,
                            "copies": sorted(copies), "gates": _gates(params), "blocks": list(m.index),
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

    Over :func:`blocks` (one primary column per valid shift). Agarwal et al. (NeurIPS 2021), §4 and §5: the IQM
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
    chosen = blocks(chosen, params)
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
                     "copy_columns": sum(_is_copy(alg, c, params) for c in mine["column"].unique())})
    return pd.DataFrame(rows, columns=["algorithm", "columns", "runs", "iqm", "iqm_low", "iqm_high", "p_improvement",
                                       "p_low", "p_high", "copy_columns"])


def _number(v: Any) -> float | None:
    """A grid setting's value as a number (a list value, FedMM's μ pair, by its first entry), else None."""
    v = v[0] if isinstance(v, list | tuple) and v else v
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def edges(value: Mapping[str, Any], grid: list[Mapping[str, Any]]) -> dict[str, str]:
    """The keys of ``value`` that lie on an edge of ``grid``: key → ``"low"`` or ``"high"`` (its value the smallest
    or the largest of the at least two distinct numeric values the grid gives that key)."""
    out = {}
    for key, v in value.items():
        x = _number(v)
        values = {_number(g[key]) for g in grid if key in g} - {None}
        if x is not None and len(values) >= 2 and x in (min(values), max(values)):
            out[key] = "low" if x == min(values) else "high"
    return out


def on_edge(value: Mapping[str, Any], grid: list[Mapping[str, Any]]) -> bool:
    """Whether the grid value ``value`` lies on an edge of ``grid`` (:func:`edges`: some key at its smallest or
    largest value)."""
    return bool(edges(value, grid))


def tuning(metrics: pd.DataFrame, chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """Per algorithm: configurations tried, tuning CPU-seconds, grid-edge rate and its flag.

    ``configurations``: its grid's size (``params["grids"]``); ``cpu_seconds``: the ``role: tuning`` rows summed
    over its cells and seeds (this model's matrix); ``edge_rate``: the share of its (column, seed) cells whose
    chosen value lies on an edge of the grid (:func:`on_edge`), ``flag`` "grid too narrow" above
    :data:`EDGE_FLAG`; ``edges``: per key and side the share of cells chosen there (``"mu low 0.60"``: which way a
    grid would be widened). A value chosen at random from a grid of 3 values per key lies on an edge of one key
    with probability 2/3, of a 3 × 3 grid with 8/9: the rate is read against that, and the sides say more.

    Returns
    -------
    DataFrame
        ``algorithm, configurations, cpu_seconds, cells, edge_rate, flag, edges`` in the order of
        ``params["algorithms"]``.
    """
    cost = metrics[metrics["role"] == "tuning"] if "role" in metrics else metrics.iloc[:0]
    rows = []
    for alg in params["algorithms"]:
        grid = list(params["grids"].get(alg, []))
        mine = chosen[(chosen["algorithm"] == alg) & chosen["validation"].notna()]
        hits = [edges(grid[g], grid) for g in mine["grid"] if 0 <= g < len(grid)]
        rate = float(np.mean([bool(h) for h in hits])) if hits else np.nan
        sides = pd.Series([f"{k} {side}" for h in hits for k, side in h.items()]).value_counts()
        where = ", ".join(f"{k} {n / len(hits):.2f}" for k, n in sorted(sides.items(), key=lambda kv: (-kv[1], kv[0])))
        seconds = float(cost.loc[cost["algorithm"] == alg, "value"].sum()) if len(cost) else np.nan
        rows.append({"algorithm": alg, "configurations": len(grid), "cpu_seconds": seconds, "cells": len(hits),
                     "edge_rate": rate, "flag": "grid too narrow" if rate > EDGE_FLAG else "", "edges": where})
    return pd.DataFrame(rows, columns=["algorithm", "configurations", "cpu_seconds", "cells", "edge_rate", "flag",
                                       "edges"])


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


def tuning_markdown(tab: pd.DataFrame, params: Mapping[str, Any]) -> str:
    """The tuning table (:func:`tuning`) as a Markdown section."""
    if tab.empty:
        return ""
    t = tab.rename(columns={"configurations": "configs", "cpu_seconds": "tuning CPU-s",
                            "cells": "cells", "edge_rate": "grid-edge rate"})
    t["tuning CPU-s"] = [f"{v:.0f}" if np.isfinite(v) else "—" for v in tab["cpu_seconds"]]
    t["grid-edge rate"] = [f"{v:.2f}" if np.isfinite(v) else "—" for v in tab["edge_rate"]]
    return ("\nTuning on validation: per method the configurations of its grid (configs), the CPU-seconds of their "
            "tuning (every cell and seed of this model), the (column, seed) cells it was tuned in, the share of them "
            f"whose chosen value lies on an edge of its grid (\"grid too narrow\" above {EDGE_FLAG:g}; chance on a "
            "3 × 3 grid: 8/9) and, per key and side, the share of cells chosen at that edge.\n\n"
            + t.to_markdown(index=False) + "\n")


def _write_text(path: str, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def _heatmap(summ: pd.DataFrame, params: Mapping[str, Any]) -> plt.Figure:
    labels = [c["label"] for c in params["columns"]]
    algs = [a for a in params["algorithms"] if a != params["baseline"]]
    grid = np.full((len(algs), len(labels)), np.nan)
    cross = np.zeros_like(grid, dtype=bool)
    for i, a in enumerate(algs):
        for j, lab in enumerate(labels):
            hit = summ[(summ["algorithm"] == a) & (summ["column"] == lab)]
            if len(hit):
                grid[i, j] = 100 * hit["delta"].iloc[0]
                cross[i, j] = hit["delta_crosses_zero"].iloc[0]
    lim = max(1.0, float(np.nanmax(np.abs(grid)))) if np.isfinite(grid).any() else 1.0
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(labels), 1.0 + 0.4 * len(algs)))
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_facecolor("0.85")
    for i in range(len(algs)):
        for j in range(len(labels)):
            if np.isnan(grid[i, j]):
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="0.4")
                continue
            if cross[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.3",
                                           linewidth=0))
            ax.text(j, i, f"{grid[i, j]:+.1f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(algs)), algs, fontsize=7)
    fig.colorbar(im, ax=ax, label=f"Δ vs {params['baseline']} (points)")
    ax.set_title(f"Paired Δ vs {params['baseline']} (hatched: {100 * params.get('confidence', 0.95):.0f} % CI "
                 "crosses 0)", fontsize=8)
    return fig


def _rank_figure(table: pd.DataFrame, info: Mapping[str, Any]) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.25 * len(table)))
    y = np.arange(len(table))
    ax.scatter(table["average_rank"], y, color="k", zorder=3)
    for yi, (_, r) in zip(y, table.iterrows(), strict=True):
        ax.text(r["average_rank"], yi + 0.2, r["algorithm"], fontsize=7, ha="center")
    if np.isfinite(info["cd"]):
        lo = float(table["average_rank"].min()) if len(table) else 1.0
        ax.plot([lo, lo + info["cd"]], [-0.8, -0.8], color="C3", linewidth=3)
        ax.text(lo + info["cd"] / 2, -0.6, f"CD = {info['cd']:.2f}", color="C3", fontsize=7, ha="center")
    ax.set_yticks([])
    ax.set_xlabel("average rank over the shift columns (1 = best)")
    ax.set_ylim(-1.2, len(table))
    ax.set_title(f"Friedman p = {info['friedman_p']:.3g}, Nemenyi CD (α = {info['alpha']:.2f}) over "
                 f"{info['n_columns']} columns", fontsize=8)
    return fig


def write(name: str, metrics: pd.DataFrame, params: Mapping[str, Any], files: Mapping[str, str]) -> None:
    """Write output ``name`` (shift_matrix_table, shift_matrix_figure or shift_ranks) to ``files``."""
    if metrics.empty:
        metrics = pd.DataFrame(columns=["shift", "algorithm", "seed", "grid", "role", "metric", "value"])
    chosen = selected(metrics, params["columns"])
    valid = validity(chosen, metrics, params)
    params = dict(params) | {"gates": dict(zip(valid.loc[~valid["valid"], "shift"],
                                               valid.loc[~valid["valid"], "reason"], strict=True))}
    summ = summary(chosen, params["baseline"], float(params.get("confidence", 0.95)))
    if name == "shift_matrix_table":
        _write_text(files["csv"], summ.to_csv(index=False))
        table = matrix_table(summ, params)
        wins = wins_markdown(summ, params)
        level = 100 * float(params.get("confidence", 0.95))
        _write_text(files["md"], ranking_markdown(summ, params) + "\n" + (
            f"\nWhat wins where (best mean in %, and the paired {level:g} % interval of Δ against "
            f"{params['baseline']} wholly above or below 0, in points):\n\n{wins}\n" if wins else "")
            + aggregates_markdown(aggregates(chosen, params), params)
            + tuning_markdown(tuning(metrics, chosen, params), params))
        _write_text(files["tex"], table.style.to_latex())
    elif name == "shift_matrix_figure":
        _write_text(files["csv"], summ[["column", "algorithm", "delta", "delta_ci", "delta_crosses_zero"]]
                    .to_csv(index=False))
        save_figure(_heatmap(summ, params), files["pdf"], files["png"], dpi=150, tight=True)
    elif name == "shift_ranks":
        table, info = ranks(chosen, params)
        _write_text(files["csv"], table.to_csv(index=False))
        notes = "\n".join([f"- not ranked: {a} (a value in {c} of {info['n_columns']} blocks)"
                           for a, c in info["not_ranked"].items() if info["n_columns"]]
                          + [f"- shift {sh} left out of ranks and tests: {why}" for sh, why in info["gates"].items()]
                          + ([f"- left out of the tests: {', '.join(info['copies'])} ({params['baseline']} under "
                              "another name in at least one block; the noise floor below)"] if info["copies"] else []))
        head = (f"One block per shift, its primary column ({', '.join(info['blocks']) or 'none valid'}); the other "
                f"columns of a shift re-evaluate the same models. Friedman χ² = {info['friedman_statistic']:.3f}, p = "
                f"{info['friedman_p']:.3g}; Nemenyi CD = {info['cd']:.3f} (k = {info['k']}, N = {info['n_columns']} "
                f"blocks, α = {info['alpha']:.2f}); Wilcoxon over (block, seed) pairs, Holm-corrected.\n\n")
        floor = noise_floor(chosen, params)
        if len(floor):
            f = floor.assign(**{c: [f"{100 * v:+.2f}" if c == "mean_delta" else f"{100 * v:.2f}" for v in floor[c]]
                                for c in ("mean_delta", "sd_delta", "max_abs_delta")})
            notes += (f"\n\nNoise floor: {params['baseline']} against itself, the algorithms that are "
                      f"{params['baseline']} under another name in a block (left out of the tests), paired Δ by "
                      "seed in points:\n\n" + f.rename(columns={"mean_delta": "mean Δ", "sd_delta": "sd Δ",
                                                            "max_abs_delta": "max |Δ|"}).to_markdown(index=False))
        shown = table.rename(columns={"average_rank": "average rank", "wilcoxon_p": "Wilcoxon p", "holm_p": "Holm p",
                                      "differs_from_baseline": f"differs from {params['baseline']}"})
        _write_text(files["md"], head + shown.to_markdown(index=False) + "\n\n" + notes + "\n")
        save_figure(_rank_figure(table, info), files["pdf"], files["png"], dpi=150, tight=True)
    else:
        raise ValueError(f"unknown shift-matrix output {name!r}")
