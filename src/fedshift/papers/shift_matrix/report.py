"""The shift matrix's outputs from the runs' tidy ``metrics.csv`` rows (:meth:`ShiftMatrixPaper.evaluate`).

1. :func:`selected`: per column (shift, metric), algorithm and seed, the grid value best on the *validation*
   population among those tuned to the full budget (successive halving's survivor) and its *test* value (the fair
   protocol: each method tuned on a population drawn like the test one).
2. :func:`summary`: mean and Student-t confidence interval over seeds, and the paired difference Δ against the
   baseline by seed (same seed = same partition, initialisation and client draws) with its interval.
3. :func:`.ranking.validity` gates a shift whose baseline is at or below chance or not at plateau (never ranked or
   tested); :func:`.ranking.ranks`: one block per valid shift (its primary column), average rank, Friedman's test,
   Nemenyi's critical difference, Wilcoxon signed-rank tests against the baseline with Holm's correction; the
   baseline's copies are a measured noise floor (:func:`.ranking.noise_floor`).
4. :func:`.aggregate.aggregates`: the field's aggregates over many tasks (Agarwal et al., NeurIPS 2021): per method
   the interquartile mean of the normalised score and the probability of improvement over the baseline, with
   stratified-bootstrap intervals, over the same blocks as the ranks.
5. :func:`.tuning_table.tuning`: per method the configurations tried, the tuning's CPU-seconds and the grid-edge
   rate, flagged above 1/2.

This module writes the tables, Markdown and figures (:func:`write`); 3 to 5 compute in their own modules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from fedshift.io import atomic_write  # noqa: E402
from fedshift.papers.shift_matrix import aggregate, costs, ranking, tuning_table  # noqa: E402
from fedshift.reporting import save_figure  # noqa: E402

__all__ = ["selected", "summary", "matrix_table", "ranking_markdown", "wins_markdown", "per_seed", "RUNS_COLUMNS",
           "heading", "write"]


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


#: The per-seed table's columns (:func:`per_seed`; ``shift_matrix_runs.csv``).
RUNS_COLUMNS = ["model", "column", "shift", "metric", "algorithm", "seed", "grid", "configuration", "validation",
                "test", "rounds", "baseline", "baseline_copy", "gate", "trace"]


def per_seed(metrics: pd.DataFrame, chosen: pd.DataFrame, params: Mapping[str, Any]) -> pd.DataFrame:
    """The matrix's per-seed values: what every mean, interval, Δ, rank and aggregate is computed from.

    Parameters
    ----------
    metrics : DataFrame
        The runs' tidy rows (:meth:`ShiftMatrixPaper.evaluate`) of one model.
    chosen : DataFrame
        :func:`selected` of ``metrics``.
    params : mapping
        The output's params: ``model``, ``baseline``, ``copies`` (algorithm → the shifts where it is the baseline
        renamed) and ``gates`` (shift → why it is not ranked, :func:`.ranking.validity`).

    Returns
    -------
    DataFrame
        :data:`RUNS_COLUMNS`, one row per (column, algorithm, seed) of ``chosen``: the selected configuration
        (``grid``, its index in the method's grid, and ``configuration``, its settings as JSON), its ``validation``
        and ``test`` values (fractions), ``rounds`` (the rounds it trained), ``baseline`` (the row is the
        baseline's), ``baseline_copy`` (the baseline under another name in this shift: a noise-floor row),
        ``gate`` (empty, or why the shift is kept out of ranks and tests) and ``trace``: the tuning's validation
        points of every configuration of the seed on this column's metric, JSON ``[[grid, rounds, value], ...]``
        (each configuration at the rung it reached; the survivor also at the rung before; a configuration never
        scored on this metric, none).
    """
    if chosen.empty:
        return pd.DataFrame(columns=RUNS_COLUMNS)
    rows = metrics[metrics["role"] == "validation"]
    index = ["shift", "metric", "algorithm", "seed"]
    configs, traces = {}, {}
    for key, g in rows.groupby(index, sort=False):
        key = (key[0], key[1], key[2], int(key[3]))
        configs[key] = dict(zip(g["grid"].astype(int), g["value_of"], strict=True)) if "value_of" in g else {}
        points = [[int(r.grid), int(r.rounds), float(r.value)] for r in g.itertuples()
                  if "rounds" in g and not pd.isna(r.value)]
        if "rung_value" in g:
            points += [[int(r.grid), int(r.rung_rounds), float(r.rung_value)] for r in g.itertuples()
                       if not pd.isna(r.rung_value)]
        traces[key] = json.dumps(sorted(points), separators=(",", ":"))
    rounds = rows.groupby(index + ["grid"])["rounds"].max() if "rounds" in rows else None
    copies, gates = params.get("copies") or {}, params.get("gates") or {}
    out = chosen.copy()
    keys = list(zip(out["shift"], out["metric"], out["algorithm"], out["seed"].astype(int), strict=True))
    out["model"] = params.get("model", "")
    out["configuration"] = [configs.get(k, {}).get(int(g), "") for k, g in zip(keys, out["grid"], strict=True)]
    out["rounds"] = [rounds.get((*k, int(g)), np.nan) if rounds is not None else np.nan
                     for k, g in zip(keys, out["grid"], strict=True)]
    out["baseline"] = out["algorithm"] == params["baseline"]
    out["baseline_copy"] = [sh in copies.get(a, []) for a, sh in zip(out["algorithm"], out["shift"], strict=True)]
    out["gate"] = [gates.get(sh, "") for sh in out["shift"]]
    out["trace"] = [traces.get(k, "[]") for k in keys]
    return out[RUNS_COLUMNS]


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
        :func:`.ranking.validity` (``params["gates"]``: shift → reason) is not ranked: its title gives the reason and
        its rows follow by name, rank "—". The same cells as
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
        gate = ranking.gated_shifts(params).get(shift)
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
    gates = ranking.gated_shifts(params)
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


def heading(params: Mapping[str, Any]) -> str:
    """The Markdown outputs' first line: the scale they were made at, and the shifts a partial join lacks.

    Parameters
    ----------
    params : mapping
        ``scale`` (the configuration's: quick, benchmark, paper, ...) and ``missing_shifts`` (the shifts without a
        shard, :func:`.combine.join_shards` with ``partial``), each optional.

    Returns
    -------
    str
        ``"Scale: **<scale>**. ..."`` and a blank line; at quick scale it says the matrix is a taste (at most 45
        minutes) that draws no conclusion. Empty when params give neither.
    """
    parts = []
    if params.get("scale"):
        parts.append(f"Scale: **{params['scale']}**" + (": a taste (at most 45 minutes) that draws no conclusion."
                                                         if params["scale"] == "quick" else "."))
    if params.get("missing_shifts"):
        parts.append(f"Partial matrix: no shard yet of {', '.join(params['missing_shifts'])}.")
    return " ".join(parts) + "\n\n" if parts else ""


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
    valid = ranking.validity(chosen, metrics, params)
    params = dict(params) | {"gates": dict(zip(valid.loc[~valid["valid"], "shift"],
                                               valid.loc[~valid["valid"], "reason"], strict=True))}
    summ = summary(chosen, params["baseline"], float(params.get("confidence", 0.95)))
    if name == "shift_matrix_table":
        spent = costs.cell_costs(metrics, params)  # per cell: training CPU-s and bytes per round
        _write_text(files["csv"], (summ.merge(spent, on=["algorithm", "shift"], how="left") if len(summ) else summ)
                    .to_csv(index=False))
        if "runs" in files:  # the per-seed values the summary is computed from (committed with the snapshot)
            _write_text(files["runs"], per_seed(metrics, chosen, params).to_csv(index=False))
        table = matrix_table(summ, params)
        wins = wins_markdown(summ, params)
        level = 100 * float(params.get("confidence", 0.95))
        _write_text(files["md"], heading(params) + ranking_markdown(summ, params) + "\n" + (
            f"\nWhat wins where (best mean in %, and the paired {level:g} % interval of Δ against "
            f"{params['baseline']} wholly above or below 0, in points):\n\n{wins}\n" if wins else "")
            + aggregate.aggregates_markdown(aggregate.aggregates(chosen, params), params)
            + tuning_table.tuning_markdown(tuning_table.tuning(metrics, chosen, params), params))
        _write_text(files["tex"], table.style.to_latex())
    elif name == "shift_matrix_figure":
        _write_text(files["csv"], summ[["column", "algorithm", "delta", "delta_ci", "delta_crosses_zero"]]
                    .to_csv(index=False))
        save_figure(_heatmap(summ, params), files["pdf"], files["png"], dpi=150, tight=True)
    elif name == "shift_ranks":
        table, info = ranking.ranks(chosen, params)
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
        floor = ranking.noise_floor(chosen, params)
        if len(floor):
            f = floor.assign(**{c: [f"{100 * v:+.2f}" if c == "mean_delta" else f"{100 * v:.2f}" for v in floor[c]]
                                for c in ("mean_delta", "sd_delta", "max_abs_delta")})
            notes += (f"\n\nNoise floor: {params['baseline']} against itself, the algorithms that are "
                      f"{params['baseline']} under another name in a block (left out of the tests), paired Δ by "
                      "seed in points:\n\n" + f.rename(columns={"mean_delta": "mean Δ", "sd_delta": "sd Δ",
                                                            "max_abs_delta": "max |Δ|"}).to_markdown(index=False))
        shown = table.rename(columns={"average_rank": "average rank", "wilcoxon_p": "Wilcoxon p", "holm_p": "Holm p",
                                      "differs_from_baseline": f"differs from {params['baseline']}"})
        _write_text(files["md"], heading(params) + head + shown.to_markdown(index=False) + "\n\n" + notes + "\n")
        save_figure(_rank_figure(table, info), files["pdf"], files["png"], dpi=150, tight=True)
    else:
        raise ValueError(f"unknown shift-matrix output {name!r}")
