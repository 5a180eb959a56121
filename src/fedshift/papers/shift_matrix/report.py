"""The shift matrix's outputs from the runs' tidy ``metrics.csv`` rows (:meth:`ShiftMatrixPaper.evaluate`).

1. :func:`selected`: per column (shift, metric), algorithm and seed, the grid value best on the *validation*
   population and its *test* value (the fair protocol: each method tuned on a population drawn like the test one).
2. :func:`summary`: mean and Student-t confidence interval over seeds, and the paired difference Δ against the
   baseline by seed (same seed = same partition, initialisation and client draws) with its interval.
3. :func:`ranks`: average rank per algorithm over the columns every ranked algorithm runs in, Friedman's test and
   Nemenyi's critical difference (Demšar, JMLR 2006, §3.2.2), and Wilcoxon signed-rank tests against the
   baseline over (column, seed) pairs with Holm's correction (``scipy.stats``).
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

from fedshift.io import atomic_write  # noqa: E402
from fedshift.reporting import save_figure  # noqa: E402

__all__ = ["selected", "summary", "ranks", "matrix_table", "wins_markdown", "write"]


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
        ``column, shift, metric, algorithm, seed, grid, validation, test``. Ties on validation go to the first
        grid value; a seed whose every grid value diverged (NaN) keeps NaN.
    """
    out = []
    for col in columns:
        rows = metrics[(metrics["shift"] == col["shift"]) & (metrics["metric"] == col["metric"])]
        if rows.empty:
            continue
        wide = rows.pivot_table(index=["algorithm", "seed", "grid"], columns="role", values="value",
                                dropna=False).reset_index()
        for (alg, seed), g in wide.groupby(["algorithm", "seed"], sort=True):
            g = g.sort_values("grid")
            ok = g[g["validation"].notna()]
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
        each with "Δ ± CI" in points; "none" when no interval clears 0. Columns without values are left out.
    """
    if summ.empty:  # no metrics at all (write() is called with an empty frame): summary() has no columns
        return ""
    base = params["baseline"]
    items = []
    for col in (c["label"] for c in params["columns"]):
        g = summ[(summ["column"] == col) & summ["mean"].notna()]
        if g.empty:
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


def ranks(chosen: pd.DataFrame, params: Mapping[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Average ranks (1 = best) over the columns where every ranked algorithm has a value; tests.

    Ranked algorithms: those with a value in every column. Blocks of Friedman's test and Nemenyi's critical
    difference CD = q_α √(k(k+1)/(6N)) are the columns (mean over seeds), q_α the studentized range quantile / √2
    (Demšar 2006, eq. after Table 5). Wilcoxon signed-rank against the baseline over the (column, seed) pairs,
    Holm-corrected over the algorithms.

    Returns
    -------
    DataFrame
        ``algorithm, average_rank, columns, wilcoxon_p, holm_p, differs_from_baseline`` sorted by rank.
    dict
        ``friedman_statistic, friedman_p, cd, k, n_columns, alpha, not_ranked`` (algorithm → columns it runs in).
    """
    alpha = 1 - float(params.get("confidence", 0.95))
    means = chosen.groupby(["column", "algorithm"])["test"].mean().unstack("algorithm")
    complete = [a for a in params["algorithms"] if a in means.columns and means[a].notna().all()
                and len(means) == len(params["columns"])]
    not_ranked = {a: int(means[a].notna().sum()) if a in means.columns else 0 for a in params["algorithms"]
                  if a not in complete}
    m = means[complete]
    r = m.rank(axis=1, ascending=False, method="average")
    avg = r.mean(axis=0)
    k, n = len(complete), len(m)
    info: dict[str, Any] = {"k": k, "n_columns": n, "alpha": alpha, "not_ranked": not_ranked,
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
    holm = _holm(pvals)
    out = pd.DataFrame({"algorithm": complete, "average_rank": [float(avg[a]) for a in complete],
                        "columns": n, "wilcoxon_p": [pvals.get(a, np.nan) for a in complete],
                        "holm_p": [holm.get(a, np.nan) for a in complete]})
    out["differs_from_baseline"] = out["holm_p"] < alpha
    return out.sort_values("average_rank", kind="stable").reset_index(drop=True), info


def _holm(pvals: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values."""
    order = sorted(pvals, key=pvals.get)
    out, running = {}, 0.0
    for i, a in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * pvals[a]))
        out[a] = running
    return out


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
    summ = summary(chosen, params["baseline"], float(params.get("confidence", 0.95)))
    if name == "shift_matrix_table":
        _write_text(files["csv"], summ.to_csv(index=False))
        table = matrix_table(summ, params)
        wins = wins_markdown(summ, params)
        level = 100 * float(params.get("confidence", 0.95))
        _write_text(files["md"], table.to_markdown() + "\n" + (
            f"\nWhat wins where (best mean in %, and the paired {level:g} % interval of Δ against "
            f"{params['baseline']} wholly above or below 0, in points):\n\n{wins}\n" if wins else ""))
        _write_text(files["tex"], table.style.to_latex())
    elif name == "shift_matrix_figure":
        _write_text(files["csv"], summ[["column", "algorithm", "delta", "delta_ci", "delta_crosses_zero"]]
                    .to_csv(index=False))
        save_figure(_heatmap(summ, params), files["pdf"], files["png"], dpi=150, tight=True)
    elif name == "shift_ranks":
        table, info = ranks(chosen, params)
        _write_text(files["csv"], table.to_csv(index=False))
        notes = "\n".join(f"- not ranked: {a} (a value in {c} of {len(params['columns'])} columns)"
                          for a, c in info["not_ranked"].items())
        head = (f"Friedman χ² = {info['friedman_statistic']:.3f}, p = {info['friedman_p']:.3g}; Nemenyi CD = "
                f"{info['cd']:.3f} (k = {info['k']}, N = {info['n_columns']} columns, α = {info['alpha']:.2f})\n\n")
        _write_text(files["md"], head + table.to_markdown(index=False) + "\n\n" + notes + "\n")
        save_figure(_rank_figure(table, info), files["pdf"], files["png"], dpi=150, tight=True)
    else:
        raise ValueError(f"unknown shift-matrix output {name!r}")
