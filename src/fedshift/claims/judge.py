"""Every claim judged at the scale that ran: our value, its interval over seeds and the verdict, one row each.

:func:`evaluate_claims` reads each claim's table, computes its quantity's interval
(:mod:`~fedshift.claims.intervals`), judges it (:mod:`~fedshift.claims.verdicts`) and adds the p-values adjusted
for multiplicity (:mod:`~fedshift.claims.multiplicity`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedshift.claims.intervals import NoRowsError, estimate
from fedshift.claims.multiplicity import adjust_multiplicity, decision_p_value
from fedshift.claims.spec import claim_test_text, effect_text, validate_claims
from fedshift.claims.verdicts import (
    COMPUTED,
    UNJUDGED_SCALES,
    bound_note,
    effect_verdict,
    paper_number,
    replication_robust,
    size_tolerance,
    verdict,
)
from fedshift.claims.work import work_ratio

__all__ = ["COLUMNS", "evaluate_claims", "group_label", "claim_groups"]

COLUMNS = ["claim", "paper", "where", "quote", "quantity", "paper_value", "test", "ours", "ci_low", "ci_high", "n",
           "interval", "verdict", "scale", "note", "paper_in_ci", "cpu_robust", "config", "machine", "direction",
           "effect", "claimed", "se", "df", "p", "p_bh", "p_holm", "multiplicity", "family", "same_as", "category",
           "proxy", "exploratory", "work_ratio", "work"]


def group_label(value: Any) -> str:
    """A group's value as a claim row names it (``experiment=mnist``, ``p=0.5``): a number in ``g`` format."""
    return f"{value:g}" if isinstance(value, int | float | np.integer | np.floating) else str(value)


def claim_groups(table: pd.DataFrame, quantity: Mapping[str, Any],
                 context: str = "claim") -> list[tuple[str, dict[str, str], pd.DataFrame]]:
    """The groups a claim is judged in: one per value of ``quantity.each`` (sorted), or the whole table.

    Parameters
    ----------
    table : DataFrame
        The claim's table.
    quantity : dict
        The claim's ``quantity``; ``each`` (a column or list of columns) splits the table.
    context : str
        Named in errors (``claim <id>``).

    Returns
    -------
    list of (str, dict, DataFrame)
        The group's name as the row names it (``col=value,...``; empty without ``each``), its labels (column →
        :func:`group_label`) and its rows.

    Raises
    ------
    ValueError
        If ``each`` names a column the table lacks.
    """
    if "each" not in quantity:
        return [("", {}, table)]
    cols = [quantity["each"]] if isinstance(quantity["each"], str) else list(quantity["each"])
    missing_cols = [col for col in cols if col not in table.columns]
    if missing_cols:
        raise ValueError(f"{context}: quantity.each names {missing_cols}, not columns of {quantity['table']}")
    out = []
    for key, sub in table.groupby(cols, sort=True):
        labels = {col: group_label(v) for col, v in zip(cols, key, strict=True)}
        out.append((",".join(f"{col}={label}" for col, label in labels.items()), labels, sub))
    return out


# Over 80 lines: its NumPy docstring documents each of 8 parameters and the columns (40 lines); the body is 42.
def evaluate_claims(claims: Mapping[str, Sequence[Mapping[str, Any]]], tables: Mapping[str, pd.DataFrame], *,
                    scale: str, confidence: float = 0.95, missing_data: Sequence[str] = (),
                    not_run: Mapping[str, str] | None = None, config: str = "",
                    machine: str = "", settings: Mapping[str, Any] | None = None,
                    adjust: bool = True) -> pd.DataFrame:
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
    settings : dict, optional
        The run's merged configuration: a claim's ``work`` reads our side's ``@<key path>`` values from it
        (:func:`work_ratio`); without it such a claim raises.
    adjust : bool
        Apply :func:`adjust_multiplicity` to the rows (False: a caller that gathers several calls' rows, e.g.
        :func:`fedshift.claims.rejudge.rejudge_snapshot`, applies it once to all of them).

    Returns
    -------
    DataFrame
        Columns :data:`COLUMNS`: the claim, our value with ``ci_low``/``ci_high`` and ``n`` runs, the
        ``verdict`` (:func:`effect_verdict`) and ``direction`` (the test's alone, :func:`verdict`); ``note`` (the
        bound an inconclusive verdict reached, the margin of an equivalence, the paper's size a smaller effect falls
        short of, or why a claim did not run), ``paper_in_ci`` (``inside``/``outside`` where the paper states a
        number and we have an interval, else empty), ``claimed`` (that number, NaN where the paper states none),
        ``effect`` (the claim's margin, tolerance and reason in words), ``cpu_robust`` (``yes``/``could flip`` for a
        decided verdict, :func:`replication_robust`; ``exact`` for a deterministic one; else empty), ``scale``,
        ``config`` and ``machine``; ``se`` and ``df`` (the estimate's standard error and t degrees of freedom),
        ``p`` (:func:`decision_p_value`), ``proxy`` and ``exploratory`` (the claim's reason, else empty),
        ``work_ratio`` and ``work`` (:func:`work_ratio`), and the columns of :func:`adjust_multiplicity`
        (``p_bh``, ``p_holm``, ``multiplicity``, ``family``, ``same_as``, ``category``). A claim with a
        ``status`` reads no table: its verdict is ``needs data: <datasets>`` or ``cannot be reproduced``, its
        ``note`` the claim's ``reason``.

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
    nothing.update({"se": np.nan, "df": np.nan, "p": np.nan})
    rows = []
    for paper, items in claims.items():
        for i, c in enumerate(items):
            work_path = f"claims.{paper}[{i}].work"
            ratio, work = work_ratio(c.get("work"), settings, work_path)
            base = {"claim": c["id"], "paper": paper, "where": c["where"], "quote": c["quote"],
                    "paper_value": c["paper_value"], "scale": scale, "config": config, "machine": machine,
                    "direction": "", "effect": effect_text(c.get("effect")), "claimed": np.nan,
                    "proxy": c.get("proxy", ""), "exploratory": c.get("exploratory", ""), "work_ratio": ratio,
                    "work": work}
            if "status" in c:
                v = f"needs data: {', '.join(c['data'])}" if c["status"] == "needs data" else c["status"]
                rows.append({**base, **nothing, "quantity": "", "test": "", "verdict": v, "note": c["reason"]})
                continue
            q = c["quantity"]
            base.update({"quantity": q.get("description", ""), "test": claim_test_text(c["test"])})
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
            for g, _, sub in claim_groups(table, q, context=f"claim {c['id']}"):
                claim = f"{c['id']}[{g}]" if g else c["id"]
                try:
                    est = estimate(sub, q, exact=bool(c.get("exact", False)), confidence=confidence,
                                   context=f"claim {c['id']}")
                except NoRowsError:  # e.g. a smaller scale leaves out that fraction, head or task
                    rows.append({**base, "claim": claim, **nothing, "verdict": "not run",
                                 "note": f"cell not built at {scale} scale"})
                    continue
                ratio, work = work_ratio(c.get("work"), settings, work_path, g)
                judged = _judge(c, g, est, scale)
                p_value = (decision_p_value(est["ours"], est["se"], est["df"], c["test"], judged["verdict"],
                                            paper_number(c, g), c.get("effect"))
                           if judged["verdict"] in COMPUTED else np.nan)
                rows.append({**base, "claim": claim, **est, **judged, "p": p_value, "work_ratio": ratio, "work": work})
    out = pd.DataFrame(rows, columns=COLUMNS)
    return adjust_multiplicity(out) if adjust else out


def _judge(claim: Mapping[str, Any], group: str, est: Mapping[str, Any], scale: str) -> dict[str, str]:
    """Verdict, direction, note, paper_in_ci and cpu_robust of one computed row."""
    lo, hi, ours, n = est["ci_low"], est["ci_high"], est["ours"], est["n"]
    has_ci = math.isfinite(lo) and math.isfinite(hi)
    pv = paper_number(claim, group)
    inside = "" if pv is None or not has_ci or est["interval"] == "exact" else (
        "inside" if lo <= pv <= hi else "outside")
    if scale in UNJUDGED_SCALES:
        return {"verdict": "not judged", "direction": "", "note": "", "paper_in_ci": inside, "cpu_robust": "",
                "claimed": np.nan if pv is None else pv}
    effect = claim.get("effect") or {}
    direction = verdict(lo, hi, claim["test"])
    v = effect_verdict(lo, hi, claim["test"], pv, effect)
    unit = "points" if "points" in str(claim["quantity"].get("description", "")) else ""
    u = f" {unit}" if unit else ""
    if v == "inconclusive":
        note = bound_note(ours, lo, hi, n, unit)
    elif v == "equivalent to zero":
        note = f"within ±{float(effect['margin']):g}{u} of 0 (margin: {effect.get('reason', '')})"
    elif v == "smaller than claimed":
        tol = size_tolerance(effect.get("size_tolerance"), pv)
        edge = f"{pv:g}" if tol is None else f"{pv:g} {'−' if pv > 0 else '+'} {tol:g}"
        note = f"interval short of the paper's {edge}{u}"
    else:
        note = ""
    if est["interval"] == "exact":
        robust = "exact"
    else:
        r = replication_robust(ours, lo, hi, claim["test"], pv, effect)
        robust = "" if r is None else "yes" if r else "could flip"
    return {"verdict": v, "direction": direction, "note": note, "paper_in_ci": inside, "cpu_robust": robust,
            "claimed": np.nan if pv is None else pv}
