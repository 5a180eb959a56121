"""Headline claims as data: each paper's claims, our value with a 95 % interval over seeds, and a verdict.

A paper's config declares its claims (``claims: {<paper>: [...]}`` in ``config/papers/<paper>.yaml``); each
names the tidy table it reads (a table or figure CSV the pipeline already writes), the quantity (one cell, or
the difference of two cells, paired by seed where the table holds one row per run), the paper's value and the
test. :func:`evaluate_claims` computes, at the scale that ran, our value, a Student-t confidence interval over
seeds and the verdict:

* ``reproduced`` — the whole interval satisfies the test;
* ``not reproduced`` — the whole interval violates it;
* ``inconclusive`` — the interval straddles the decision (or one run gives no interval); its ``note`` states
  the bound reached (``x within [lo, hi] at n runs``: what the data rule out);
* ``not judged`` — a rehearsal or smoke run (too small to decide anything);
* ``needs data: <dataset>`` — the claim's table is not built because a dataset it needs (claim key ``data``) is
  not in the data mirror; ``not run`` — the table is not built at this scale, the ``note`` says why.

Where the paper states a number (a numeric ``paper_value``, or ``paper_values`` per group), ``paper_in_ci`` says
whether it lies inside our interval. ``cpu_robust`` says whether a decided verdict survives the interval widened
by √2, the 95 % interval of where the mean of an independent replication of the same design falls (Cumming and
Maillardet, 2006, "Confidence intervals and replication: where will the next mean fall?", Psychological Methods
11(3), 217–227). Another instruction set changes the rounding of every run, which over many rounds can move a CNN
run's result as far as a new draw of its training noise (the seed still fixes the data and initialisation, so a
rerun is at most an independent replication): a verdict that the √2-wide interval still decides is not expected to
flip with the CPU, one marked ``could flip`` may.

Intervals (scipy.stats.t): per-run values → mean ± t₀.₉₇₅,n−1 · s/√n (a paired difference is the interval of the
per-seed differences); aggregated rows (mean, std, n) → the same from the summary; the difference of two
aggregated rows → Welch's interval (Welch–Satterthwaite degrees of freedom), which ignores any pairing and so is
conservative where the runs pair.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["TESTS", "UNJUDGED_SCALES", "t_interval", "t_interval_from_stats", "welch_interval", "estimate",
           "claim_sample", "boundaries", "COLUMNS", "runs_machine", "bound_note", "paper_number", "replication_robust",
           "verdict", "evaluate_claims", "claims_markdown", "rewrite_readme_block", "claim_tables",
           "validate_claims", "main", "NoRowsError"]

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
_N_COLUMNS = ("n_seeds", "runs", "seeds", "n")
_REQUIRED = ("id", "where", "quote", "quantity", "paper_value", "test")


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
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
    return mean, mean - half, mean + half


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
    if exact:
        lo = hi = mean
        method = "exact"
    elif not math.isfinite(lo):
        method = "none"
    return {"ours": mean, "ci_low": lo, "ci_high": hi, "n": n, "interval": method}


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


def replication_robust(ours: float, low: float, high: float, test: Mapping[str, Any]) -> bool | None:
    """Whether a decided verdict still holds on the interval widened by √2 about our value.

    mean ± √2 · (half-width) is the 95 % interval of where the mean of an independent replication of the same
    design falls (Cumming and Maillardet, 2006, Psychological Methods 11(3), 217–227; exactly so for a z-interval,
    for a t-interval up to the t quantile's uncertainty). A rerun on another instruction set changes at worst every
    run's rounding, i.e. is such a replication; a verdict this wider interval still decides is not expected to
    flip with the CPU.

    Returns
    -------
    bool or None
        None for an undecided verdict or no interval.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    v = verdict(low, high, test)
    if v == "inconclusive":
        return None
    w = math.sqrt(2.0)
    return verdict(ours - w * (ours - low), ours + w * (high - ours), test) == v


def _test_text(test: Mapping[str, Any]) -> str:
    tol = float(test.get("tolerance", 0.0))
    txt = TESTS[test["op"]]
    if tol == 0:
        txt = txt.replace(" − t", "").replace(" + t", "")
    return txt.replace("v", f"{float(test['value']):g}").replace("t", f"{tol:g}")


def validate_claims(claims: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Check every claim's keys and test before any job runs.

    Raises
    ------
    ValueError
        Naming the key path (``claims.<paper>[i].<key>``) of the first problem: a missing key, a duplicate id,
        an unknown test op or a quantity without ``table`` or ``a``.
    """
    seen = set()
    for paper, items in claims.items():
        for i, c in enumerate(items):
            path = f"claims.{paper}[{i}]"
            for key in _REQUIRED:
                if key not in c:
                    raise ValueError(f"{path}: missing key {key!r}")
            if c["id"] in seen:
                raise ValueError(f"{path}.id: duplicate claim id {c['id']!r}")
            seen.add(c["id"])
            if c["test"].get("op") not in TESTS:
                raise ValueError(f"{path}.test.op: {c['test'].get('op')!r} is not one of {sorted(TESTS)}")
            for key in ("table", "a"):
                if key not in c["quantity"]:
                    raise ValueError(f"{path}.quantity: missing key {key!r}")


def claim_tables(claims: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Every table path the claims read, in first-use order."""
    return list(dict.fromkeys(c["quantity"]["table"] for items in claims.values() for c in items))


COLUMNS = ["claim", "paper", "where", "quote", "quantity", "paper_value", "test", "ours", "ci_low", "ci_high", "n",
           "interval", "verdict", "scale", "note", "paper_in_ci", "cpu_robust", "config", "machine"]


def evaluate_claims(claims: Mapping[str, Sequence[Mapping[str, Any]]], tables: Mapping[str, pd.DataFrame], *,
                    scale: str, confidence: float = 0.95, missing_data: Sequence[str] = (),
                    not_run: Mapping[str, str] | None = None, config: str = "",
                    machine: str = "") -> pd.DataFrame:
    """One row per claim (per group of ``quantity.each``): our value, interval and verdict.

    Parameters
    ----------
    claims : dict
        Paper key → its claims (the merged ``claims:`` config; see ``config/papers/afl.yaml``). A claim's
        optional ``data`` lists the registry datasets its table needs; optional ``paper_values`` maps a group to
        the number the paper states for it (:func:`paper_number`).
    tables : dict
        Table path → its content, for the tables built at this scale.
    scale : str
        The configuration's ``scale``; :data:`UNJUDGED_SCALES` get no verdict (``not judged``).
    confidence : float
        Coverage of the intervals.
    missing_data : sequence of str
        Registry datasets the data mirror lacks: a claim whose table is absent and whose ``data`` names one of
        them reads ``needs data: <names>``.
    not_run : dict, optional
        Table path → why it is not built (e.g. ``not among claims_papers``); any other absent table is ``not
        built at <scale> scale``.
    config : str
        The configuration files of the run (e.g. ``config/quick.yaml config/decisive.yaml``), put on every row.
    machine : str
        The machine(s) the runs were made on (:func:`runs_machine`), put on every row.

    Returns
    -------
    DataFrame
        Columns :data:`COLUMNS`: the claim, our value with ``ci_low``/``ci_high`` and ``n`` runs, the
        ``verdict``; ``note`` (the bound an inconclusive verdict reached, or why a claim did not run),
        ``paper_in_ci`` (``inside``/``outside`` where the paper states a number and we have an interval, else
        empty), ``cpu_robust`` (``yes``/``could flip`` for a decided verdict, :func:`replication_robust`; ``exact``
        for a deterministic one; else empty), ``scale``, ``config`` and ``machine``.

    Raises
    ------
    ValueError
        If a claim's quantity cannot be computed from its table (see :func:`estimate`). A filter that matches
        no row (that cell is not built at this scale) gives ``not run`` instead.
    """
    validate_claims(claims)
    missing = set(missing_data)
    not_run = dict(not_run or {})
    nothing = {"ours": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": 0, "interval": "none",
               "paper_in_ci": "", "cpu_robust": ""}
    rows = []
    for paper, items in claims.items():
        for c in items:
            q = c["quantity"]
            base = {"claim": c["id"], "paper": paper, "where": c["where"], "quote": c["quote"],
                    "quantity": q.get("description", ""), "paper_value": c["paper_value"],
                    "test": _test_text(c["test"]), "scale": scale, "config": config, "machine": machine}
            table = tables.get(q["table"])
            if table is None:
                lacking = [d for d in c.get("data", []) if d in missing]
                if lacking:
                    rows.append({**base, **nothing, "verdict": f"needs data: {', '.join(lacking)}",
                                 "note": "not in the data mirror"})
                else:
                    rows.append({**base, **nothing, "verdict": "not run",
                                 "note": not_run.get(q["table"], f"not built at {scale} scale")})
                continue
            groups = [("", table)]
            if "each" in q:
                cols = [q["each"]] if isinstance(q["each"], str) else list(q["each"])
                missing_cols = [col for col in cols if col not in table.columns]
                if missing_cols:
                    raise ValueError(f"claim {c['id']}: quantity.each names {missing_cols}, "
                                     f"not columns of {q['table']}")
                groups = [(",".join(f"{col}={_label(v)}" for col, v in zip(cols, key, strict=True)), sub)
                          for key, sub in table.groupby(cols, sort=True)]
            for g, sub in groups:
                claim = f"{c['id']}[{g}]" if g else c["id"]
                try:
                    est = estimate(sub, q, exact=bool(c.get("exact", False)), confidence=confidence,
                                   context=f"claim {c['id']}")
                except NoRowsError:  # e.g. a smaller scale leaves out that fraction, head or task
                    rows.append({**base, "claim": claim, **nothing, "verdict": "not run",
                                 "note": f"cell not built at {scale} scale"})
                    continue
                rows.append({**base, "claim": claim, **est, **_judge(c, g, est, scale)})
    return pd.DataFrame(rows, columns=COLUMNS)


def _judge(claim: Mapping[str, Any], group: str, est: Mapping[str, Any], scale: str) -> dict[str, str]:
    """Verdict, note, paper_in_ci and cpu_robust of one computed row."""
    lo, hi, ours, n = est["ci_low"], est["ci_high"], est["ours"], est["n"]
    has_ci = math.isfinite(lo) and math.isfinite(hi)
    pv = paper_number(claim, group)
    inside = "" if pv is None or not has_ci or est["interval"] == "exact" else (
        "inside" if lo <= pv <= hi else "outside")
    if scale in UNJUDGED_SCALES:
        return {"verdict": "not judged", "note": "", "paper_in_ci": inside, "cpu_robust": ""}
    v = verdict(lo, hi, claim["test"])
    unit = "points" if "points" in str(claim["quantity"].get("description", "")) else ""
    note = bound_note(ours, lo, hi, n, unit) if v == "inconclusive" else ""
    if est["interval"] == "exact":
        robust = "exact"
    else:
        r = replication_robust(ours, lo, hi, claim["test"])
        robust = "" if r is None else "yes" if r else "could flip"
    return {"verdict": v, "note": note, "paper_in_ci": inside, "cpu_robust": robust}


def runs_machine(run_files: Sequence[Any]) -> str:
    """The CPUs a set of runs was made on, from their ``run.json`` (``environment.cpu``), for the verdict heading.

    Parameters
    ----------
    run_files : sequence of path
        ``run.json`` files; unreadable ones, and runs that record no CPU, are skipped.

    Returns
    -------
    str
        ``"<model> (<ATen kernel level>, portable_cpu on|off): <n> runs"`` per distinct machine, ``"; "``-joined,
        most runs first; empty for no readable file.
    """
    import json
    from collections import Counter

    seen: Counter[str] = Counter()
    for f in run_files:
        try:
            with open(f, encoding="utf-8") as fh:
                env = json.load(fh).get("environment") or {}
        except (OSError, ValueError):
            continue
        cpu = env.get("cpu") or {}
        if not cpu:
            continue
        portable = (env.get("reproducibility") or {}).get("portable_cpu")
        seen[f"{cpu.get('model') or '?'} ({cpu.get('torch_capability') or '?'}, portable_cpu "
             f"{'on' if portable else 'off'})"] += 1
    return "; ".join(f"{m}: {k} runs" for m, k in seen.most_common())


def _label(v: Any) -> str:
    return f"{v:g}" if isinstance(v, int | float | np.integer | np.floating) else str(v)


def _num(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.4g}" if abs(x) < 0.01 and x != 0 else f"{x:.2f}"


def _notes(r: Any) -> str:
    """The notes cell of a row: the bound or reason, the paper's number against our interval, CPU sensitivity."""
    parts = [str(r.note)] if isinstance(r.note, str) and r.note else []
    if r.paper_in_ci in ("inside", "outside"):
        parts.append(f"paper's value {r.paper_in_ci} our interval")
    if r.cpu_robust == "could flip":
        parts.append("could flip on another CPU (√2-wider replication interval undecided)")
    return "; ".join(parts)


def claims_markdown(t: pd.DataFrame, machine: str = "") -> str:
    """The verdict table in Markdown: one row per claim, the quoted sentence below the table.

    Parameters
    ----------
    t : DataFrame
        Output of :func:`evaluate_claims` (a file written before the columns ``note``, ``paper_in_ci``,
        ``cpu_robust`` and ``config`` existed renders with them empty).
    machine : str
        The machine the runs were made on (e.g. ``AMD EPYC (AVX512)``), named in the heading; empty: the table's
        ``machine`` column, if any.
    """
    t = t.copy()
    for col in ("note", "paper_in_ci", "cpu_robust", "config", "machine"):
        if col not in t.columns:
            t[col] = ""
        t[col] = t[col].fillna("").astype(str)
    scale = ", ".join(sorted(set(t["scale"]))) or "–"
    counts = t["verdict"].value_counts()
    needs = sorted(k for k in counts.index if str(k).startswith("needs data"))
    summary = ", ".join(f"{counts[k]} {k}" for k in ("reproduced", "not reproduced", "inconclusive", "not judged",
                                                      *needs, "not run") if k in counts)
    configs = sorted({c for c in t["config"] if c})
    machine = machine or "; ".join(sorted({m for m in t["machine"] if m}))
    made = "; ".join(x for x in (f"config {' | '.join(f'`{c}`' for c in configs)}" if configs else "",
                                 f"runs made on {machine}" if machine else "") if x)
    lines = [f"**Verdicts at {scale} scale** ({summary}; 95 % t-interval over seeds)"
             + (f" — {made}" if made else ""), "",
             "| claim | paper | where | quantity | paper | test | ours [95 % CI] | runs | scale | verdict | notes |",
             "|---|---|---|---|---:|---|---:|---:|---|---|---|"]
    def cell(x: Any) -> str:  # a Markdown table cell: a "|" inside would end it
        return str(x).replace("|", "\\|")

    for r in t.itertuples():
        ours = "–" if not math.isfinite(r.ours) else (
            f"{_num(r.ours)} [{_num(r.ci_low)}, {_num(r.ci_high)}]" if math.isfinite(r.ci_low) else _num(r.ours))
        paper_val = r.paper_value if isinstance(r.paper_value, str) else _num(float(r.paper_value))
        lines.append(f"| {cell(r.claim)} | {r.paper} | {cell(r.where)} | {cell(r.quantity)} | {cell(paper_val)} | "
                     f"{cell(r.test)} | {ours} | {r.n} | {r.scale} | **{r.verdict}** | {cell(_notes(r))} |")
    lines += ["", "Quoted claims:", ""]
    for cid, q in dict(zip(t["claim"].str.replace(r"\[.*\]$", "", regex=True), t["quote"], strict=True)).items():
        lines.append(f"- `{cid}`: “{q}”")
    return "\n".join(lines) + "\n"


def _block(name: str = "") -> re.Pattern[str]:
    tag = re.escape(f"claims[{name}]") if name else "claims"
    return re.compile(rf"(<!-- {tag}:begin[^>]*-->\n)(.*?)(<!-- {tag}:end -->)", re.S)


def rewrite_readme_block(readme: str, block: str, name: str = "") -> str:
    """Replace the text between ``<!-- claims:begin ... -->`` and ``<!-- claims:end -->`` with ``block``.

    Parameters
    ----------
    readme, block : str
        The README's text and the Markdown the target ``claims`` wrote.
    name : str
        A named block instead (``<!-- claims[NAME]:begin ... -->`` … ``<!-- claims[NAME]:end -->``), e.g. the
        verdicts of a longer scale next to the quick scale's.

    Raises
    ------
    ValueError
        If the README has no such block, or more than one.
    """
    pattern = _block(name)
    found = pattern.findall(readme)
    if len(found) != 1:
        tag = f"claims[{name}]" if name else "claims"
        raise ValueError(f"README must hold exactly one '<!-- {tag}:begin -->' … '<!-- {tag}:end -->' block, "
                         f"found {len(found)}")
    return pattern.sub(lambda m: m.group(1) + block.rstrip("\n") + "\n" + m.group(3), readme)


def _number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.claims README.md results/tables/claims.md [--block NAME]``: regenerate a verdicts block.

    Rewrites, atomically, the text between ``<!-- claims:begin ... -->`` and ``<!-- claims:end -->`` (or a named
    block's markers) of the README with the Markdown the target ``claims`` wrote, so that no claim's number is
    copied by hand. Given ``claims.csv`` instead, renders it (:func:`claims_markdown`), keeping only the claims of
    ``--papers`` when given (e.g. a longer scale that ran one paper).

    Returns
    -------
    int
        0 on success (errors raise).
    """
    import argparse
    from pathlib import Path

    from fedshift.io import atomic_write

    ap = argparse.ArgumentParser(prog="python -m fedshift.claims", description=main.__doc__.splitlines()[0])
    ap.add_argument("readme", type=Path)
    ap.add_argument("claims", type=Path, help="claims.md as written, or claims.csv (rendered, --papers applies)")
    ap.add_argument("--block", default="", help="a named block, <!-- claims[NAME]:begin --> (default: the unnamed one)")
    ap.add_argument("--papers", default="", help="with claims.csv: only these papers' claims (comma-separated)")
    args = ap.parse_args(argv)
    if args.claims.suffix == ".csv":
        t = pd.read_csv(args.claims, dtype={"paper_value": str, "note": str, "paper_in_ci": str, "cpu_robust": str,
                                            "config": str, "machine": str}, keep_default_na=False,
                        na_values={c: ["", "nan"] for c in ("ours", "ci_low", "ci_high")})
        t["paper_value"] = [_number_or_text(v) for v in t["paper_value"]]  # as evaluate_claims gave it
        wanted = [p for p in args.papers.split(",") if p]
        if wanted:
            if not set(wanted) <= set(t["paper"]):
                raise ValueError(f"--papers: {sorted(set(wanted) - set(t['paper']))} have no claims in {args.claims}")
            t = t[t["paper"].isin(wanted)]
        block = claims_markdown(t)
    elif args.papers:
        raise ValueError("--papers needs claims.csv (claims.md is already rendered)")
    else:
        block = args.claims.read_text(encoding="utf-8")
    text = rewrite_readme_block(args.readme.read_text(encoding="utf-8"), block, args.block)
    with atomic_write(args.readme) as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
