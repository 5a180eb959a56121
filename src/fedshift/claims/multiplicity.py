"""The p-value behind each verdict, the multiplicity policy over the family of tests, and claims counted as claims.

Each computed row carries the p-value of the test behind its verdict (:func:`decision_p_value`); the policy is
Benjamini–Hochberg at 5 % over the family, Holm as a sensitivity column (:func:`adjust_multiplicity`, statsmodels),
with the exploratory rows a family of their own; rows with the same per-seed data are one comparison, counted once
per category (:func:`claim_counts`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fedshift.claims.verdicts import DECIDED, size_tolerance

__all__ = ["CATEGORIES", "MULTIPLICITY_ALPHA", "decision_p_value", "adjust_multiplicity", "category", "claim_counts",
           "multiplicity_text"]

#: The categories claims are counted in (:func:`category`): a judged claim at the paper's own work (work ratio
#: ≥ 1) or below it, or where the paper states no training length to compare with (``scale not stated``), a row
#: not built at this scale, a claim not yet judged, one whose data the mirror lacks, one that cannot be reproduced,
#: and a proxy experiment (a setting the paper does not have, never counted as the paper's claim).
CATEGORIES = ("paper settings", "reduced settings", "scale not stated", "not run", "not yet judged", "needs data",
              "cannot be reproduced", "proxy")
#: The family-wise level of the multiplicity policy (:func:`adjust_multiplicity`).
MULTIPLICITY_ALPHA = 0.05


def _one_sided(ours: float, se: float, df: float, bound: float, above: bool) -> float:
    """The p of the one-sided t-test that x lies above (``above``) or below ``bound``: H₀ is the other side."""
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


def adjust_multiplicity(t: pd.DataFrame, alpha: float = MULTIPLICITY_ALPHA) -> pd.DataFrame:
    """Rows with the same data marked as one comparison, the p-values adjusted per family, each row's category.

    The policy: Benjamini–Hochberg at ``alpha`` (5 %) over the family of tests, Holm's step-down at the same level
    as a sensitivity column (``statsmodels.stats.multitest.multipletests``, methods ``fdr_bh`` and ``holm``). Two
    families: *confirmatory*, every computed row (decided or inconclusive, proxies included) that is not
    exploratory, and *exploratory*, the rows whose claim carries ``exploratory`` (comparisons chosen after the data
    were seen), adjusted on their own so that they neither dilute nor borrow from the planned ones. A row whose data
    repeat an earlier row of its paper (the same value, interval and run count: the same per-seed sample) is that
    row's comparison (``same_as``); with the same test and the same p (the same hypothesis: a claim that also
    states a size can decide another one on the same data) it enters the family once (it takes the earlier row's
    adjusted p), otherwise it is a hypothesis of its own on the same data.

    Parameters
    ----------
    t : DataFrame
        :func:`evaluate_claims` rows (with ``p``, ``test``, ``exploratory``, ``proxy``, ``work_ratio``).
    alpha : float
        The level of both corrections.

    Returns
    -------
    DataFrame
        ``t`` with ``same_as`` (the claim row it repeats, else empty), ``family`` (``confirmatory``,
        ``exploratory`` or empty for a row without a p), ``p_bh`` and ``p_holm`` (adjusted p-values),
        ``multiplicity`` (for a decided row: ``kept under BH and Holm``, ``kept under BH, not Holm`` or ``not kept
        under BH``; ``no test (exact)`` for a deterministic one) and ``category`` (:func:`category`).
    """
    from statsmodels.stats.multitest import multipletests

    t = t.copy()
    same: list[str] = []
    first: dict[tuple[Any, ...], str] = {}
    for r in t.itertuples():
        key = (r.paper, *(round(float(x), 9) if math.isfinite(float(x)) else None
                          for x in (r.ours, r.ci_low, r.ci_high)), int(r.n))
        computed = math.isfinite(float(r.ours)) and int(r.n) > 0
        if computed and key in first:
            same.append(first[key])
        else:
            same.append("")
            if computed:
                first[key] = str(r.claim)
    t["same_as"] = same
    tests = dict(zip(t["claim"], t["test"], strict=True))
    p = pd.to_numeric(t["p"], errors="coerce")
    p_of = dict(zip(t["claim"], p, strict=True))
    repeat = [bool(s) and tests.get(s) == tst and math.isclose(p_of[s], pv, rel_tol=1e-12)
              for s, tst, pv in zip(t["same_as"], t["test"], p, strict=True)]
    t["family"] = np.where(p.notna(), np.where(t["exploratory"].fillna("").astype(str) != "", "exploratory",
                                               "confirmatory"), "")
    t["p_bh"], t["p_holm"] = np.nan, np.nan
    for fam in ("confirmatory", "exploratory"):
        members = t.index[(t["family"] == fam) & ~pd.Series(repeat, index=t.index)]
        if len(members):
            t.loc[members, "p_bh"] = multipletests(p[members].to_numpy(), alpha=alpha, method="fdr_bh")[1]
            t.loc[members, "p_holm"] = multipletests(p[members].to_numpy(), alpha=alpha, method="holm")[1]
    by_claim = t.set_index("claim")
    for i in t.index[pd.Series(repeat, index=t.index) & t["family"].ne("")]:
        t.loc[i, ["p_bh", "p_holm"]] = by_claim.loc[t.at[i, "same_as"], ["p_bh", "p_holm"]].to_numpy(dtype=float)

    def kept(r: Any) -> str:
        if r.verdict not in DECIDED:
            return ""
        if not math.isfinite(float(r.p_bh)):
            return "no test (exact)" if r.interval == "exact" else ""
        if r.p_bh >= alpha:
            return "not kept under BH"
        return "kept under BH and Holm" if r.p_holm < alpha else "kept under BH, not Holm"

    t["multiplicity"] = [kept(r) for r in t.itertuples()]
    t["category"] = [category(r) for r in t.to_dict("records")]
    return t


def category(row: Mapping[str, Any]) -> str:
    """The category a row is counted in (:data:`CATEGORIES`), from its verdict, proxy mark and work ratio."""
    v = str(row.get("verdict", ""))
    if v.startswith("needs data"):
        return "needs data"
    if v.startswith("cannot be reproduced"):
        return "cannot be reproduced"
    if v in ("not yet judged", "not run"):
        return v
    if row.get("proxy"):
        return "proxy"
    r = row.get("work_ratio", float("nan"))
    if not isinstance(r, int | float) or not math.isfinite(r):
        return "scale not stated"
    return "paper settings" if r >= 0.999 else "reduced settings"


def claim_counts(t: pd.DataFrame) -> pd.DataFrame:
    """Claims counted as claims: per category, the claim ids, the distinct comparisons and the rows behind them.

    A *comparison* is a row whose data no earlier row of its paper holds (``same_as`` empty): rows with the same
    per-seed sample are one comparison, whatever their claim ids. A claim with a ``status`` is one comparison of
    its own (no data yet).

    Parameters
    ----------
    t : DataFrame
        :func:`evaluate_claims` rows (``category``, ``same_as``, ``verdict``, ``p_bh``, ``p_holm``,
        ``exploratory`` and ``interval``; a table without ``category`` raises).

    Returns
    -------
    DataFrame
        One row per category of :data:`CATEGORIES` that occurs, in that order: ``category``, ``claim ids`` (distinct
        ids, a row's id without its group), ``comparisons``, ``rows``, ``exploratory`` (comparisons among them that
        are exploratory), ``decided`` (decided comparisons), ``kept under BH`` and ``kept under Holm`` (decided
        comparisons whose adjusted p is below :data:`MULTIPLICITY_ALPHA`, or which are exact).

    Raises
    ------
    KeyError
        If ``t`` lacks the columns of :func:`adjust_multiplicity`.
    """
    t = t.assign(_id=t["claim"].astype(str).str.split("[").str[0],
                 _first=t["same_as"].fillna("").astype(str).eq(""),
                 _expl=t["exploratory"].fillna("").astype(str).ne(""))
    rows = []
    for cat in CATEGORIES:
        g = t[t["category"] == cat]
        if g.empty:
            continue
        first = g[g["_first"]]
        dec = first[first["verdict"].isin(DECIDED)]
        exact = dec["interval"].astype(str).eq("exact")
        rows.append({"category": cat, "claim ids": g["_id"].nunique(), "comparisons": len(first), "rows": len(g),
                     "exploratory": int(first["_expl"].sum()), "decided": len(dec),
                     "kept under BH": int(((pd.to_numeric(dec["p_bh"]) < MULTIPLICITY_ALPHA) | exact).sum()),
                     "kept under Holm": int(((pd.to_numeric(dec["p_holm"]) < MULTIPLICITY_ALPHA) | exact).sum())})
    return pd.DataFrame(rows, columns=["category", "claim ids", "comparisons", "rows", "exploratory", "decided",
                                       "kept under BH", "kept under Holm"])


def multiplicity_text(t: pd.DataFrame) -> str:
    """The multiplicity policy in one paragraph, with this table's numbers (for the verdicts page and README)."""
    lines = []
    for fam in ("confirmatory", "exploratory"):
        g = t[(t["family"] == fam) & pd.to_numeric(t["p_bh"], errors="coerce").notna()]
        if g.empty:
            continue
        p_of = dict(zip(t["claim"], pd.to_numeric(t["p"], errors="coerce"), strict=True))
        repeats = sum(bool(s) and math.isclose(p_of.get(s, math.nan), float(pv), rel_tol=1e-12)
                      for s, pv in zip(g["same_as"].fillna("").astype(str), g["p"], strict=True))
        dec = g[g["verdict"].isin(DECIDED)]
        lines.append(f"{fam.capitalize()} family: {len(g) - repeats} tests; of its {len(dec)} decided rows "
                     f"{int((dec['p_bh'] < MULTIPLICITY_ALPHA).sum())} are kept under BH, "
                     f"{int((dec['p_holm'] < MULTIPLICITY_ALPHA).sum())} under Holm")
    return ("Multiplicity: each computed row's p is that of the test behind its verdict, twice the one-sided p "
            "(p < 0.05 exactly when its 95 % interval decides it); Benjamini–Hochberg at 5 % over each family, "
            "Holm at 5 % beside it as a sensitivity check (statsmodels `multipletests`); rows with the same data "
            "and the same test count once; an exact (deterministic) row has no test. " + ". ".join(lines) + ".")
