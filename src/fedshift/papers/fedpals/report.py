"""FedPALS tables and figures from tidy per-run metrics (they never retrain).

One module over 400 lines: the paper's five tables and figures share one loader and one layout of tidy run metrics.

Table 1 of Listo Zec et al. (2024) reports, per data set and label split, the mean ± std over
seeds of the target test accuracy of FedPALS, FedAvg, FedProx, SCAFFOLD and the Oracle. Each
method's model is the one selected by early stopping on the target-like validation set; for
FedPALS the λ candidate is also chosen on that validation set, per seed (§5: "λ in FedPALS [is]
tuned using a validation set that reflects the target distribution").
"""

from __future__ import annotations

import textwrap
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = ["select_per_seed", "table_runs", "table", "table_markdown", "table_latex", "sweep_data", "plot_sweep",
           "synthetic_summary", "plot_synthetic", "curves_data", "plot_curves", "weights_data", "plot_weights"]

COLUMN_NAMES = {"fedpals": "FedPALS", "fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD",
                "oracle": "Oracle", "fedprox_fedpals": "FedProx+FedPALS"}
METRIC_NAMES = {"accuracy": "accuracy (%)", "macro_f1": "F1 (macro)"}


def series_name(key: str) -> str:
    """Display name of a method or of one algorithm id (``fedpals~lam600`` → "FedPALS, λ=600")."""
    kind, _, variant = key.partition("~")
    name = COLUMN_NAMES.get(kind, kind)
    if not variant:
        return name
    if variant.startswith("lam"):
        return f"{name}, λ={variant[3:]}"
    if variant.startswith("ess"):
        return f"{name}, ESS {variant[3:]} %"
    return f"{name} ({variant})"


def _by_series(data: pd.DataFrame, column: str = "series"):
    """Groups of ``data`` by method, in the paper's column order (FedPALS first)."""
    order = {k: i for i, k in enumerate(COLUMN_NAMES)}
    for key in sorted(data[column].unique(), key=lambda k: (order.get(k, len(order)), k)):
        yield key, data[data[column] == key]


def select_per_seed(metrics: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """One value per (experiment, algorithm kind, seed): the test ``metric`` of the selected model.

    For kinds with several λ candidates (``fedpals~…``) the candidate with the highest validation
    ``metric`` is taken (the first in config order on ties): the metric the table reports, which is also
    the one each run's early stopping uses (``select_metric``: accuracy, macro-F1 for iWildCam). A diverged
    candidate (``run`` row ``diverged`` = 1, NaN metrics: :func:`fedshift.papers.fedpals.fit.evaluate_run`)
    ranks below every finite one; a seed whose every candidate diverged keeps value NaN.

    Parameters
    ----------
    metrics : DataFrame
        Concatenated ``metrics.csv`` of the runs (columns experiment, algorithm, kind, seed, split,
        metric, value).
    metric : {"accuracy", "macro_f1"}

    Returns
    -------
    DataFrame
        Columns experiment, kind, seed, algorithm (the chosen id), value (test metric),
        validation (validation metric), projection_distance.

    Raises
    ------
    ValueError
        If a run that did not diverge lacks its validation or test metric.
    """
    wide = metrics.pivot_table(index=["experiment", "algorithm", "kind", "seed"], columns=["split", "metric"],
                               values="value", aggfunc="first", sort=False)
    need = [("validation", metric), ("test", metric)]
    missing = [c for c in need if c not in wide.columns]
    if missing:
        raise ValueError(f"metrics lack {missing}")
    df = pd.DataFrame({"validation": wide[("validation", metric)], "value": wide[("test", metric)]})
    if ("run", "projection_distance") in wide.columns:
        df["projection_distance"] = wide[("run", "projection_distance")]
    diverged = (wide[("run", "diverged")].fillna(0).to_numpy() > 0 if ("run", "diverged") in wide.columns
                else np.zeros(len(df), dtype=bool))
    df = df.reset_index()
    if df.loc[~diverged, ["validation", "value"]].isna().any().any():
        raise ValueError(f"a run lacks its validation or test {metric}")
    rank = df["validation"].where(~diverged, -np.inf)  # a diverged candidate loses to every finite one
    idx = rank.groupby([df.experiment, df.kind, df.seed], sort=False).idxmax()
    return df.loc[idx].reset_index(drop=True)


def table_runs(metrics: pd.DataFrame, spec: dict[str, Any]) -> pd.DataFrame:
    """A FedPALS table's per-seed values: one row per (table row, column, seed), paired by seed for the claims.

    Parameters
    ----------
    metrics : DataFrame
        As :func:`select_per_seed`.
    spec : dict
        As :func:`table`.

    Returns
    -------
    DataFrame
        Columns row, experiment, column, seed, algorithm (the run id chosen on validation, or the row's id for
        ``layout: algorithms``), value (test metric: % for accuracy; NaN where every candidate diverged). The
        methods of one row share each seed's partition, so their values pair by seed.

    Raises
    ------
    ValueError
        A row or column without runs.
    """
    scale = 100.0 if spec["metric"] == "accuracy" else 1.0
    parts = []
    if spec.get("layout") == "algorithms":
        test = metrics[(metrics.split == "test") & (metrics.metric == spec["metric"])]
        for r in spec["rows"]:
            sel = test[(test.experiment == r["experiment"]) & (test.algorithm == r["algorithm"])]
            if sel.empty:
                raise ValueError(f"no runs of {r['algorithm']} in {r['experiment']}")
            parts.append(sel.assign(row=r["label"], column=spec["metric"], algorithm=r["algorithm"]))
    else:
        chosen = select_per_seed(metrics, spec["metric"])
        for r in spec["rows"]:
            for col in spec["columns"]:
                sel = chosen[(chosen.experiment == r["experiment"]) & (chosen.kind == col)]
                if sel.empty:
                    raise ValueError(f"no runs of {col} in {r['experiment']}")
                parts.append(sel.assign(row=r["label"], column=col))
    out = pd.concat(parts, ignore_index=True)[["row", "experiment", "column", "seed", "algorithm", "value"]]
    return out.assign(value=out["value"] * scale)


def table(metrics: pd.DataFrame, spec: dict[str, Any], runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """A FedPALS table in tidy form: one row per (table row, column).

    Parameters
    ----------
    metrics : DataFrame
        As :func:`select_per_seed`.
    spec : dict
        The table's config: ``rows`` with label/experiment, ``columns`` (methods), ``metric``, optional
        ``reference``. With ``layout: algorithms`` (Tables 2 and 3: a λ sweep), each row names one
        ``algorithm`` id of its experiment instead, reported as it is (no λ selection), in one column
        named after the metric.
    runs : DataFrame, optional
        :func:`table_runs` of the same metrics (computed when not given).

    Returns
    -------
    DataFrame
        Columns row, experiment, column, mean, std (sample std, ddof 1), seeds (those counted: a seed whose
        every candidate diverged is left out), diverged (seeds left out), reference (the paper's "mean ± std"
        or "").

    Raises
    ------
    ValueError
        A row or column without runs.
    """
    runs = table_runs(metrics, spec) if runs is None else runs
    ref = spec.get("reference", {})
    rows = []
    for (label, experiment, column), g in runs.groupby(["row", "experiment", "column"], sort=False):
        rows.append({"row": label, "experiment": experiment, "column": column, **_seed_stats(g["value"].to_numpy()),
                     "reference": ref.get(label, {}).get(column, "")})
    return pd.DataFrame(rows)


def _seed_stats(vals: np.ndarray) -> dict[str, float | int]:
    """Mean, sample std (ddof 1; 0 for one seed) and count of the finite per-seed values, and the diverged count.

    A seed whose runs all diverged (NaN) is left out of the mean and counted in ``diverged``; the mean of a
    cell whose every seed diverged is NaN (the Markdown table prints "diverged").
    """
    ok = vals[np.isfinite(vals)]
    return {"mean": ok.mean() if ok.size else float("nan"), "std": ok.std(ddof=1) if ok.size > 1 else 0.0,
            "seeds": int(ok.size), "diverged": int(vals.size - ok.size)}


def _columns(spec: dict[str, Any]) -> tuple[list[str], str]:
    """The table's columns and the header of its first column."""
    if spec.get("layout") == "algorithms":
        return [spec["metric"]], "Algorithm"
    return list(spec["columns"]), "Data set / split"


def _cell(mean: float, std: float, metric: str, diverged: int = 0) -> str:
    if not np.isfinite(mean):
        return "diverged"
    cell = f"{mean:.1f} ± {std:.1f}" if metric == "accuracy" else f"{mean:.2f} ± {std:.2f}"
    return f"{cell} ({diverged} seed{'s' if diverged > 1 else ''} diverged)" if diverged else cell


def table_markdown(tidy: pd.DataFrame, spec: dict[str, Any]) -> str:
    """The table in the paper's layout (rows × methods), ours with the paper's value in brackets."""
    cols, first = _columns(spec)
    names = {**COLUMN_NAMES, **METRIC_NAMES}
    lines = [f"**{spec['title']}**", "", f"| {first} | " + " | ".join(names.get(c, c) for c in cols)
             + " |", "|---" * (len(cols) + 1) + "|"]
    for r in spec["rows"]:
        cells = []
        for c in cols:
            row = tidy[(tidy.row == r["label"]) & (tidy.column == c)].iloc[0]
            cell = _cell(row["mean"], row["std"], spec["metric"], int(row.get("diverged", 0)))
            cells.append(f"{cell} (paper {row['reference']})" if row["reference"] else cell)
        lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    n = sorted(set(tidy.seeds))
    lines += ["", f"Mean ± std over {', '.join(map(str, n))} seed{'' if n == [1] else 's'}; "
              "each cell: ours (paper: the paper's value)."]
    return "\n".join(lines) + "\n"


def table_latex(tidy: pd.DataFrame, spec: dict[str, Any]) -> str:
    """The table as a LaTeX tabular (ours only)."""
    cols, first = _columns(spec)
    names = {**COLUMN_NAMES, **METRIC_NAMES}
    out = [r"\begin{tabular}{l" + "c" * len(cols) + "}", r"\toprule",
           f"{first} & " + " & ".join(names.get(c, c).replace("%", r"\%") for c in cols) + r" \\", r"\midrule"]
    for r in spec["rows"]:
        cells = [_cell(*tidy[(tidy.row == r["label"]) & (tidy.column == c)][["mean", "std"]].iloc[0], spec["metric"])
                 for c in cols]
        out.append(r["label"].replace("=", "$=$") + " & " + " & ".join(c.replace("±", r"$\pm$") for c in cells)
                   + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(out) + "\n"


SWEEP_LABELS = {"label_shift.labels_per_client": "labels per client C", "label_shift.beta": "Dirichlet concentration β",
                "train.local_epochs": "local epochs E", "num_clients": "number of clients M (incl. the target)"}


def sweep_data(metrics: pd.DataFrame, x_of: dict[str, float]) -> pd.DataFrame:
    """Tidy data of the sweep figures (Figs. 2, 6 and 7: C or β on the x axis).

    Per x the projection distance d(T, S) over seeds, and per (x, method) the target accuracy of
    the selected model (FedPALS's λ chosen per seed on validation).

    Parameters
    ----------
    metrics : DataFrame
        As :func:`select_per_seed`.
    x_of : dict
        Experiment name → its x value (C or β).

    Returns
    -------
    DataFrame
        Columns x, series (a method or ``projection_distance``), mean, std (accuracy in %), seeds.
    """
    chosen = select_per_seed(metrics)
    chosen["x"] = chosen.experiment.map(x_of)
    acc = chosen.groupby(["x", "kind"], sort=False).value.agg(["mean", "std", "count"]).reset_index()
    acc = acc.rename(columns={"kind": "series", "count": "seeds"})
    acc[["mean", "std"]] *= 100
    first = chosen[chosen.kind == chosen.kind.iloc[0]]
    dist = first.groupby("x").projection_distance.agg(["mean", "std", "count"]).reset_index()
    dist = dist.rename(columns={"count": "seeds"})
    dist.insert(1, "series", "projection_distance")
    return pd.concat([dist, acc], ignore_index=True).sort_values(["series", "x"]).fillna({"std": 0.0})


def _suptitle(fig: plt.Figure, title: str) -> None:
    """Set the caption as the figure's title, 8 pt, wrapped to the figure's width (≈ 16 characters per inch).

    A fixed wrap of 110 characters ran off both edges of a one-panel figure (the reduced rehearsal's Fig. 5, one λ).
    """
    fig.suptitle(textwrap.fill(title, max(40, int(16 * fig.get_figwidth()))), fontsize=8)


def plot_sweep(data: pd.DataFrame, title: str, x: str = "label_shift.labels_per_client",
               partition: dict[str, Any] | None = None) -> plt.Figure:
    """(a) projection distance vs x, [(b) label marginals of clients and target], (c) accuracy vs x.

    ``partition`` (a FedPALS partition JSON) adds the middle panel: the label marginal S_i of every
    training client and the target's T as stacked bars (Fig. 2(b) / 6(b)).
    """
    n = 3 if partition is not None else 2
    fig, axes = plt.subplots(1, n, figsize=(4.4 * n, 3.4))
    xlabel = SWEEP_LABELS.get(x, x)
    d = data[data.series == "projection_distance"]
    axes[0].errorbar(d.x, d["mean"], yerr=d["std"], marker="o", capsize=3, color="k")
    axes[0].set(xlabel=xlabel, ylabel="d(T, S)", title="(a) projection distance")
    if x == "label_shift.beta":
        axes[0].set_xscale("log")
    if partition is not None:
        marg = np.array(partition["marginals"] + [partition["target"]])
        bottom = np.zeros(len(marg))
        cmap = plt.get_cmap("tab10" if marg.shape[1] <= 10 else "tab20")
        for k in range(marg.shape[1]):
            axes[1].bar(np.arange(len(marg)), marg[:, k], bottom=bottom, color=cmap(k % cmap.N), label=str(k))
            bottom += marg[:, k]
        axes[1].set_xticks(np.arange(len(marg)), [str(i) for i in range(len(marg) - 1)] + ["T"])
        axes[1].set(xlabel="client (T = target)", ylabel="label marginal", title="(b) label marginals")
        axes[1].legend(fontsize=6, ncol=2, title="label", title_fontsize=6)
    ax = axes[-1]
    for series, g in _by_series(data[data.series != "projection_distance"]):
        ax.errorbar(g.x, g["mean"], yerr=g["std"], marker="o", capsize=3, label=COLUMN_NAMES.get(series, series))
    ax.set(xlabel=xlabel, ylabel="target test accuracy (%)", title=f"({'c' if n == 3 else 'b'}) accuracy")
    if x == "label_shift.beta":
        ax.set_xscale("log")
    ax.legend(fontsize=8)
    _suptitle(fig, title)
    fig.tight_layout()
    return fig


def synthetic_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over runs of the synthetic task's accuracy (%) per (δ, algorithm)."""
    out = runs.groupby(["delta", "algorithm"]).agg(
        projection_distance=("projection_distance", "mean"), mean=("accuracy", "mean"), std=("accuracy", "std"),
        seeds=("accuracy", "count")).reset_index()
    out[["mean", "std"]] *= 100
    return out.fillna({"std": 0.0})


def plot_synthetic(summary: pd.DataFrame, title: str) -> plt.Figure:
    """Fig. 4: target accuracy vs projection distance d(T_δ, S) for FedPALS and FedAvg."""
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    for alg, g in _by_series(summary, "algorithm"):
        g = g.sort_values("projection_distance")
        ax.errorbar(g.projection_distance, g["mean"], yerr=g["std"], marker="o", capsize=3,
                    label=COLUMN_NAMES.get(alg, alg))
    ax.set(xlabel="projection distance d(T, S)", ylabel="target test accuracy (%)")
    ax.set_ylim(top=min(100.0, float(np.nanmax(summary["mean"] + summary["std"])) + 5))
    ax.legend()
    ax.set_title(textwrap.fill(title, 60), fontsize=7)
    fig.tight_layout()
    return fig


def curves_data(metrics: pd.DataFrame, histories: pd.DataFrame, metric: str = "accuracy",
                per_algorithm: bool = False) -> pd.DataFrame:
    """Tidy data of the training-dynamics figures (Figs. 3 and 8): a target test metric per round.

    Parameters
    ----------
    metrics : DataFrame
        As :func:`select_per_seed` (chooses FedPALS's λ per seed on validation).
    histories : DataFrame
        Concatenated ``history.csv`` of the same runs with columns experiment, algorithm, seed added;
        uses ``round`` and ``eval/test_<metric>``.
    metric : {"accuracy", "macro_f1"}
    per_algorithm : bool
        One series per algorithm id (every λ of FedPALS, as Fig. 3) instead of per method with λ
        chosen on validation (Fig. 8).

    Returns
    -------
    DataFrame
        Columns experiment, series (method or algorithm id), round, mean, std (% for accuracy), seeds.
    """
    column = f"eval/test_{metric}"
    if per_algorithm:
        h = histories.assign(kind=histories["algorithm"])
    else:
        chosen = select_per_seed(metrics, metric)[["experiment", "algorithm", "kind", "seed"]]
        h = histories.merge(chosen, on=["experiment", "algorithm", "seed"])
    out = h.groupby(["experiment", "kind", "round"])[column].agg(["mean", "std", "count"]).reset_index()
    out = out.rename(columns={"kind": "series", "count": "seeds"})
    if metric == "accuracy":
        out[["mean", "std"]] *= 100
    return out.fillna({"std": 0.0})


def plot_curves(data: pd.DataFrame, title: str, metric: str = "accuracy") -> plt.Figure:
    """Figs. 3 and 8: a target test metric vs communication round, one panel per experiment."""
    exps = list(dict.fromkeys(data.experiment))
    fig, axes = plt.subplots(1, len(exps), figsize=(4.6 * len(exps), 3.4), squeeze=False)
    for ax, exp in zip(axes[0], exps, strict=True):
        for series, g in _by_series(data[data.experiment == exp]):
            ax.plot(g["round"], g["mean"], label=series_name(series))
            ax.fill_between(g["round"], g["mean"] - g["std"], g["mean"] + g["std"], alpha=0.2)
        ax.set(xlabel="communication round", ylabel=f"target test {METRIC_NAMES[metric]}", title=exp)
        ax.legend(fontsize=7)
    _suptitle(fig, title)
    fig.tight_layout()
    return fig


def weights_data(runs: list[dict[str, Any]]) -> pd.DataFrame:
    """Tidy data of Fig. 5: FedPALS's aggregation weights α per client next to FedAvg's n_i/N.

    Parameters
    ----------
    runs : list of dict
        ``run.json`` of FedPALS runs of one experiment and seed (one per λ or ESS target), each with
        ``algorithm``, ``alpha_all_clients``, ``client_sizes``, ``lambda`` and ``ess_fraction``.

    Returns
    -------
    DataFrame
        Columns algorithm, lambda, ess_fraction, client (rank by size, 0 = largest), size, alpha, fedavg.
    """
    rows = []
    for run in runs:
        sizes = np.asarray(run["client_sizes"], dtype=np.float64)
        alpha = np.asarray(run["alpha_all_clients"], dtype=np.float64)
        order = np.argsort(-sizes, kind="stable")
        for rank, i in enumerate(order):
            rows.append({"algorithm": run["algorithm"], "lambda": float(run["lambda"]),
                         "ess_fraction": float(run["ess_fraction"]), "client": rank, "size": int(sizes[i]),
                         "alpha": alpha[i], "fedavg": sizes[i] / sizes.sum()})
    return pd.DataFrame(rows)


def plot_weights(data: pd.DataFrame, title: str) -> plt.Figure:
    """Fig. 5: one panel per ESS: α per client (bars; clients by size, descending) and FedAvg's weights (dots)."""
    algs = sorted(data.algorithm.unique(), key=lambda a: data[data.algorithm == a].ess_fraction.iloc[0])
    fig, axes = plt.subplots(1, len(algs), figsize=(4.2 * len(algs), 3.2), squeeze=False, sharey=True)
    for ax, alg in zip(axes[0], algs, strict=True):
        g = data[data.algorithm == alg].sort_values("client")
        ax.bar(g["client"], g["alpha"], width=1.0, label="FedPALS α")
        ax.plot(g["client"], g["fedavg"], ".", color="k", markersize=3, label="FedAvg n_i/N")
        ax.set(xlabel="client (by size, descending)", ylabel="aggregation weight",
               title=f"ESS {100 * g.ess_fraction.iloc[0]:.0f} % (λ = {g['lambda'].iloc[0]:.3g})")
        ax.legend(fontsize=7)
    _suptitle(fig, title)
    fig.tight_layout()
    return fig
