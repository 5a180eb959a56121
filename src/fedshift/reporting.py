"""Tables and figures from tidy per-run metrics (never from models: plotting never retrains).

:func:`aggregate` turns per-run rows into the tidy table every output reads: one row per
(model, column, metric) with ``mean``, ``std`` (sample standard deviation over seeds, ddof = 1;
0 for one seed) and ``n_seeds``. :func:`to_markdown` and :func:`to_latex` render the paper's
layout (rows = training loss, columns = test domains, accuracy in %); :func:`plot_domain_accuracy`
draws per-domain accuracy with error bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedshift.budget import REHEARSAL_MARK, is_rehearsal  # noqa: E402
from fedshift.io import atomic_write  # noqa: E402

__all__ = ["aggregate", "to_markdown", "to_latex", "plot_domain_accuracy", "row_label", "column_label",
           "save_figure", "plot_spread", "mark_rehearsal", "REHEARSAL_COLUMN"]

#: Column added to every table (csv) the rehearsal writes; its value is :data:`fedshift.budget.REHEARSAL_MARK`.
REHEARSAL_COLUMN = "rehearsal"


def save_figure(fig: plt.Figure, *paths: str | Path, dpi: int = 150, tight: bool = False) -> None:
    """Write ``fig`` to each path atomically, in the format its suffix names, then close it.

    PDFs carry no creation date, so the same table gives the same bytes on every run and host. At the rehearsal
    scale (:func:`fedshift.budget.is_rehearsal`) the figure first gets :data:`fedshift.budget.REHEARSAL_MARK` as a
    red watermark across its middle.

    Parameters
    ----------
    fig : Figure
    *paths : path
        Output files, e.g. ``fig.pdf`` and ``fig.png`` (format = suffix without the dot).
    dpi : int
        Resolution of raster formats.
    tight : bool
        Crop to the drawn area (``bbox_inches="tight"``).

    Raises
    ------
    ValueError
        For a path without a suffix (from matplotlib for an unknown format).
    """
    if is_rehearsal():
        fig.text(0.5, 0.5, REHEARSAL_MARK, ha="center", va="center", rotation=25, color="red", alpha=0.35,
                 fontsize=20, weight="bold", zorder=100)
    for path in paths:
        fmt = Path(path).suffix[1:]
        if not fmt:
            raise ValueError(f"cannot tell the figure format of {str(path)!r}: no suffix")
        with atomic_write(path, "wb", encoding=None) as fh:
            fig.savefig(fh, format=fmt, dpi=dpi, bbox_inches="tight" if tight else None,
                        metadata={"CreationDate": None} if fmt == "pdf" else None)
    plt.close(fig)


def plot_spread(ax: plt.Axes, x: Any, mean: Any, std: Any | None, *, band: bool = False, fmt: str = "o-",
                **kwargs: Any) -> None:
    """Draw a mean over seeds with its spread: ±1 std error bars (points) or a shaded band (curves).

    Parameters
    ----------
    ax : Axes
    x, mean : array-like, same length
    std : array-like or None
        Sample std over seeds at each x (NaN, e.g. for one seed, draws no spread there); None: no spread.
    band : bool
        A shaded ±1 std band around a line (curves over rounds) instead of error bars.
    fmt : str
        Line / marker format.
    **kwargs
        Passed to ``ax.plot`` / ``ax.errorbar`` (label, color, ...).
    """
    x, mean = np.asarray(x, dtype=float), np.asarray(mean, dtype=float)
    sd = np.zeros_like(mean) if std is None else np.nan_to_num(np.asarray(std, dtype=float), nan=0.0)
    if band:
        (line,) = ax.plot(x, mean, fmt, **kwargs)
        ax.fill_between(x, mean - sd, mean + sd, alpha=0.2, color=line.get_color(), linewidth=0)
    else:
        ax.errorbar(x, mean, yerr=sd, fmt=fmt, capsize=3, **kwargs)


def mark_rehearsal(paths: Sequence[str | Path], config: dict[str, Any] | None = None) -> list[Path]:
    """Mark written tables as rehearsal outputs, in their files, when this is the rehearsal scale.

    Parameters
    ----------
    paths : sequence of path
        Outputs of a table job; ``.csv`` gets a last column :data:`REHEARSAL_COLUMN` =
        :data:`fedshift.budget.REHEARSAL_MARK` on every row, ``.md`` a first line ``**REHEARSAL — not a result**``,
        ``.tex`` a first comment line and a bold line; other suffixes (figures: :func:`save_figure` marks them)
        are left alone. Each file is rewritten atomically.
    config : dict, optional
        The workflow configuration (``scale``); None reads the environment (:func:`fedshift.budget.is_rehearsal`).

    Returns
    -------
    list of Path
        The files marked (none unless the scale is the rehearsal's; a csv already marked is not marked twice).
    """
    if not is_rehearsal(config):
        return []
    done = []
    for path in map(Path, paths):
        if path.suffix == ".csv":
            df = pd.read_csv(path)
            if REHEARSAL_COLUMN in df.columns:
                continue
            df[REHEARSAL_COLUMN] = REHEARSAL_MARK
            with atomic_write(path) as fh:
                df.to_csv(fh, index=False)
        elif path.suffix in (".md", ".tex"):
            text = path.read_text(encoding="utf-8")
            head = (f"**{REHEARSAL_MARK}**\n\n" if path.suffix == ".md"
                    else f"% {REHEARSAL_MARK}\n\\noindent\\textbf{{{REHEARSAL_MARK}}}\n\n")
            if text.startswith(head):
                continue
            with atomic_write(path) as fh:
                fh.write(head + text)
        else:
            continue
        done.append(path)
    return done


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
    """Markdown in the paper's layout, with the paper's reference numbers below when given."""
    cols = spec["columns"]
    lines = [f"**{spec['title']}** (test accuracy %, mean ± std over "
             f"{int(table['n_seeds'].max())} runs; this reproduction)", "",
             "| training loss | " + " | ".join(column_label(c) for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for m in spec["rows"]:
        lines.append(f"| {row_label(m)} | " + " | ".join(_cell(table, m, c) for c in cols) + " |")
    ref = spec.get("reference")
    if ref:
        lines += ["", "Published (paper):", "",
                  "| training loss | " + " | ".join(column_label(c) for c in cols) + " |",
                  "|---|" + "---:|" * len(cols)]
        for m in spec["rows"]:
            if m in ref:
                lines.append(f"| {row_label(m)} | " + " | ".join(ref[m].get(c, "–") for c in cols) + " |")
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
