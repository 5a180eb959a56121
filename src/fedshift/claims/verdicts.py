"""The verdict rules: a claim's tests, the verdict of an interval on its direction and size, and its robustness.

:func:`effect_verdict` applies the rules in order (:mod:`fedshift.claims` gives the verdicts in words);
:mod:`~fedshift.claims.intervals` computes the interval they judge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fedshift.claims.intervals import number_text

__all__ = ["TESTS", "UNJUDGED_SCALES", "DECIDED", "COMPUTED", "verdict", "effect_verdict", "size_tolerance",
           "boundaries", "bound_note", "paper_number", "replication_robust"]

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
#: The verdicts a computed row can have (the rest, ``not run``, ``needs data`` and ``not judged``, compare nothing).
COMPUTED = (*DECIDED, "inconclusive")


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
        if not math.isfinite(ours):
            return ""
        return f"{n} run{'s' if n != 1 else ''}, no interval (x = {number_text(ours)}{u})"
    return f"x within [{number_text(low)}, {number_text(high)}]{u} at {n} runs"


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
