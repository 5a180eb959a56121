"""A claim's work against the paper's: rounds × clients × local steps × data fraction, ours over the paper's.

A claim's ``work`` gives both sides, each factor a number or arithmetic of numbers and ``@<config key path>`` terms
read from the configuration that ran (:func:`work_ratio`); :func:`validate_work` checks its keys before any job runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["WORK_FACTORS", "validate_work", "work_ratio"]

#: The work factors whose product is a run's work (:func:`work_ratio`).
WORK_FACTORS = ("rounds", "clients", "local_steps", "data_fraction")


def validate_work(work: Any, path: str) -> None:
    """Check a claim's ``work``: ``paper`` and ``ours`` each give every one of :data:`WORK_FACTORS`.

    Parameters
    ----------
    work : mapping
        The claim's ``work`` (keys ``paper``, ``ours``, optional ``source`` and ``group_keys``).
    path : str
        Its key path (``claims.<paper>[i].work``), named in errors.

    Raises
    ------
    ValueError
        Naming the key path of the first problem: an unknown or missing key, a factor that is neither a number > 0
        nor an expression, or ``group_keys`` that is not a list of ``{group, key}``.
    """
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
