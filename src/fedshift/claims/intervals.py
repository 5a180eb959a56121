"""Each claim's quantity from its table and its Student-t (or Welch) interval over seeds.

The intervals of :mod:`fedshift.claims` (its docstring gives the formulas); :mod:`~fedshift.claims.verdicts` judges
them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["t_interval", "t_interval_from_stats", "interval_text", "number_text", "welch_interval", "NoRowsError",
           "claim_sample", "estimate"]

_N_COLUMNS = ("n_seeds", "runs", "seeds", "n")


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t confidence interval of independent values.

    Parameters
    ----------
    values : sequence of float
        One value per run (seed); NaNs are an error, not dropped.
    confidence : float
        Coverage of the interval, in (0, 1).

    Returns
    -------
    mean, low, high : float
        ``low`` and ``high`` are NaN for fewer than two values.

    Raises
    ------
    ValueError
        If ``values`` is empty or holds a non-finite value.
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not np.isfinite(v).all():
        raise ValueError(f"need finite values for an interval, got {v.tolist()}")
    sd = float(v.std(ddof=1)) if v.size > 1 else float("nan")
    return t_interval_from_stats(float(v.mean()), sd, int(v.size), confidence)


def t_interval_from_stats(mean: float, std: float, n: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """Student-t interval of a mean from its summary: sample std (ddof 1) and number of runs.

    Returns ``(mean, NaN, NaN)`` for n < 2 or a NaN std.
    """
    if n < 2 or not math.isfinite(std):
        return mean, float("nan"), float("nan")
    from scipy import stats  # here, not at the top: the workflow's plan imports this package, and no scipy

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return mean, mean - half, mean + half


def interval_text(values: Sequence[float], digits: int = 2) -> str:
    """``"+m [+lo, +hi]"``: the mean of ``values`` and its 95 % t-interval (:func:`t_interval`), signed, for tables.

    NaNs (a seed one side of a paired difference lacks) are left out; one value gives its mean alone, none "–".
    """
    v = [float(x) for x in values if not math.isnan(float(x))]
    if not v:
        return "–"
    mean, low, high = t_interval(v)
    return f"{mean:+.{digits}f}" if len(v) < 2 else f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def number_text(x: float) -> str:
    """A value as the verdict table and its notes print it: two decimals, four significant digits below 0.01.

    Returns "–" for a non-finite value.
    """
    return "–" if not math.isfinite(x) else f"{x:.4g}" if abs(x) < 0.01 and x != 0 else f"{x:.2f}"


def welch_interval(a: tuple[float, float, int], b: tuple[float, float, int],
                   confidence: float = 0.95) -> tuple[float, float, float]:
    """Welch interval of mean(a) − mean(b) from two summaries (mean, std with ddof 1, n) of independent runs.

    Returns ``(difference, NaN, NaN)`` when either side has fewer than two runs. With both stds zero the
    interval is the point itself.
    """
    diff = a[0] - b[0]
    se, df = _welch_se(a, b)
    if not math.isfinite(se):
        return diff, float("nan"), float("nan")
    if se == 0:
        return diff, diff, diff
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * se
    return diff, diff - half, diff + half


def _welch_se(a: tuple[float, float, int], b: tuple[float, float, int]) -> tuple[float, float]:
    """Standard error of mean(a) − mean(b) and its Welch–Satterthwaite degrees of freedom, from two summaries.

    ``(NaN, NaN)`` when either side has fewer than two runs; ``(0, na + nb − 2)`` when both stds are zero.
    """
    (_, sa, na), (_, sb, nb) = a, b
    if na < 2 or nb < 2 or not (math.isfinite(sa) and math.isfinite(sb)):
        return float("nan"), float("nan")
    va, vb = sa**2 / na, sb**2 / nb
    if va + vb == 0:
        return 0.0, float(na + nb - 2)
    return math.sqrt(va + vb), (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))


class NoRowsError(ValueError):
    """A claim's filter matches no row of its table: the cell is not computed at this scale."""


def _select(table: pd.DataFrame, where: Mapping[str, Any], context: str) -> pd.DataFrame:
    """Rows matching ``where``; a value ``"@max"`` / ``"@min"`` keeps the rows at that column's extreme."""
    sel = table
    for col, want in where.items():
        if col not in sel.columns:
            raise ValueError(f"{context}: table has no column {col!r} (columns: {list(table.columns)})")
        if want in ("@max", "@min"):
            ext = sel[col].max() if want == "@max" else sel[col].min()
            sel = sel[sel[col] == ext]
        elif isinstance(want, int | float) and not isinstance(want, bool) and pd.api.types.is_numeric_dtype(sel[col]):
            sel = sel[np.isclose(sel[col].astype(float), float(want))]
        else:
            sel = sel[sel[col].astype(str) == str(want)]
    if sel.empty:
        raise NoRowsError(f"{context}: no row matches {dict(where)}")
    return sel


def _form(table: pd.DataFrame, q: Mapping[str, Any]) -> str:
    if q.get("value", "value") in table.columns:
        return "runs"
    if {"mean", "std"} <= set(table.columns) and any(c in table.columns for c in _N_COLUMNS):
        return "summary"
    raise ValueError(f"table has neither a {q.get('value', 'value')!r} column (one row per run) nor mean, std and "
                     f"a run count ({', '.join(_N_COLUMNS)}); columns: {list(table.columns)}")


def _summary(rows: pd.DataFrame, scale: float, ddof: int, context: str) -> tuple[float, float, int]:
    if len(rows) != 1:
        raise ValueError(f"{context}: {len(rows)} summary rows match, need exactly one")
    r = rows.iloc[0]
    n = int(next(r[c] for c in _N_COLUMNS if c in rows.columns))
    std = float(r["std"]) * scale
    if ddof == 0 and n > 1:
        std *= math.sqrt(n / (n - 1))
    return float(r["mean"]) * scale, std if n > 1 else float("nan"), n


def claim_sample(table: pd.DataFrame, quantity: Mapping[str, Any], context: str = "claim") -> dict[str, Any]:
    """The data a claim's interval is computed from: per-run values, or the summaries of one or two cells.

    :func:`estimate` computes the interval from it; ``benchmarks/claims_power.py`` plans the number of seeds from
    the same sample of a pilot run, so the two cannot disagree on what a claim's per-seed value is.

    Parameters
    ----------
    table, quantity, context
        As :func:`estimate`.

    Returns
    -------
    dict
        ``form`` ``"runs"``: ``values`` (float array, one per run or per pair, scaled; NaN pairs dropped where the
        quantity says ``drop_nan``), ``method`` (``t`` or ``paired t``), ``keys`` (the seeds, or ``pair_by``
        values, of ``values``; None for unpaired runs without a ``seed`` column). ``form`` ``"summary"``: ``a`` and
        ``b`` (``(mean, std with ddof 1, n)``; ``b`` None for one cell).

    Raises
    ------
    ValueError
        As :func:`estimate`.
    """
    scale = float(quantity.get("scale", 1.0))
    form = _form(table, quantity)
    a = _select(table, quantity["a"], context)
    b = _select(table, quantity["b"], context) if "b" in quantity else None
    if form == "summary":
        ddof = int(quantity.get("std_ddof", 1))
        return {"form": "summary", "a": _summary(a, scale, ddof, context),
                "b": None if b is None else _summary(b, scale, ddof, context)}
    col = quantity.get("value", "value")
    if b is None:
        vals = a[col].to_numpy(dtype=float) * scale
        keys = a["seed"].to_numpy() if "seed" in a.columns else None
        method = "t"
    else:
        key = quantity.get("pair_by", "seed")
        if key not in table.columns:
            raise ValueError(f"{context}: cannot pair on {key!r}: no such column")
        m = a[[key, col]].merge(b[[key, col]], on=key, suffixes=("_a", "_b"), validate="one_to_one")
        if m.empty:
            raise ValueError(f"{context}: a and b share no {key!r} to pair on")
        vals = (m[f"{col}_a"] - m[f"{col}_b"]).to_numpy(dtype=float) * scale
        keys = m[key].to_numpy()
        method = "paired t"
    if quantity.get("drop_nan"):  # runs the table marks as having no value (e.g. every grid value diverged)
        finite = np.isfinite(vals)
        vals, keys = vals[finite], (None if keys is None else keys[finite])
        if vals.size == 0:
            raise ValueError(f"{context}: every run's value is NaN")
    return {"form": "runs", "values": vals, "method": method, "keys": keys}


def estimate(table: pd.DataFrame, quantity: Mapping[str, Any], *, exact: bool = False,
             confidence: float = 0.95, context: str = "claim") -> dict[str, Any]:
    """Our value of one claim's quantity with its interval over seeds.

    Parameters
    ----------
    table : DataFrame
        The tidy table the quantity reads: one row per run (a ``value`` column, or the column named by
        ``quantity["value"]``, and a ``seed`` column to pair on), or one row per cell with ``mean``, ``std`` and a
        run count (``n_seeds``, ``runs`` or ``seeds``).
    quantity : dict
        ``table`` (its path; :func:`evaluate_claims` reads it), optional ``description`` and ``each`` (a column
        or list of columns: one verdict per group of their values; :func:`evaluate_claims` splits on it),
        ``value`` (the per-run value column, default ``value``), ``a`` (filter of the first cell: column →
        value, ``"@max"``/``"@min"`` for an extreme), optional ``b`` (the cell subtracted),
        ``pair_by`` (column pairing per-run values of a and b, default ``seed``), ``drop_nan`` (leave out the
        runs, or pairs, whose value is NaN, e.g. FedPALS's seeds where every grid value diverged; ``n`` counts
        the rest; default: a NaN is an error),
        ``scale`` (factor applied to the values, e.g. 100 for fractions → points), ``std_ddof`` (0 when the
        table's std is the population std; converted to ddof 1).
    exact : bool
        The quantity is deterministic (e.g. a closed-form point reached by one run): its interval is the
        point itself.
    confidence : float
        Coverage of the interval.
    context : str
        Named in error messages (the claim's id).

    Returns
    -------
    dict
        ``ours`` (value), ``ci_low``, ``ci_high`` (NaN without an interval), ``n`` (runs), ``interval``
        (``paired t``, ``t``, ``Welch``, ``exact`` or ``none``).

    Raises
    ------
    ValueError
        If a filter matches nothing, the table has neither form, or paired runs do not overlap.
    """
    sample = claim_sample(table, quantity, context)
    if sample["form"] == "runs":
        vals = sample["values"]
        mean, lo, hi = t_interval(vals, confidence)
        n, method = int(vals.size), sample["method"]
    elif sample["b"] is None:
        mean, lo, hi = t_interval_from_stats(*sample["a"], confidence)
        n, method = sample["a"][2], "t"
    else:
        mean, lo, hi = welch_interval(sample["a"], sample["b"], confidence)
        n, method = min(sample["a"][2], sample["b"][2]), "Welch"
    se, df = _standard_error(sample)
    if exact:
        lo = hi = mean
        method = "exact"
        se, df = float("nan"), float("nan")
    elif not math.isfinite(lo):
        method = "none"
    return {"ours": mean, "ci_low": lo, "ci_high": hi, "n": n, "interval": method, "se": se, "df": df}


def _standard_error(sample: Mapping[str, Any]) -> tuple[float, float]:
    """The standard error of a claim sample's mean (or difference) and its t degrees of freedom.

    Welch's for two summaries (:func:`_welch_se`); NaN where the sample gives no interval.
    """
    nan = float("nan")
    if sample["form"] == "runs":
        v = sample["values"]
        return (float(v.std(ddof=1)) / math.sqrt(v.size), float(v.size - 1)) if v.size > 1 else (nan, nan)
    (_, sa, na), b = sample["a"], sample["b"]
    if b is None:
        return (sa / math.sqrt(na), float(na - 1)) if na > 1 and math.isfinite(sa) else (nan, nan)
    return _welch_se(sample["a"], b)
