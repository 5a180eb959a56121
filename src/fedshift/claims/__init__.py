"""Headline claims as data: each paper's claims, our value with a 95 % interval over seeds, and a verdict.

A paper's config declares its claims (``claims: {<paper>: [...]}`` in ``config/papers/<paper>.yaml``); each
names the tidy table it reads (a table or figure CSV the pipeline already writes), the quantity (one cell, or
the difference of two cells, paired by seed where the table holds one row per run), the paper's value and the
test. :func:`evaluate_claims` computes, at the scale that ran, our value, a Student-t confidence interval over
seeds and the verdict:

* ``reproduced`` — the whole interval satisfies the test (the claim's direction) and, where the claim states a
  size (``effect.size_tolerance``), does not lie wholly short of the paper's value less that tolerance;
* ``smaller than claimed`` — the interval lies wholly on 0's side of the paper's value (less its tolerance): the
  claimed effect, at its size, is ruled out although its direction may not be;
* ``equivalent to zero`` — the whole interval lies within the claim's margin of 0 (``effect.margin``, below the
  paper's value): the two one-sided tests of equivalence reject a difference of the margin or more;
* ``not reproduced`` — the whole interval violates the test (the effect lies on the other side);
* ``inconclusive`` — the interval is wider than all of these (or one run gives no interval); its ``note`` states
  the bound reached (``x within [lo, hi] at n runs``: what the data rule out);
* ``not judged`` — a rehearsal or smoke run (too small to decide anything);
* ``needs data: <dataset>`` — the claim's table is not built because a dataset it needs (claim key ``data``) is
  not in the data mirror; ``not run`` — the table is not built at this scale, the ``note`` says why;
* a claim that reads no table has a ``status`` instead (:data:`STATUSES`: ``needs data``, ``cannot be
  reproduced``, ``not yet judged``) and a ``reason``, so that every headline claim has a row.

Claims are counted as claims: rows with the same per-seed data are one comparison (``same_as``), counted once per
category (:data:`CATEGORIES`: paper settings, reduced settings, ..., proxy; :func:`claim_counts`). Each computed
row carries the p-value of the test behind its verdict (:func:`decision_p_value`); the multiplicity policy is
Benjamini–Hochberg at 5 % over the family, Holm as a sensitivity column (:func:`adjust_multiplicity`, statsmodels),
with the ``exploratory`` rows (chosen after the data were seen) a family of their own. Each row's ``work_ratio``
is our rounds × clients × local steps × data fraction over the paper's (:func:`work_ratio`, our side read from the
configuration). :mod:`~fedshift.claims.rejudge` judges a committed snapshot again from its own tables.

The rules, with the order in which they apply, are :func:`effect_verdict`'s; ``direction`` keeps the verdict of the
test alone (reproduced / not reproduced / inconclusive), and each claim's ``effect`` (its margin, tolerance and the
reason for them) sits in its config next to its value. Where the paper states a number (a numeric ``paper_value``,
or ``paper_values`` per group), ``paper_in_ci`` says whether it lies inside our interval. ``cpu_robust`` says
whether a decided verdict survives the interval widened by √2, the 95 % interval of where the mean of an
independent replication of the same design falls (Cumming and Maillardet, 2006, "Confidence intervals and
replication: where will the next mean fall?", Psychological Methods 11(3), 217–227). Another instruction set
changes the rounding of every run, which over many rounds can move a CNN run's result as far as a new draw of its
training noise (the seed still fixes the data and initialisation, so a rerun is at most an independent
replication): a verdict that the √2-wide interval still decides is not expected to flip with the CPU, one marked
``could flip`` may. :func:`compare_runs` puts a second run's verdicts (the same claims under ``portable_cpu``)
beside each row: the measured counterpart.

Intervals (scipy.stats.t): per-run values → mean ± t₀.₉₇₅,n−1 · s/√n (a paired difference is the interval of the
per-seed differences); aggregated rows (mean, std, n) → the same from the summary; the difference of two
aggregated rows → Welch's interval (Welch–Satterthwaite degrees of freedom), which ignores any pairing and so is
conservative where the runs pair.

The package's modules: :mod:`~fedshift.claims.intervals` (a claim's quantity, its interval, its p-value and the
verdict's rules), :mod:`~fedshift.claims.render` (the Markdown table, the README block, the command line),
:mod:`~fedshift.claims.compare` (a second run's verdicts beside), :mod:`~fedshift.claims.rejudge` (a snapshot
judged again), and here the claims' validation, :func:`evaluate_claims` and the multiplicity policy; every name but
the rejudge module's is importable from ``fedshift.claims`` itself.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fedshift.claims.compare import COMPUTED, agreement_counts, compare_runs, read_claims_csv
from fedshift.claims.intervals import (
    TESTS,
    UNJUDGED_SCALES,
    NoRowsError,
    bound_note,
    boundaries,
    DECIDED,
    claim_sample,
    decision_p_value,
    effect_verdict,
    estimate,
    paper_number,
    replication_robust,
    size_tolerance,
    t_interval,
    t_interval_from_stats,
    verdict,
    welch_interval,
)
from fedshift.claims.render import (
    MARKS,
    _label,
    claims_markdown,
    machines_text,
    main,
    rewrite_readme_block,
    runs_machine,
    verdict_mark,
)

__all__ = ["TESTS", "UNJUDGED_SCALES", "DECIDED", "NOT_AMONG_CLAIMS_PAPERS", "config_label", "effect_verdict",
           "size_tolerance", "t_interval", "t_interval_from_stats", "welch_interval", "estimate",
           "claim_sample", "boundaries", "COLUMNS", "runs_machine", "machines_text", "bound_note", "paper_number",
           "replication_robust",
           "verdict", "evaluate_claims", "claims_markdown", "rewrite_readme_block", "claim_tables",
           "validate_claims", "main", "NoRowsError", "MARKS", "verdict_mark", "COMPUTED", "compare_runs",
           "agreement_counts", "read_claims_csv", "STATUSES", "CATEGORIES", "work_ratio",
           "adjust_multiplicity", "decision_p_value", "MULTIPLICITY_ALPHA", "claim_counts",
           "multiplicity_text"]

_REQUIRED = ("id", "where", "quote", "quantity", "paper_value", "test")


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
            for key in ("proxy", "exploratory"):
                if key in c and (not isinstance(c[key], str) or not c[key].strip()):
                    raise ValueError(f"{path}.{key}: must be a text saying why (the row is then marked {key})")
            if "work" in c:
                _validate_work(c["work"], f"{path}.work")
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
#: The categories claims are counted in (:func:`category`): a judged claim at the paper's own work (work ratio
#: ≥ 1) or below it, or where the paper states no training length to compare with (``scale not stated``), a row
#: not built at this scale, a claim not yet judged, one whose data the mirror lacks, one that cannot be reproduced,
#: and a proxy experiment (a setting the paper does not have, never counted as the paper's claim).
CATEGORIES = ("paper settings", "reduced settings", "scale not stated", "not run", "not yet judged", "needs data",
              "cannot be reproduced", "proxy")
#: The work factors whose product is a run's work (:func:`work_ratio`).
WORK_FACTORS = ("rounds", "clients", "local_steps", "data_fraction")
#: The family-wise level of the multiplicity policy (:func:`adjust_multiplicity`).
MULTIPLICITY_ALPHA = 0.05


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


def _validate_work(work: Any, path: str) -> None:
    allowed = {"paper", "ours", "source", "group_keys"}
    if not isinstance(work, Mapping) or set(work) - allowed or not {"paper", "ours"} <= set(work):
        raise ValueError(f"{path}: must be a mapping with keys paper and ours (optional: source, group_keys)")
    for side in ("paper", "ours"):
        got = work[side]
        if not isinstance(got, Mapping) or set(got) != set(WORK_FACTORS):
            raise ValueError(f"{path}.{side}: must give exactly {list(WORK_FACTORS)}")
        for k, v in got.items():
            ok = isinstance(v, str) and v.strip() or (
                isinstance(v, int | float) and not isinstance(v, bool) and v > 0)
            if not ok:
                raise ValueError(f"{path}.{side}.{k}: {v!r} is neither a number > 0 nor an expression")
    keys = work.get("group_keys", [])
    if not isinstance(keys, list) or not all(isinstance(e, Mapping) and set(e) == {"group", "key"}
                                             and isinstance(e["key"], str) for e in keys):
        raise ValueError(f"{path}.group_keys: must be a list of {{group, key}}: a row's group (its values, as the "
                         "row names them) and the text {key} stands for")


class _NoGroup(LookupError):
    """A work path names a group field, and the row has no group (the claim as a whole, not computed)."""


_REF = re.compile(r"@([A-Za-z0-9_.{}-]+)")
_FIRST = re.compile(r"@\(([^()]*)\)")


def _first_value(settings: Mapping[str, Any], alternatives: str, path: str) -> float:
    """``@(a.b, c.d, 60000)``: the first key path that holds a number, else the last item if it is a number.

    The configuration leaves a key out where a default applies (an experiment's rounds fall back to its paper's
    ``defaults``; FedMM's ``source_size`` null means all the data), so a work path names its fallbacks in order.
    """
    items = [x.strip() for x in alternatives.split(",") if x.strip()]
    for item in items:
        try:
            return float(item)
        except ValueError:
            pass
        try:
            return _config_value(settings, item, path)
        except ValueError:
            continue
    raise ValueError(f"{path}: none of {items} is a number in the configuration")


def _config_value(settings: Mapping[str, Any], ref: str, path: str) -> float:
    """The number at a dotted config key path (``fedmm.tasks.digits.train.rounds``)."""
    node: Any = settings
    for part in ref.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ValueError(f"{path}: config key {ref!r} not found (at {part!r})")
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise ValueError(f"{path}: config key {ref!r} is {node!r}, not a number")
    return float(node)


def _arithmetic(expr: str, path: str) -> float:
    """The value of a text of numbers, + − × ÷ and parentheses (no names): an ``ast`` walk, never ``eval``."""
    import ast
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"{path}: {expr!r} is not arithmetic of numbers and @config.key.paths")

    try:
        return walk(ast.parse(expr, mode="eval"))
    except SyntaxError:
        raise ValueError(f"{path}: {expr!r} is not arithmetic of numbers and @config.key.paths") from None


def _work_value(value: Any, settings: Mapping[str, Any] | None, fields: Mapping[str, str], path: str) -> float:
    if not isinstance(value, str):
        return float(value)
    try:
        text = value.format(**fields)
    except KeyError as err:
        if not fields:  # the claim as a whole (a row not computed): its groups' fields are unknown
            raise _NoGroup(str(err)) from None
        raise ValueError(f"{path}: {value!r} names the group field {err} that this row does not have") from None
    if settings is None and "@" in text:
        raise LookupError(text)
    text = _FIRST.sub(lambda m: repr(_first_value(settings or {}, m.group(1), path)), text)
    text = _REF.sub(lambda m: repr(_config_value(settings or {}, m.group(1), path)), text)
    got = _arithmetic(text, path)
    if not got > 0:
        raise ValueError(f"{path}: {value!r} is {got:g}, not > 0")
    return got


def work_ratio(work: Mapping[str, Any] | None, settings: Mapping[str, Any] | None,
               path: str = "work", group: str = "") -> tuple[float, str]:
    """Our run's work relative to the paper's: Π ours / Π paper over rounds × clients × local steps × data fraction.

    Parameters
    ----------
    work : dict or None
        The claim's ``work``: ``paper`` and ``ours``, each giving every one of :data:`WORK_FACTORS` as a number or
        an arithmetic text whose ``@<dotted config key path>`` terms are read from ``settings`` (so that our side
        follows the configuration that ran, e.g. ``"@fedmm.tasks.digits.heads.dann.rounds"``; ``@(a.b, c.d, 1)``
        takes the first of several paths that holds a number, else the literal last item); a path may hold a
        row's group fields in braces (``@wafl.experiments.{experiment}.train.rounds``), and ``{key}`` the text
        ``group_keys`` (a list of ``{group, key}``) gives the row's group (its values, as the row names them, or
        one of them, e.g. the head ``dann`` of ``head=dann,p=1``). ``source``: where in the paper
        its side's numbers are stated.
    settings : dict or None
        The merged configuration of the run.
    path : str
        The key path named in errors.
    group : str
        The row's group (``experiment=mnist``), empty for a claim without ``each``.

    Returns
    -------
    ratio, text : float, str
        NaN and ``""`` where the claim gives no ``work`` (and NaN with a text saying so where ``settings`` is
        needed but not given, or where the work needs ``{key}`` and ``group_keys`` does not list the row);
        ``text`` lists each factor that differs, ``ours/paper``, or ``as the paper``.

    Raises
    ------
    ValueError
        Naming the key path of a reference the configuration does not hold, or a text that is not arithmetic.
    """
    if not work:
        return float("nan"), ""
    fields = {k: v for k, _, v in (part.partition("=") for part in group.split(",") if part)}
    bare = ",".join(fields.values())
    keys = {str(e["group"]): e["key"] for e in work.get("group_keys") or []}
    hit = bare if bare in keys else next((v for v in fields.values() if v in keys), None)  # all values, or one
    if hit is not None:
        fields["key"] = keys[hit]
    elif keys and group and any("{key}" in str(v) for side in ("paper", "ours") for v in work[side].values()):
        # a row the claim's group_keys do not list (e.g. Table 1's CIFAR-10 rows where only its Fashion-MNIST rows
        # state the paper's work): said on the row, not guessed and not a failed claims job
        return float("nan"), "not stated for this row"
    try:
        sides = {side: {k: _work_value(v, settings, fields, f"{path}.{side}.{k}") for k, v in work[side].items()}
                 for side in ("paper", "ours")}
    except _NoGroup:
        return float("nan"), ""
    except LookupError:
        return float("nan"), "not computed (no configuration given)"
    ratio = math.prod(sides["ours"][k] / sides["paper"][k] for k in WORK_FACTORS)
    def num(x: float) -> str:
        return f"{x:,.0f}" if x >= 1 and float(x).is_integer() else f"{x:.3g}"

    parts = [f"{k.replace('_', ' ')} {num(sides['ours'][k])}/{num(sides['paper'][k])}" for k in WORK_FACTORS
             if not math.isclose(sides["ours"][k], sides["paper"][k])]
    return ratio, ", ".join(parts) or "as the paper"


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
            raise ValueError(f"{path}.margin: 0 satisfies the claim's test ({_test_text(claim['test'])}), so "
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


def _effect_text(effect: Mapping[str, Any] | None) -> str:
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


COLUMNS = ["claim", "paper", "where", "quote", "quantity", "paper_value", "test", "ours", "ci_low", "ci_high", "n",
           "interval", "verdict", "scale", "note", "paper_in_ci", "cpu_robust", "config", "machine", "direction",
           "effect", "claimed", "se", "df", "p", "p_bh", "p_holm", "multiplicity", "family", "same_as", "category",
           "proxy", "exploratory", "work_ratio", "work"]


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
                    "direction": "", "effect": _effect_text(c.get("effect")), "claimed": np.nan,
                    "proxy": c.get("proxy", ""), "exploratory": c.get("exploratory", ""), "work_ratio": ratio,
                    "work": work}
            if "status" in c:
                v = f"needs data: {', '.join(c['data'])}" if c["status"] == "needs data" else c["status"]
                rows.append({**base, **nothing, "quantity": "", "test": "", "verdict": v, "note": c["reason"]})
                continue
            q = c["quantity"]
            base.update({"quantity": q.get("description", ""), "test": _test_text(c["test"])})
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
                ratio, work = work_ratio(c.get("work"), settings, work_path, g)
                judged = _judge(c, g, est, scale)
                p_value = (decision_p_value(est["ours"], est["se"], est["df"], c["test"], judged["verdict"],
                                            paper_number(c, g), c.get("effect"))
                           if judged["verdict"] in (*DECIDED, "inconclusive") else np.nan)
                rows.append({**base, "claim": claim, **est, **judged, "p": p_value, "work_ratio": ratio, "work": work})
    out = pd.DataFrame(rows, columns=COLUMNS)
    return adjust_multiplicity(out) if adjust else out


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
