"""AFL's tables and figure (Mohri et al. 2019, Tables 1–2): paper-style layouts from tidy per-run metrics.

:func:`aggregate` turns per-run rows into the tidy table every AFL output reads: one row per
(model, column, metric) with ``mean``, ``std`` (sample standard deviation over seeds, ddof = 1;
0 for one seed) and ``n_seeds``. :func:`to_markdown` and :func:`to_latex` render the paper's
layout (rows = training loss, columns = test domains, accuracy in %); :func:`plot_domain_accuracy`
draws per-domain accuracy with error bars. Only AFL's output jobs run this module
(:attr:`fedshift.papers.afl.paper.AflPaper.output_modules`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

__all__ = ["aggregate", "to_markdown", "to_latex", "plot_domain_accuracy", "row_label", "column_label"]


def aggregate(metrics: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over seeds.

    Parameters
    ----------
    metrics : DataFrame
        Columns experiment, model, seed, column, metric, value (one row per run and cell).

    Returns
    -------
    DataFrame
        Columns experiment, model, column, metric, mean, std, n_seeds.

    Raises
    ------
    ValueError
        If a (model, seed, column, metric) appears twice or a value is not finite.
    """
    if metrics.duplicated(["experiment", "model", "seed", "column", "metric"]).any():
        raise ValueError("duplicate (model, seed, column, metric) rows in the metrics")
    if not np.isfinite(metrics["value"].to_numpy(dtype=float)).all():
        raise ValueError("non-finite metric values")
    g = metrics.groupby(["experiment", "model", "column", "metric"], sort=False)["value"]
    out = g.agg(mean="mean", std=lambda v: float(v.std(ddof=1)) if len(v) > 1 else 0.0, n_seeds="count")
    return out.reset_index()


def row_label(model: str, latex: bool = False) -> str:
    """Paper-style name of a model's training loss."""
    if model == "afl":
        return r"$\mathcal{L}_{\mathcal{D}_\Lambda}$ (AFL)" if latex else "L_D_Λ (AFL)"
    if model == "uniform":
        return r"$\mathcal{L}_{\widehat{\mathcal{U}}}$ (uniform)" if latex else "L_Û (uniform)"
    if model.startswith("domain:"):
        name = model.split(":", 1)[1]
        return rf"$\mathcal{{L}}_{{\text{{{name}}}}}$" if latex else f"L_{name}"
    return model


def column_label(column: str, latex: bool = False) -> str:
    """Paper-style column name (``D_Lambda`` → D_Λ)."""
    if column == "D_Lambda":
        return r"$\mathcal{D}_\Lambda$" if latex else "D_Λ"
    return column


def _cell(table: pd.DataFrame, model: str, column: str, metric: str = "accuracy") -> str:
    sel = table[(table.model == model) & (table.column == column) & (table.metric == metric)]
    if sel.empty:
        return "–"
    r = sel.iloc[0]
    return f"{100 * r['mean']:.2f} ± {100 * r['std']:.2f}"


def to_markdown(table: pd.DataFrame, spec: dict[str, Any]) -> str:
    """Markdown in the paper's layout: each cell ours (mean ± std over seeds) over the paper's value in brackets.

    ``spec``: ``title``, ``rows`` (training losses), ``columns`` (test domains) and optionally ``reference``
    (row → column → the paper's "mean ± std" text); a cell the paper does not print shows ours alone.
    """
    cols = spec["columns"]
    ref = spec.get("reference") or {}
    n = int(table["n_seeds"].max())
    lines = [f"**{spec['title']}** (test accuracy %, mean ± std over {n} runs; "
             + ("the paper's value in brackets below ours)" if ref else "this reproduction)"), "",
             "| training loss | " + " | ".join(column_label(c) for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for m in spec["rows"]:
        cells = [_cell(table, m, c) + (f"<br>[{ref[m][c]}]" if c in ref.get(m, {}) else "") for c in cols]
        lines.append(f"| {row_label(m)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_latex(table: pd.DataFrame, spec: dict[str, Any]) -> str:
    """A ``booktabs`` LaTeX table in the paper's layout."""
    cols = spec["columns"]
    out = [r"\begin{table}[t]", r"\centering",
           rf"\caption{{{spec['title']} Test accuracy (\%), mean $\pm$ std over "
           rf"{int(table['n_seeds'].max())} runs.}}",
           r"\begin{tabular}{l" + "r" * len(cols) + "}", r"\toprule",
           "Training loss & " + " & ".join(column_label(c, latex=True) for c in cols) + r" \\", r"\midrule"]
    for m in spec["rows"]:
        cells = [_cell(table, m, c).replace("±", r"$\pm$") for c in cols]
        out.append(row_label(m, latex=True) + " & " + " & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"


def plot_domain_accuracy(table: pd.DataFrame, spec: dict[str, Any]) -> plt.Figure:
    """Grouped bars: test accuracy per column (domains, U, D_Λ) for each model, ±1 std error bars.

    Parameters
    ----------
    table : DataFrame
        Output of :func:`aggregate`.
    spec : dict
        The table's config entry (``rows``, ``columns``, ``title``).

    Returns
    -------
    matplotlib.figure.Figure
    """
    cols: Sequence[str] = spec["columns"]
    models: Sequence[str] = spec["rows"]
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(cols), 3.4), constrained_layout=True)
    width = 0.8 / len(models)
    x = np.arange(len(cols))
    for i, m in enumerate(models):
        mean, std = [], []
        for c in cols:
            sel = table[(table.model == m) & (table.column == c) & (table.metric == "accuracy")]
            mean.append(100 * sel["mean"].iloc[0] if len(sel) else np.nan)
            std.append(100 * sel["std"].iloc[0] if len(sel) else 0.0)
        ax.bar(x + (i - (len(models) - 1) / 2) * width, mean, width, yerr=std, capsize=2, label=row_label(m))
    ax.set_xticks(x, [column_label(c) for c in cols])
    ax.set_ylabel("test accuracy (%)")
    lo = np.nanmin(table[table.metric == "accuracy"]["mean"].to_numpy()) * 100
    ax.set_ylim(max(0.0, lo - 10), 100)
    ax.set_title(spec["title"].split(":")[0], fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig
