"""Each claim's quantity from its table, its Student-t (or Welch) interval over seeds, and the verdict of a test.

The intervals and the decision rules of :mod:`fedshift.claims` (its docstring gives the formulas).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["TESTS", "UNJUDGED_SCALES", "DECIDED", "t_interval", "t_interval_from_stats", "interval_text",
           "welch_interval",
           "NoRowsError", "claim_sample", "estimate", "verdict", "effect_verdict", "size_tolerance", "boundaries",
           "bound_note",
           "paper_number", "replication_robust", "decision_p_value"]

#: Tests a claim can make of its quantity x (``value`` v, ``tolerance`` t ≥ 0, default 0).
TESTS = {
    "greater": "x > v",
    "at_least": "x ≥ v − t",
    "less": "x < v",
    "at_most": "x ≤ v + t",
    "within": "|x − v| ≤ t",
}
#: Scales whose outputs never get a verdict (too few runs or steps to decide a claim).
UNJUDGED_SCALES = ("rehearsal", "smoke")
#: The verdicts that decide a claim (:func:`effect_verdict`); ``inconclusive`` is the only computed one that does not.
DECIDED = ("reproduced", "smaller than claimed", "equivalent to zero", "not reproduced")
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


def welch_interval(a: tuple[float, float, int], b: tuple[float, float, int],
                   confidence: float = 0.95) -> tuple[float, float, float]:
    """Welch interval of mean(a) − mean(b) from two summaries (mean, std with ddof 1, n) of independent runs.

    Returns ``(difference, NaN, NaN)`` when either side has fewer than two runs. With both stds zero the
    interval is the point itself.
    """
    (ma, sa, na), (mb, sb, nb) = a, b
    diff = ma - mb
    if na < 2 or nb < 2 or not (math.isfinite(sa) and math.isfinite(sb)):
        return diff, float("nan"), float("nan")
    va, vb = sa**2 / na, sb**2 / nb
    if va + vb == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


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
    """The standard error of a claim sample's mean (or difference) and its t degrees of freedom (Welch's for two
    summaries); NaN where the sample gives no interval."""
    nan = float("nan")
    if sample["form"] == "runs":
        v = sample["values"]
        return (float(v.std(ddof=1)) / math.sqrt(v.size), float(v.size - 1)) if v.size > 1 else (nan, nan)
    (ma, sa, na), b = sample["a"], sample["b"]
    if b is None:
        return (sa / math.sqrt(na), float(na - 1)) if na > 1 and math.isfinite(sa) else (nan, nan)
    _, sb, nb = b
    if na < 2 or nb < 2 or not (math.isfinite(sa) and math.isfinite(sb)):
        return nan, nan
    va, vb = sa**2 / na, sb**2 / nb
    if va + vb == 0:
        return 0.0, float(na + nb - 2)
    return math.sqrt(va + vb), (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))


def _one_sided(ours: float, se: float, df: float, bound: float, above: bool) -> float:
    """p of the one-sided t-test that x lies above (``above``) or below ``bound``: H₀ is the other side."""
    if se == 0:
        return 0.0 if (ours > bound if above else ours < bound) else 1.0
    from scipy import stats

    t = (ours - bound) / se
    return float(stats.t.sf(t, df) if above else stats.t.cdf(t, df))


def decision_p_value(ours: float, se: float, df: float, test: Mapping[str, Any], verdict_: str,
                     paper_value: float | None = None, effect: Mapping[str, Any] | None = None) -> float:
    """The p-value of the test behind a row's verdict, on the scale of its 95 % interval: p < 0.05 ⇔ decided.

    Each verdict of :func:`effect_verdict` is the rejection of one null hypothesis by the 95 % two-sided interval,
    i.e. by a one-sided t-test at level 0.025 (two one-sided tests for an equivalence or a ``within`` band,
    Schuirmann 1987). The p returned is twice that one-sided p (twice the larger of the two for an equivalence),
    capped at 1, so that ``p < 0.05`` exactly when the interval decides the row (up to the closedness of its
    ends), and a multiplicity correction at 5 % (``statsmodels.stats.multitest.multipletests``) applies to it
    directly:

    * ``reproduced``: x beyond the test's boundary (``greater``: x > v; ``at_least``: x > v − t; ``less``: x < v;
      ``at_most``: x < v + t; ``within``: both x > v − t and x < v + t);
    * ``not reproduced``: x on the other side (for ``within``: below v − t or above v + t, the nearer);
    * ``equivalent to zero``: −m < x < m (the claim's ``effect.margin``);
    * ``smaller than claimed``: x on 0's side of the paper's value less its size tolerance;
    * ``inconclusive``: the smallest p among these (how near the row came to a decision).

    Parameters
    ----------
    ours, se, df : float
        The estimate, its standard error and t degrees of freedom (:func:`estimate`'s ``ours``, ``se``, ``df``).
    test : dict
        The claim's direction test (:data:`TESTS`).
    verdict_ : str
        The row's verdict (:func:`effect_verdict`).
    paper_value : float, optional
        The paper's number for the row (:func:`paper_number`).
    effect : dict, optional
        The claim's ``effect`` (margin, size tolerance).

    Returns
    -------
    float
        In [0, 1]; NaN where there is no standard error (one run, or an exact quantity) or for a verdict that is
        not computed (``not run``, ``needs data``, ...).
    """
    if not (math.isfinite(ours) and math.isfinite(se) and math.isfinite(df)):
        return float("nan")
    effect = effect or {}
    op, v, tol = test["op"], float(test["value"]), float(test.get("tolerance", 0.0))
    lower, upper = {"greater": (v, None), "at_least": (v - tol, None), "less": (None, v),
                    "at_most": (None, v + tol), "within": (v - tol, v + tol)}[op]

    def p(bound: float, above: bool) -> float:
        return _one_sided(ours, se, df, bound, above)

    holds = max(x for x in (p(lower, True) if lower is not None else None,
                            p(upper, False) if upper is not None else None) if x is not None)
    fails = min(x for x in (p(lower, False) if lower is not None else None,
                            p(upper, True) if upper is not None else None) if x is not None)
    candidates = {"reproduced": holds, "not reproduced": fails}
    margin = effect.get("margin")
    if margin is not None:
        candidates["equivalent to zero"] = max(p(-float(margin), True), p(float(margin), False))
    pv = paper_value if paper_value is not None and paper_value != 0 else None
    if pv is not None:
        t = size_tolerance(effect.get("size_tolerance"), pv) or 0.0
        candidates["smaller than claimed"] = p(pv - t, False) if pv > 0 else p(pv + t, True)
    if verdict_ == "inconclusive":
        one = min(candidates.values())
    elif verdict_ in candidates:
        one = candidates[verdict_]
    else:
        return float("nan")
    return min(1.0, 2.0 * one)


def verdict(low: float, high: float, test: Mapping[str, Any]) -> str:
    """``reproduced``, ``not reproduced`` or ``inconclusive`` for an interval [low, high] and a test.

    Parameters
    ----------
    low, high : float
        The interval (NaN: no interval → ``inconclusive``).
    test : dict
        ``op`` (a key of :data:`TESTS`), ``value`` v, optional ``tolerance`` t ≥ 0.

    Raises
    ------
    ValueError
        For an unknown ``op`` or a negative tolerance.
    """
    op, v, tol = test["op"], float(test["value"]), float(test.get("tolerance", 0.0))
    if op not in TESTS:
        raise ValueError(f"unknown test op {op!r}; one of {sorted(TESTS)}")
    if tol < 0:
        raise ValueError(f"tolerance must be >= 0, got {tol}")
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    holds, fails = {
        "greater": (low > v, high <= v),
        "at_least": (low >= v - tol, high < v - tol),
        "less": (high < v, low >= v),
        "at_most": (high <= v + tol, low > v + tol),
        "within": (low >= v - tol and high <= v + tol, high < v - tol or low > v + tol),
    }[op]
    return "reproduced" if holds else "not reproduced" if fails else "inconclusive"


def effect_verdict(low: float, high: float, test: Mapping[str, Any], paper_value: float | None = None,
                   effect: Mapping[str, Any] | None = None) -> str:
    """The verdict on a claim's direction and its size: one of :data:`DECIDED`, or ``inconclusive``.

    Beside the direction test (:func:`verdict`, the claim's ``test``), the interval is judged against the paper's
    value ``p`` (a number the paper states) and the equivalence margin ``m`` of the claim's ``effect``; the first
    rule that holds gives the verdict:

    1. ``reproduced`` — :func:`verdict` says reproduced and, where the claim states a size
       (``effect.size_tolerance`` t), the interval does not lie wholly short of ``p − t`` (``p + t`` for a
       negative ``p``); a claim that states only a direction needs nothing of ``p``. An interval beyond ``p`` (a
       larger effect) is reproduced.
    2. ``not reproduced`` — :func:`verdict` says not reproduced and the interval does not reach the paper's side of
       0 (for a ``within`` test: or it lies beyond the band, away from 0). A decided direction is kept as it was.
    3. ``equivalent to zero`` — the whole interval lies inside (−m, m): the two one-sided tests of H₀: x ≤ −m and
       H₀: x ≥ m both reject (Schuirmann, 1987, J. Pharmacokinet. Biopharm. 15(6), 657–680: TOST at level α is the
       1 − 2α interval inside the margin; the 95 % interval used here makes each one-sided test's level 0.025,
       conservative). ``m`` is below ``|p|`` (:func:`fedshift.claims.validate_claims`), so this rules the paper's
       effect out.
    4. ``smaller than claimed`` — the interval lies wholly on 0's side of ``p − t`` (of ``p`` where the claim
       gives no tolerance): the paper's effect, at its size, is ruled out, though the direction may be undecided.
    5. ``inconclusive`` — none of these: the interval is wider than every decision (it holds the test's boundary,
       reaches ``p − t``, and leaves (−m, m)).

    ``t`` is a number in the quantity's units, or a share of ``|p|`` written ``"25%"``.

    Parameters
    ----------
    low, high : float
        The 95 % interval (NaN: none → ``inconclusive``).
    test : dict
        The claim's direction test (:data:`TESTS`).
    paper_value : float, optional
        The number the paper states for this row (:func:`paper_number`); None or 0: no size is judged.
    effect : dict, optional
        The claim's ``effect``: ``margin`` m > 0 (or None: no equivalence judged), optional ``size_tolerance``
        t ≥ 0 or ``"<share>%"`` (present: the claim states a size; :func:`size_tolerance`).

    Returns
    -------
    str

    Raises
    ------
    ValueError
        As :func:`verdict`; for a margin that is not positive or a negative size tolerance.
    """
    direction = verdict(low, high, test)
    if not (math.isfinite(low) and math.isfinite(high)):
        return direction
    effect = effect or {}
    margin = effect.get("margin")
    if margin is not None and not float(margin) > 0:
        raise ValueError(f"effect margin must be > 0, got {margin}")
    p = paper_value if paper_value is not None and paper_value != 0 else None
    tol = size_tolerance(effect.get("size_tolerance"), p)
    short = p is not None and (high < p - (tol or 0.0) if p > 0 else low > p + (tol or 0.0))  # 0's side of p ∓ t
    reversed_ = p is not None and (high <= 0 if p > 0 else low >= 0)        # not on the paper's side of 0 at all
    if direction == "reproduced" and not (tol is not None and short):
        return "reproduced"
    if direction == "not reproduced" and (reversed_ or not short):
        return "not reproduced"
    if margin is not None and -float(margin) < low and high < float(margin):
        return "equivalent to zero"
    if short:
        return "smaller than claimed"
    return direction


def size_tolerance(tolerance: float | str | None, paper_value: float | None) -> float | None:
    """A claim's size tolerance in the quantity's units: a number as it is, ``"25%"`` as that share of ``|p|``.

    Returns None where the claim gives none (it states no size) or the paper states no number.

    Raises
    ------
    ValueError
        For a negative number or a text that is not a percentage.
    """
    if tolerance is None or paper_value is None:
        return None
    if isinstance(tolerance, str):
        text = tolerance.strip()
        if not text.endswith("%"):
            raise ValueError(f"size_tolerance {tolerance!r}: a number or a percentage such as '25%'")
        try:
            share = float(text[:-1]) / 100
        except ValueError:
            raise ValueError(f"size_tolerance {tolerance!r}: a number or a percentage such as '25%'") from None
        tol = share * abs(paper_value)
    else:
        tol = float(tolerance)
    if not tol >= 0:
        raise ValueError(f"size_tolerance must be >= 0, got {tolerance!r}")
    return tol


def boundaries(test: Mapping[str, Any]) -> list[float]:
    """The decision boundaries of a test: the values of x at which :func:`verdict` changes.

    An interval decides the test (``reproduced`` or ``not reproduced``) exactly when it contains no boundary
    (up to the closedness of its ends): one boundary ``v`` (``greater``, ``less``), ``v − t`` (``at_least``),
    ``v + t`` (``at_most``), two ``v − t`` and ``v + t`` (``within``).

    Raises
    ------
    ValueError
        For an unknown ``op``.
    """
    op, v, tol = test["op"], float(test["value"]), float(test.get("tolerance", 0.0))
    if op not in TESTS:
        raise ValueError(f"unknown test op {op!r}; one of {sorted(TESTS)}")
    return {"greater": [v], "less": [v], "at_least": [v - tol], "at_most": [v + tol],
            "within": [v - tol, v + tol]}[op]


def bound_note(ours: float, low: float, high: float, n: int, unit: str = "") -> str:
    """What an inconclusive interval rules out: ``x within [low, high] <unit> at n runs``.

    The interval is the claim's 95 % interval over seeds; every value of the quantity outside it is ruled out
    at that level, so the note states the largest effect the run excludes even where it decides nothing. One run
    gives no interval: the note says so and names the single value. ``unit``: e.g. ``points`` (an accuracy lead).
    """
    u = f" {unit}" if unit else ""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{n} run{'s' if n != 1 else ''}, no interval (x = {_num(ours)}{u})" if math.isfinite(ours) else ""
    return f"x within [{_num(low)}, {_num(high)}]{u} at {n} runs"


def paper_number(claim: Mapping[str, Any], group: str = "") -> float | None:
    """The number the paper states for a claim (or one group of it), or None where it states a direction only.

    ``paper_values`` (group → number, or a list of ``{group, value}`` where a group's name is not a plain name; a
    group is named as in the claim's row, ``experiment=mnist``, or by its values alone, ``mnist``) wins over a
    numeric ``paper_value``; a text ``paper_value`` (``"> 0 at every δ"``) states no number, nor does a group
    ``paper_values`` leaves out.
    """
    per_group = claim.get("paper_values") or {}
    if not isinstance(per_group, Mapping):  # a list of {group, value}: group names that are not plain names
        per_group = {str(e["group"]): e["value"] for e in per_group}
    if group:
        bare = ",".join(part.split("=", 1)[-1] for part in group.split(","))
        for key in (group, bare):
            if key in per_group:
                return float(per_group[key])
        if per_group:
            return None
    value = claim.get("paper_value")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def replication_robust(ours: float, low: float, high: float, test: Mapping[str, Any],
                       paper_value: float | None = None, effect: Mapping[str, Any] | None = None) -> bool | None:
    """Whether a decided verdict still holds on the interval widened by √2 about our value.

    mean ± √2 · (half-width) is the 95 % interval of where the mean of an independent replication of the same
    design falls (Cumming and Maillardet, 2006, Psychological Methods 11(3), 217–227; exactly so for a z-interval,
    for a t-interval up to the t quantile's uncertainty). A rerun on another instruction set changes at worst every
    run's rounding, i.e. is such a replication; a verdict this wider interval still decides is not expected to
    flip with the CPU. The verdict is :func:`effect_verdict` (with ``paper_value`` and ``effect``), so a row
    decided *smaller than claimed* or *equivalent to zero* is judged on those bounds.

    Returns
    -------
    bool or None
        None for an undecided verdict or no interval.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    v = effect_verdict(low, high, test, paper_value, effect)
    if v == "inconclusive":
        return None
    w = math.sqrt(2.0)
    return effect_verdict(ours - w * (ours - low), ours + w * (high - ours), test, paper_value, effect) == v


def _num(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.4g}" if abs(x) < 0.01 and x != 0 else f"{x:.2f}"
