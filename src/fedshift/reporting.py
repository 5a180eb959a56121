"""Generic helpers of every paper's tables and figures (drawn from tidy per-run metrics, never from models).

Plotting never retrains. :func:`save_figure` writes a figure atomically (and watermarks a rehearsal's),
:func:`plot_spread` draws a curve or points over seeds with their spread, :func:`mark_rehearsal` marks a
rehearsal's tables. Each paper's own layouts live in its package (``fedshift.papers.<paper>.report``).
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

__all__ = ["save_figure", "plot_spread", "mark_rehearsal", "REHEARSAL_COLUMN"]

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
