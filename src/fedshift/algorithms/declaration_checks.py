"""Reading and checking algorithm declarations (:mod:`fedshift.algorithms.declarations`): ranges, facts, factories.

Torch-free, as the declarations: the plan checks a config's values against the declared ranges (:func:`range_errors`)
and choices (:func:`choice_errors`) and reads each declaration spelled out (:func:`declaration_facts`); the registry
checks, when an algorithm module is imported, that a factory agrees with its declaration (:func:`check_factory`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedshift.algorithms.declarations import (
    LOOPS,
    MODEL_PARTS,
    PACKAGE_DIR,
    SIDE_INFORMATION,
    AlgorithmDeclaration,
    CodeDefault,
    Interval,
    code_only,
    settings_bounds,
    settings_fields,
    type_text,
)

__all__ = ["factors", "range_errors", "choice_text", "choice_errors", "keyword_signature", "same_type",
           "check_factory", "checked_facts",
           "Declaration", "declaration_facts"]

_INF = float("inf")


def factors(key: str) -> list[str]:
    """The knobs of a bound's key: ``"prox_mu"`` → one; a cross-knob product ``"client_lr*prox_mu"`` → both."""
    return [k.strip() for k in key.split("*")]


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _must(rng: Interval) -> str:
    """``rng`` as a requirement: ``>= 1``, ``> 0``, ``1``, ``in [0, 1)``."""
    if rng.lo == rng.hi:
        return f"{rng.lo:g}"
    if rng.hi == _INF:
        return f"{'>=' if rng.lo_closed else '>'} {rng.lo:g}"
    if rng.lo == -_INF:
        return f"{'<=' if rng.hi_closed else '<'} {rng.hi:g}"
    return f"in {rng}"


def range_errors(bounds: Mapping[str, Interval], values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, message)`` for every declared range that ``values`` leaves: the one reading of a ``bounds`` declaration.

    A key ``"a*b"`` bounds the product of two knobs (FedNova's η·μ < 1): checked when every factor has a number in
    ``values``. A list or tuple of numbers (FedMM's ``(μ₁, μ₂)``) is checked element by element; None and other
    values are left to the type check.
    """
    out = []
    for key, rng in bounds.items():
        names = factors(key)
        nums = [values.get(k) for k in names]
        if len(nums) == 1 and isinstance(nums[0], list | tuple):
            for i, v in enumerate(nums[0]):
                if _number(v) and v not in rng:
                    out.append((key, f"hyper-parameter '{key}[{i}]' = {v!r} is outside its range {rng} ({key}[{i}] "
                                     f"must be {_must(rng)})"))
            continue
        if not all(_number(v) for v in nums):
            continue
        value = functools.reduce(lambda a, b: a * b, nums)
        if value not in rng:
            parts = f" ({', '.join(f'{k} = {v!r}' for k, v in zip(names, nums, strict=True))})" if len(nums) > 1 else ""
            out.append((key, f"hyper-parameter {key!r} = {value!r}{parts} is outside its range {rng} "
                             f"({' * '.join(names)} must be {_must(rng)})"))
    return out


def choice_text(choices: tuple[Any, ...]) -> str:
    """The allowed values of a choice, as a refusal names them: ``'auto', 'batched', 'sequential'``."""
    return ", ".join(repr(c) for c in choices)


def choice_errors(choices: Mapping[str, tuple[Any, ...]], values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, message)`` for every string of ``values`` outside its declared choices (a ``Literal`` type).

    ``choices``: key → allowed values (:func:`~fedshift.algorithms.declarations.settings_choices`). Only strings
    are checked: a value of another type (``init_lambda``'s vector) is left to the type check.
    """
    return [(k, f"hyper-parameter {k!r} = {values[k]!r} is not one of {choice_text(allowed)}")
            for k, allowed in choices.items()
            if isinstance(values.get(k), str) and values[k] not in allowed]


def keyword_signature(factory: Callable[..., Any], skip: Mapping[str, Any] | set[str]) -> dict[str, tuple[Any, Any]]:
    """A factory's keyword-only parameters less those in ``skip`` (its fixed and data-derived keywords).

    Returns name → (type, default), the default :data:`dataclasses.MISSING` for a required one; an annotation that
    cannot be resolved is kept as written.
    """
    try:
        hints = typing.get_type_hints(factory)
    except Exception:  # noqa: BLE001 — an unresolvable annotation only loses its type check
        hints = {}
    sig = inspect.signature(factory)
    return {n: (hints.get(n, p.annotation if p.annotation is not p.empty else Any),
                dataclasses.MISSING if p.default is p.empty else p.default)
            for n, p in sig.parameters.items()
            if p.kind is p.KEYWORD_ONLY and n not in skip}


def same_type(a: Any, b: Any) -> bool:
    """Whether two annotations name the same type, as Python resolves them.

    ``typing.Sequence[float]`` is ``collections.abc.Sequence[float]``, ``Optional[X]`` is ``X | None``; two code-only
    types (callables) are the same.
    """
    if a == b or (code_only(a) and code_only(b)):
        return True
    oa, ob = typing.get_origin(a), typing.get_origin(b)
    unions = (typing.Union, types.UnionType)
    if oa in unions and ob in unions:
        aa, bb = typing.get_args(a), typing.get_args(b)
        return len(aa) == len(bb) and all(any(same_type(x, y) for y in bb) for x in aa)
    if oa is None or oa != ob:
        return False
    aa, bb = typing.get_args(a), typing.get_args(b)
    return len(aa) == len(bb) and all(same_type(x, y) for x, y in zip(aa, bb, strict=True))


def _same_default(declared_default: Any, default: Any, hint: Any) -> bool:
    if isinstance(declared_default, CodeDefault):
        return getattr(default, "__name__", None) == declared_default.name
    if code_only(hint):
        return declared_default is default or declared_default == default
    return type(declared_default) is type(default) and declared_default == default


def check_factory(name: str, factory: Callable[..., Any], settings: type, skip: Mapping[str, Any]) -> None:
    """Refuse a factory whose keyword-only parameters are not its settings' fields, with the same types and defaults.

    ``skip``: the factory's fixed and data-derived keywords, left out.

    Raises
    ------
    ValueError
        Naming the algorithm, the factory, the settings and the first difference.
    """
    params = keyword_signature(factory, skip)
    fields = settings_fields(settings)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(factory).parameters.values())
    where = f"algorithm {name!r}: factory {factory.__module__}.{factory.__qualname__} and settings " \
            f"{settings.__module__}.{settings.__qualname__}"
    undeclared = sorted(set(params) - set(fields))
    if undeclared:
        raise ValueError(f"{where}: the factory takes {undeclared}, which the settings do not declare")
    missing = sorted(set(fields) - set(params) - set(skip))
    if missing and not takes_any:
        raise ValueError(f"{where}: the settings declare {missing}, which the factory does not take")
    for key, (hint, default) in params.items():
        decl_hint, decl_default = fields[key]
        if not same_type(hint, decl_hint):
            raise ValueError(f"{where}: {key!r} is {hint!r} in the factory but {decl_hint!r} in the settings")
        if not _same_default(decl_default, default, hint):
            raise ValueError(f"{where}: {key!r} defaults to {default!r} in the factory but {decl_default!r} in the "
                             "settings")


def checked_facts(name: str, needs: Any, bounds: Any, loop: Any, model_parts: Any, cell: Any
              ) -> tuple[frozenset[str], dict[str, Interval], str, frozenset[str], str | None]:
    """An algorithm's declared facts, checked: (needs, ranges, loop, model parts, cell).

    Raises
    ------
    ValueError
        For an unknown side information, loop or model part, an unparsable interval or a malformed cell, naming the
        algorithm.
    """
    needs = frozenset(needs)
    if needs - SIDE_INFORMATION:
        raise ValueError(f"algorithm {name!r}: needs {sorted(needs - SIDE_INFORMATION)} not in the side-information "
                         f"vocabulary {sorted(SIDE_INFORMATION)}")
    if not isinstance(bounds, Mapping):
        raise ValueError(f"algorithm {name!r}: bounds must be a mapping name -> '[lo, hi)', got {bounds!r}")
    ranges = {}
    for key, text in bounds.items():
        try:
            ranges[key] = text if isinstance(text, Interval) else Interval.parse(text)
        except ValueError as err:
            raise ValueError(f"algorithm {name!r}: bounds[{key!r}]: {err}") from None
    if loop not in LOOPS:
        raise ValueError(f"algorithm {name!r}: loop must be one of {sorted(LOOPS)}, got {loop!r}")
    parts = frozenset(model_parts)
    if parts - MODEL_PARTS:
        raise ValueError(f"algorithm {name!r}: model_parts {sorted(parts - MODEL_PARTS)} not in {sorted(MODEL_PARTS)}")
    if cell is not None and not (isinstance(cell, str) and cell.count(":") == 1 and all(cell.split(":"))):
        raise ValueError(f"algorithm {name!r}: cell must be 'module:function', got {cell!r}")
    return needs, ranges, loop, parts, cell


@dataclass(frozen=True, kw_only=True)
class Declaration(AlgorithmDeclaration):
    """An :class:`AlgorithmDeclaration` checked and spelled out.

    Made by :func:`declaration_facts`; the registry's :func:`~fedshift.algorithms.registry.declarations`.

    Attributes
    ----------
    bounds : mapping of str to Interval
        Every declared range: the settings' ``Annotated`` intervals and the declaration's own, parsed.
    path : Path
        The algorithm module's file.
    hparams : mapping
        The settings' fields (less ``fixed``) → type: the algorithm's config keys.
    defaults : mapping
        Those fields' defaults (a required field is left out).
    var_keywords : bool
        Whether a key outside ``hparams`` may be meant for the factory (False: the settings list every key).
    cell_keys : mapping of str to str
        The keys its cell hook reads itself → their type as text (``"float | None"``).
    cell_bounds : mapping of str to str
        Those keys' ranges, as interval text.
    """

    bounds: Mapping[str, Interval] = field(default_factory=dict)
    path: Path | None = None
    hparams: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    var_keywords: bool = False
    cell_keys: Mapping[str, str] = field(default_factory=dict)
    cell_bounds: Mapping[str, str] = field(default_factory=dict)


def declaration_facts(d: AlgorithmDeclaration) -> Declaration:
    """What :class:`AlgorithmDeclaration` ``d`` declares, checked and spelled out (:class:`Declaration`).

    Raises
    ------
    ValueError
        For a malformed declaration (:func:`checked_facts`), naming the algorithm.
    """
    needs, ranges, loop, parts, cell = checked_facts(d.name, d.needs, {**settings_bounds(d.settings), **d.bounds},
                                                     d.loop, d.model_parts, d.cell)
    fields = {k: v for k, v in settings_fields(d.settings).items() if k not in d.fixed}
    hook = d.cell_settings
    declared_as = {f.name: getattr(d, f.name) for f in dataclasses.fields(AlgorithmDeclaration)}  # every field
    return Declaration(
        **{**declared_as, "fixed": dict(d.fixed), "needs": needs, "bounds": ranges, "loop": loop,
           "model_parts": parts, "cell": cell, "cell_supplies": frozenset(d.cell_supplies)},
        path=PACKAGE_DIR.joinpath(*d.module.split(".")[1:]).with_suffix(".py"),
        hparams={k: t for k, (t, _) in fields.items()},
        defaults={k: v for k, (_, v) in fields.items() if v is not dataclasses.MISSING},
        cell_keys={k: type_text(t) for k, (t, _) in settings_fields(hook).items()} if hook is not None else {},
        cell_bounds={k: str(v) for k, v in settings_bounds(hook).items()} if hook is not None else {})
