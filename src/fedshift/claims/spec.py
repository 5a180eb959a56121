"""A claim as the config states it: its keys checked before any job runs, its test and effect in words.

Also what the workflow reads of the claims config: the tables the claims read (:func:`claim_tables`) and the
``config`` column of a run (:func:`config_label`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from fedshift.claims.verdicts import TESTS, size_tolerance, verdict
from fedshift.claims.work import validate_work

__all__ = ["STATUSES", "NOT_AMONG_CLAIMS_PAPERS", "validate_claims", "claim_test_text", "effect_text",
           "claim_tables", "config_label"]

_REQUIRED = ("id", "where", "quote", "quantity", "paper_value", "test")


def claim_test_text(test: Mapping[str, Any]) -> str:
    """A claim's test in words (:data:`~fedshift.claims.verdicts.TESTS` with its value and tolerance): ``x > 0``.

    A zero tolerance is left out (``x ≥ 5``, not ``x ≥ 5 − 0``).
    """
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
            for key in ("proxy", "exploratory"):
                if key in c and (not isinstance(c[key], str) or not c[key].strip()):
                    raise ValueError(f"{path}.{key}: must be a text saying why (the row is then marked {key})")
            if "work" in c:
                validate_work(c["work"], f"{path}.work")
            if "status" in c:
                _validate_status(c, path)
                if c["id"] in seen:
                    raise ValueError(f"{path}.id: duplicate claim id {c['id']!r}")
                seen.add(c["id"])
                continue
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
            if "effect" in c:
                _validate_effect(c, f"{path}.effect")


_EFFECT_KEYS = ("margin", "reason", "size_tolerance")

#: A claim's ``status`` where it is not judged from a table: its data are absent from the mirror (``data`` names
#: them, ``reason`` what the pipeline already builds for it), it cannot be reproduced (``reason`` says why), or its
#: data are in the mirror but no claim quantity computes it yet (``reason``: what is built and what is missing).
STATUSES = ("needs data", "cannot be reproduced", "not yet judged")


def _validate_status(claim: Mapping[str, Any], path: str) -> None:
    """A claim with a ``status`` (no table): id, where, quote, paper_value and reason; ``data`` for needs data."""
    for key in ("id", "where", "quote", "paper_value", "reason"):
        if key not in claim:
            raise ValueError(f"{path}: missing key {key!r} (a claim with status {claim['status']!r})")
    if claim["status"] not in STATUSES:
        raise ValueError(f"{path}.status: {claim['status']!r} is not one of {list(STATUSES)}")
    if claim["status"] == "needs data":
        data = claim.get("data")
        if not isinstance(data, list) or not data or not all(isinstance(d, str) for d in data):
            raise ValueError(f"{path}.data: a claim that needs data names the datasets it needs (a list)")
    if "quantity" in claim or "test" in claim:
        raise ValueError(f"{path}: a claim with status {claim['status']!r} has no quantity or test (it reads no "
                         "table); remove them or the status")


def _paper_numbers(claim: Mapping[str, Any]) -> list[float]:
    """Every number the paper states for a claim (its numeric ``paper_value`` and each of ``paper_values``)."""
    per_group = claim.get("paper_values") or {}
    values = list(per_group.values()) if isinstance(per_group, Mapping) else [e["value"] for e in per_group]
    pv = claim.get("paper_value")
    if isinstance(pv, int | float) and not isinstance(pv, bool):
        values.append(pv)
    return [float(v) for v in values]


def _validate_effect(claim: Mapping[str, Any], path: str) -> None:
    """A claim's ``effect``: margin (> 0, below every paper number, only where 0 fails the test), reason, tolerance."""
    effect = claim["effect"]
    if not isinstance(effect, Mapping):
        raise ValueError(f"{path}: must be a mapping with keys {list(_EFFECT_KEYS)}")
    unknown = sorted(set(effect) - set(_EFFECT_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; allowed: {list(_EFFECT_KEYS)}")
    if not isinstance(effect.get("reason"), str) or not effect["reason"].strip():
        raise ValueError(f"{path}.reason: the reason for the margin (and tolerance) is required")
    if "margin" not in effect:
        raise ValueError(f"{path}: missing key 'margin' (a number, or null where equivalence to zero decides nothing)")
    margin, numbers = effect["margin"], _paper_numbers(claim)
    if margin is not None:
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not margin > 0:
            raise ValueError(f"{path}.margin: {margin!r} is not a number > 0 (or null)")
        below = [v for v in numbers if v != 0 and abs(v) <= margin]
        if below:
            raise ValueError(f"{path}.margin: {margin:g} is not below the paper's value {below[0]:g}: equivalence to "
                             "zero within it would not rule the paper's effect out")
        if verdict(0.0, 0.0, claim["test"]) == "reproduced":
            raise ValueError(f"{path}.margin: 0 satisfies the claim's test ({claim_test_text(claim['test'])}), so "
                             "equivalence to zero would not contradict it; use margin: null")
    tol = effect.get("size_tolerance")
    if tol is not None:
        if isinstance(tol, bool) or not isinstance(tol, int | float | str):
            raise ValueError(f"{path}.size_tolerance: {tol!r} is not a number >= 0 or a percentage such as '25%'")
        if not any(v != 0 for v in numbers):
            raise ValueError(f"{path}.size_tolerance: the claim states no number (paper_value / paper_values) to "
                             "hold a size to")
        try:
            size_tolerance(tol, numbers[0])
        except ValueError as err:
            raise ValueError(f"{path}.size_tolerance: {err}") from None


def effect_text(effect: Mapping[str, Any] | None) -> str:
    """The ``effect`` column: the equivalence margin, the size tolerance and the reason, in words."""
    if not effect:
        return ""
    parts = ["no equivalence margin" if effect.get("margin") is None else f"equivalence margin ±{effect['margin']:g}"]
    if effect.get("size_tolerance") is not None:
        tol = effect["size_tolerance"]
        parts.append(f"size: the paper's value within {tol if isinstance(tol, str) else f'{tol:g}'}")
    return ", ".join(parts) + f" ({effect.get('reason', '')})"


def claim_tables(claims: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """Every table path the claims read, in first-use order."""
    return list(dict.fromkeys(c["quantity"]["table"] for items in claims.values() for c in items if "quantity" in c))


#: The ``note`` of a claim whose paper the run left out (``claims_papers``): the claims rule writes it, the README's
#: verdict counts leave such a paper out (:func:`fedshift.docsgen.verdict_counts`).
NOT_AMONG_CLAIMS_PAPERS = "not among claims_papers"


def config_label(files: Sequence[str], root: str) -> str:
    """The ``config`` column: the overlays a run named on its command line, as a reader of the verdicts can find them.

    Parameters
    ----------
    files : sequence of str
        The config files given with ``--configfile`` (Snakemake's ``workflow.overwrite_configfiles``), absolute or
        relative to the repository root (the working directory of ``snakemake`` run from it).
    root : str
        The repository root.

    Returns
    -------
    str
        The files separated by spaces: one inside the repository by its path from ``root``; one outside it by its
        file name and ``(outside the repository)`` (never the machine's own path); ``config/config.yaml`` when none
        is given (the base config always applies).
    """
    names = []
    for f in files:
        path = os.path.abspath(os.path.join(root, f))
        rel = os.path.relpath(path, root)
        inside = rel != os.pardir and not rel.startswith(os.pardir + os.sep)
        names.append(rel if inside else f"{os.path.basename(path)} (outside the repository)")
    return " ".join(names) or "config/config.yaml"
