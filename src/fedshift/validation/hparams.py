"""Typed hyper-parameter schemas of the registered algorithms, built from their declared settings.

Here, not in the registry: jobs import the registry, so an edit there would change every training job's code hash;
jobs never import :mod:`fedshift.validation`.
"""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["VAR_KEYWORDS", "hparam_types", "hparam_schema", "declared_bounds", "choice_refusal"]

#: Where a plug-in factory's ``**kwargs`` go (a declared algorithm's settings list every key): ``"module.qualname"`` →
#: ``(target, excluded)``, the function (``"module:qualname"``) whose keyword-only parameters the ``**kwargs`` may
#: hold, less ``excluded`` (the ones the factory passes itself). A signature alone cannot say what ``**kwargs``
#: accepts, so without an entry the algorithm's schema stays open (any further key passes); a plug-in declares its
#: own by adding an entry (``validation.VAR_KEYWORDS["mypkg.mymod.build_x"] = ("mypkg.base:build_y", ())``), or by
#: giving the factory a ``var_hparams`` attribute: a mapping name → type.
VAR_KEYWORDS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _resolve(target: str) -> Callable[..., Any]:
    module, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def hparam_types(name: str) -> tuple[dict[str, Any], bool]:
    """Every hyper-parameter algorithm ``name`` accepts by keyword, with its type, and whether that list is closed.

    A declared algorithm's are its settings' fields (:mod:`fedshift.algorithms.declarations`), read without
    importing the algorithm module: validating a config, as the workflow's plan does, imports no torch; the list is
    closed. An algorithm registered at run time on its register line (a plug-in, a test) is read from its imported
    factory: its keyword-only parameters less the name's fixed ones, plus, for a factory taking ``**kwargs``, the
    keyword-only parameters of the function they are passed to (:data:`VAR_KEYWORDS`, or the factory's
    ``var_hparams`` attribute), recursively.

    Returns
    -------
    types : dict
        Name → annotation (``Any`` or a string where unknown).
    closed : bool
        False when a ``**kwargs`` is not declared: any other key may be meant for it.

    Raises
    ------
    KeyError
        For an unregistered name.
    """
    from fedshift.algorithms import registry

    declared = registry.declarations().get(name)
    spec = registry.ALGORITHMS.get(name)
    if declared is not None and (spec is None or spec.module == declared.module):
        return dict(declared.hparams), True
    return _imported_hparam_types(name)


def _imported_hparam_types(name: str) -> tuple[dict[str, Any], bool]:
    """:func:`hparam_types` of an algorithm read from its imported factory (one registered at run time)."""
    from fedshift.algorithms import registry
    from fedshift.algorithms.declaration_checks import keyword_signature

    spec = registry.get(name)
    out = dict(spec.hparams)
    if spec.settings is not None:
        return out, True

    def forwarded(factory: Callable[..., Any], skip: set[str]) -> bool:
        params = inspect.signature(factory).parameters.values()
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return True
        declared = getattr(factory, "var_hparams", None)
        if isinstance(declared, Mapping):
            for k, v in declared.items():
                out.setdefault(k, v)
            return True
        entry = VAR_KEYWORDS.get(f"{factory.__module__}.{factory.__qualname__}")
        if entry is None:
            return False
        target = _resolve(entry[0])
        drop = skip | set(entry[1]) | {p.name for p in params}
        for k, (v, _) in keyword_signature(target, set(registry.CONTEXT_FIELDS)).items():
            if k not in drop:
                out.setdefault(k, v)
        return forwarded(target, drop)

    closed = forwarded(spec.factory, set(spec.fixed))
    for k in spec.fixed:
        out.pop(k, None)
    return out, closed


def _type_schema(hint: Any) -> Any:
    """The JSON schema of a value of annotation ``hint`` (numbers non-negative; a ``Literal`` one of its values;
    unknown hints: any value)."""
    if hint is Any or isinstance(hint, str):
        return {}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer", "minimum": 0}
    if hint is float:
        return {"type": "number", "minimum": 0}
    if hint is str:
        return {"type": "string"}
    if hint is type(None):
        return {"type": "null"}
    origin = typing.get_origin(hint) or hint
    args = typing.get_args(hint)
    if origin is typing.Literal:  # a declared choice: one of its values
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(h) for h in args]}
    if origin in (dict, Mapping) or origin is typing.Mapping:
        return {"type": "object"}
    if origin is tuple:
        if args and Ellipsis not in args:
            return {"type": "array", "prefixItems": [_type_schema(a) for a in args], "minItems": len(args),
                    "maxItems": len(args)}
        return {"type": "array", "items": _type_schema(args[0]) if args else {"type": "number", "minimum": 0}}
    if origin in (list, typing.Sequence) or (isinstance(origin, type) and issubclass(origin, typing.Sequence)
                                              if isinstance(origin, type) else False):
        return {"type": "array", "items": _type_schema(args[0]) if args else {}}
    if origin is Callable or getattr(origin, "__name__", "") == "Callable" or callable(hint) and hint is not type:
        return False  # set by the code that builds the algorithm, never by a config file
    return {}


def declared_bounds(name: str) -> dict[str, Any]:
    """The ranges algorithm ``name`` declares: key → ``registry.Interval``.

    From its settings and declaration, or a plug-in's register line.

    Read from the imported spec when ``name`` is registered in this process (a plug-in, or a built-in already
    imported), else from :func:`~fedshift.algorithms.registry.declarations` (the source, read without importing
    it): the same declaration either way (a test holds the two equal). Keys ``"a*b"`` bound a product of knobs.

    Raises
    ------
    KeyError
        For a name neither registered nor declared.
    """
    from fedshift.algorithms import registry

    spec = registry.ALGORITHMS.get(name)
    if spec is not None:
        return dict(spec.bounds)
    decl = registry.declarations().get(name)
    if decl is not None:
        return dict(decl.bounds)
    return dict(registry.get(name).bounds)


def choice_refusal(name: str, key: str, value: Any) -> str | None:
    """Why ``value`` of key ``key`` of algorithm ``name`` is refused, when it is a string outside the key's choices.

    The choices are the key's declared ``Literal`` type (:func:`~fedshift.algorithms.declarations.choices_of`, also in
    a union such as ``init_lambda``: a vector or ``'uniform'``/``'empirical'``); the config schema
    (:func:`hparam_schema`) refuses the value as well, this names the choices in the style of a range refusal.

    Returns
    -------
    str or None
        ``"'fast' is not one of 'auto', 'batched', 'sequential' (...)"``; None for a value of another type, a value
        among the choices, or a key without declared choices.
    """
    from fedshift.algorithms.declaration_checks import choice_text
    from fedshift.algorithms.declarations import choices_of

    hints, _ = hparam_types(name)
    allowed = choices_of(hints.get(key))
    if allowed is None or not isinstance(value, str) or value in allowed:
        return None
    return f"{value!r} is not one of {choice_text(allowed)} (the choices declared where {name!r} is registered)"


def _with_range(schema: Any, keywords: dict[str, float]) -> Any:
    """``schema`` with the range ``keywords`` on its numbers (also inside ``anyOf`` and array items)."""
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") in ("number", "integer"):
        bare = {k: v for k, v in schema.items() if k not in ("minimum", "exclusiveMinimum", "maximum",
                                                               "exclusiveMaximum")}
        return {**bare, **keywords}
    out = dict(schema)
    if "anyOf" in out:
        out["anyOf"] = [_with_range(s, keywords) for s in out["anyOf"]]
    if "items" in out:
        out["items"] = _with_range(out["items"], keywords)
    if "prefixItems" in out:
        out["prefixItems"] = [_with_range(s, keywords) for s in out["prefixItems"]]
    return out


def hparam_schema(name: str) -> dict[str, Any]:
    """A JSON schema of the hyper-parameter mapping of algorithm ``name`` (a grid value or fixed settings).

    Built from the registry (:func:`hparam_types`): one property per declared setting (a plug-in's: per keyword its
    factory accepts, through ``**kwargs`` too where declared), typed from its annotation — ``float`` a non-negative
    number (no registered hyper-parameter is a negative quantity: steps, penalties, radii), ``int`` a non-negative
    integer, a ``Literal`` one of its values (a declared choice: ``path``, ``w_gradient``), a tuple or sequence an
    array of those, a callable not settable from a config file — and no other key
    (unless a plug-in's ``**kwargs`` is undeclared). A key with a declared range (its settings' ``Annotated``
    interval or the declaration's ``bounds``, :func:`declared_bounds`) gets its JSON-schema keywords
    (:meth:`Interval.schema`) in place of the default non-negative minimum, on a number or on each number of an array
    (a pair of penalties ``(μ₁, μ₂)``); the message of a refusal then names the key path and the allowed range.
    Cross-knob ranges (``"a*b"``) are not JSON-schema keywords:
    :func:`fedshift.validation.sections.check_algorithm_entries` checks them. Other upper bounds are the config's, by
    key name (:data:`UPPER_BOUNDS`).
    """
    hints, closed = hparam_types(name)
    bounds = declared_bounds(name)
    props = {k: _type_schema(v) for k, v in sorted(hints.items())}
    for k, rng in bounds.items():
        if k in props:
            props[k] = _with_range(props[k], rng.schema())
    return {"type": "object", "properties": props, "additionalProperties": not closed}

