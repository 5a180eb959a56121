"""Which registered algorithm runs in which cell of the shift matrix, read from its declarations alone.

Every registered algorithm (:func:`fedshift.algorithms.registry.declared_names`, plug-ins included) is a row, and
the matrix knows no algorithm by name: what a cell needs to know is declared on the algorithm's ``@register`` line
(:func:`fedshift.algorithms.registry.register`): ``needs`` (side information), ``loop`` (the common round or a
loop of its own), ``model_parts`` (a feature extractor and a head) and ``cell`` (the hook that builds it on a
cell's common budget). A cell (shift, algorithm, model) is "n/a" with its reason written in the table
(:func:`cell_status`, never a silent fallback) when

1. the algorithm needs side information the shift does not give (``needs``);
2. it trains through its own loop and declares no cell hook (``loop="own"``, no ``cell``), or its factory requires
   a keyword that neither the common round (:data:`OFFERED`), the cell's data (``BuildContext``), the hook
   (its ``supplies``) nor the configured grid and fixed settings give (:func:`keyword_gap`);
3. it needs model parts the matrix's model does not have (``model_parts`` ⊄ :data:`MODEL_PARTS` of the model:
   MLR is a head alone, the CNN has a feature extractor and a head).

The cell hook (``cell="module:function"``) is called as ``hook(name, context, instance, train, settings, seed,
**own)``: ``context`` the cell's :class:`~fedshift.algorithms.registry.BuildContext`, ``instance`` the shift's
seed (:class:`fedshift.shifts.Instance`), ``train`` the common round, ``settings`` the method's fixed settings and
grid value, ``own`` the settings named by the hook's keyword-only parameters (keys only the hook reads, such as the
DANN weight ν); it returns ``(algorithm, params0, clients)``, and ``algorithm.eval_params`` gives the matrix
model's parameters. A hook may name the factory keywords it sets itself in a ``supplies`` attribute, and the ranges
of its own keys in a ``bounds`` attribute (intervals, as ``register(..., bounds=...)``).

This module imports no torch: the plan (runs, n/a cells, validation) reads it. For an algorithm of the package, the
factory's keywords and its cell hook's keys, supplies and ranges come from its declaration
(:func:`fedshift.algorithms.registry.declarations`: ``cell_settings``, ``cell_supplies``); a plug-in's from its
imported factory and hook (``supplies`` and ``bounds`` attributes); hooks are imported only when asked for
(:func:`hook`, :func:`hook_keys`, the job).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["OFFERED", "MODEL_PARTS", "MODEL_MIN_SIDE", "declaration", "hook", "hook_keys", "keyword_gap", "cell_status",
           "entry_keys"]

#: Keywords the matrix supplies to every factory that asks for them (the common round).
OFFERED = frozenset({"clients_per_round", "local_epochs", "batch_size", "client_lr"})

#: The matrix's models → the parts they have (:data:`fedshift.algorithms.registry.MODEL_PARTS`): multinomial
#: logistic regression is a linear head on the pixels; the small CNN ``cnn2`` has conv features and a linear head.
MODEL_PARTS = {"logreg": frozenset({"head"}), "cnn2": frozenset({"features", "head"})}

#: The smallest square image side a model takes (px): ``cnn2`` has two 5×5 convolutions, each followed by a 2×2
#: max-pool, without padding, so side s leaves ((s − 4) // 2 − 4) // 2 ≥ 1 pixel only for s ≥ 16
#: (:class:`fedshift.models.TwoLayerCNN`); MLR takes any side.
MODEL_MIN_SIDE = {"cnn2": 16}

#: JSON schemas of the common round's keys (a grid or fixed entry may set them for any algorithm).
_OFFERED_SCHEMAS = {
    "clients_per_round": {"type": "integer", "minimum": 1}, "local_epochs": {"type": "integer", "minimum": 1},
    "batch_size": {"type": "integer", "minimum": 1}, "client_lr": {"type": "number", "exclusiveMinimum": 0}}


def declaration(name: str) -> Any:
    """What algorithm ``name`` declares: its imported spec when loaded (plug-ins), else its ``@register`` line read
    without importing (:func:`fedshift.algorithms.registry.declarations`).

    Raises
    ------
    KeyError
        For an unregistered name (listing the registered ones).
    """
    from fedshift.algorithms import registry

    if name in registry.ALGORITHMS:
        return registry.ALGORITHMS[name]
    found = registry.declarations().get(name)
    return found if found is not None else registry.get(name)


def hook(name: str) -> Callable[..., Any] | None:
    """The cell hook algorithm ``name`` declares (``register(..., cell="module:function")``), imported; None if none.

    A plug-in file is imported under a generated module name (:func:`fedshift.plugins.load_plugins`): a hook whose
    module is not importable by name is looked up in the module that registered the algorithm when that module's
    file is named after it (``cell="toy_dann:matrix_cell"`` in ``toy_dann.py``).

    Raises
    ------
    ValueError
        When the hook cannot be found, naming the algorithm and its declaration.
    """
    from fedshift.algorithms import registry

    spec = registry.get(name)
    if spec.cell is None:
        return None
    mod_name, fn = spec.cell.split(":")
    module = sys.modules.get(mod_name)
    if module is None:
        own = sys.modules.get(spec.module)
        if own is not None and Path(getattr(own, "__file__", "") or "").stem == mod_name.rpartition(".")[2]:
            module = own
        else:
            try:
                module = importlib.import_module(mod_name)
            except ImportError as err:
                raise ValueError(f"algorithm {name!r}: cannot import its cell hook {spec.cell!r}: {err}") from None
    found = getattr(module, fn, None)
    if not callable(found):
        raise ValueError(f"algorithm {name!r}: its cell hook {spec.cell!r} is not a function of {module.__name__}")
    return found


def hook_keys(name: str) -> dict[str, inspect.Parameter]:
    """The settings the cell hook of ``name`` reads itself: its keyword-only parameters (none without a hook)."""
    fn = hook(name)
    if fn is None:
        return {}
    return {n: p for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}


@dataclass(frozen=True)
class _Facts:
    """What a cell needs to know of algorithm ``name``'s factory and cell hook (:func:`_facts`)."""

    module: str
    loop: str
    fixed: frozenset[str]
    params: tuple[str, ...]  # the factory's parameters, in order
    required: frozenset[str]  # its keyword-only parameters after the first without a default
    has_hook: bool
    supplies: frozenset[str]
    bounds: dict[str, Any]
    hook_keys: dict[str, Any]  # the hook's keyword-only parameters -> annotation (a string when read from source)


def _imported_facts(name: str) -> _Facts:
    """:func:`_facts` from the imported spec and hook (:func:`fedshift.algorithms.registry.get`, :func:`hook`)."""
    from fedshift.algorithms import registry

    spec = registry.get(name)
    fn = hook(name)
    params = list(inspect.signature(spec.factory).parameters.values())
    required = {p.name for p in params[1:] if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    return _Facts(spec.module, spec.loop, frozenset(spec.fixed), tuple(p.name for p in params), frozenset(required),
                  fn is not None, frozenset(getattr(fn, "supplies", ())) if fn is not None else frozenset(),
                  dict(getattr(fn, "bounds", {}) or {}) if fn is not None else {},
                  {n: p.annotation for n, p in hook_keys(name).items()})


def _declared_facts(decl: Any) -> _Facts:
    """:func:`_facts` of a package algorithm from its declaration
    (:func:`fedshift.algorithms.registry.declarations`: no import, no torch)."""
    required = frozenset(k for k in decl.hparams if k not in decl.defaults)
    return _Facts(decl.module, decl.loop, frozenset(decl.fixed), (decl.builds_on, *decl.hparams), required,
                  decl.cell is not None, frozenset(decl.cell_supplies), dict(decl.cell_bounds), dict(decl.cell_keys))


def _facts(name: str) -> _Facts:
    """Algorithm ``name``'s factory and cell hook: from its declaration for an algorithm of the package
    (:func:`_declared_facts`: no import, no torch), else from the imported spec and hook (plug-ins).

    Raises
    ------
    KeyError
        For an unregistered name.
    ValueError
        For a cell hook that cannot be found (:func:`hook`).
    """
    from fedshift.algorithms import registry

    decl = registry.declarations().get(name)
    spec = registry.ALGORITHMS.get(name)
    if decl is not None and (spec is None or spec.module == decl.module):
        return _declared_facts(decl)
    return _imported_facts(name)


def keyword_gap(name: str, keys: Sequence[str] = ()) -> str | None:
    """Why algorithm ``name`` cannot be built in a cell, or None when it can.

    ``keys`` are the keys its grid values and fixed settings set. An own-loop algorithm needs a cell hook; a
    round algorithm without a hook is built on the model module (its factory's first parameter); every keyword
    its factory requires must be offered by the common round (:data:`OFFERED`), the cell's data
    (``BuildContext``), the hook (its ``supplies``) or ``keys``.
    """
    from fedshift.algorithms import registry

    facts = _facts(name)
    if facts.loop == "own" and not facts.has_hook:
        return (f"it trains through its own loop (loop='own' in {facts.module}) and declares no cell hook "
                "(register(..., cell='module:function')) for a common budget")
    if not facts.has_hook and (not facts.params or facts.params[0] != "module"):
        return "its factory does not take a model module and it declares no cell hook"
    required = set(facts.required) - set(facts.fixed)
    missing = required - OFFERED - set(keys) - set(facts.supplies) - set(registry.CONTEXT_FIELDS)
    return f"its factory needs {', '.join(sorted(missing))}, which no grid value or fixed setting gives" \
        if missing else None


def cell_status(name: str, shift: Any, keys: Sequence[str] = (), model: str | None = None) -> str | None:
    """None when the cell (shift, algorithm ``name``) runs with ``model``; else its "n/a: ..." text for the table.

    In this order: side information the shift does not give, a loop or keyword the cell cannot supply
    (:func:`keyword_gap`), model parts ``model`` lacks (``model`` None skips this check).
    """
    decl = declaration(name)
    missing = set(decl.needs) - set(shift.side_information)
    if missing:
        return f"n/a: needs {', '.join(sorted(missing))}, which the {shift.kind} shift does not give"
    gap = keyword_gap(name, keys)
    if gap:
        return f"n/a: {gap}"
    lacks = set(decl.model_parts) - MODEL_PARTS.get(model, set(decl.model_parts)) if model is not None else set()
    if lacks:
        return (f"n/a: needs the model's {' and '.join(sorted(lacks))} (register(..., model_parts=...)); "
                f"model {model} has {', '.join(sorted(MODEL_PARTS[model]))} only")
    return None


def _type_schema(annotation: Any, bound: str | None) -> dict[str, Any]:
    """A JSON schema of a hook keyword: its annotation (a string under ``from __future__ import annotations``) and
    its range (an interval of the hook's ``bounds``, :class:`~fedshift.algorithms.registry.Interval`; default
    ≥ 0, as every registered hyper-parameter)."""
    from fedshift.algorithms.registry import Interval

    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    rng = Interval.parse(bound).schema() if bound is not None else {"minimum": 0}
    for kind, json_type in (("float", "number"), ("int", "integer")):
        if text.startswith(kind):
            one = {"type": json_type, **rng}
            return {"anyOf": [one, {"type": "null"}]} if "None" in text else one
    if text.startswith("bool"):
        return {"type": "boolean"}
    return {}


def entry_keys(name: str) -> dict[str, dict[str, Any]]:
    """Keys besides the factory's that a grid or fixed entry of algorithm ``name`` may set, with their schemas.

    The common round (:data:`OFFERED`) for every algorithm (``"default"`` included) and the keyword-only
    parameters of the algorithm's cell hook (:func:`hook_keys`), typed by their annotations and ranged by the
    hook's ``bounds`` (``{"ess_fraction": "(0, 1]"}``, the notation of ``register(..., bounds=...)``). Read by
    generic validation through ``ShiftMatrixPaper.hparam_extras``.
    """
    out = dict(_OFFERED_SCHEMAS)
    if name != "default":
        facts = _facts(name)
        out |= {k: _type_schema(annotation, facts.bounds.get(k)) for k, annotation in facts.hook_keys.items()}
    return out
