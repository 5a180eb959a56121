"""The algorithm registry: registered name → factory of a :class:`~fedshift.core.base.FederatedAlgorithm`.

What an algorithm is — its hyper-parameters (a settings dataclass: types, defaults, ranges), the side information
it needs, its loop, model parts and shift-matrix hook — is declared without torch in
``fedshift.algorithms.decl.<module>`` (:mod:`fedshift.algorithms.declarations`). The algorithm module links each
declaration to its factory by one line::

    @register(DECLARATIONS[0])          # from fedshift.algorithms.decl.fedprox import DECLARATIONS
    def build_fedprox(module, *, mu: float, squared: bool = True, **fedavg_kwargs): ...

and :func:`register` checks at import that the factory's keyword-only parameters are the settings' fields, with the
same types and defaults. Papers and the configuration refer to algorithms by name. Everything that builds an
algorithm — every paper and every shift-matrix cell — calls :func:`build` ``(name, context, **hparams)``: the config's
keys are the settings' fields (checked: names, types and declared ranges), and what the data gives (the model, the
number of clients and domains, the target label marginal T, the clients' label marginals S, ...) comes from one typed
:class:`BuildContext`, taken by each factory that names it. The planning side reads :func:`declarations` (no torch).

An algorithm outside the package is a *plug-in*: a file or module whose ``@register`` lines run when
:func:`load_plugins` imports it (config ``algorithm_plugins: [path/to/file.py]``; the workflow and every job load
them before anything else, :func:`fedshift.contract.load_papers`). It declares its algorithm the same way (a
declaration with a settings dataclass) or on its register line (``register("name", needs=..., bounds=...)``, the
hyper-parameters then read from the factory's signature). Its runs' code hash covers its file (:func:`plugin_file`).

Same idea as FedJAX's algorithm factories (a function closing over hyper-parameters that returns
``FederatedAlgorithm(init, apply)``), with a name → factory table in front.
"""


from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import pkgutil
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedshift import plugins
from fedshift.algorithms.declaration_checks import (
    Declaration,
    check_factory,
    checked_facts,
    choice_errors,
    declaration_facts,
    factors,
    keyword_signature,
    range_errors,
)
from fedshift.algorithms.declarations import (
    LOOPS,
    MODEL_PARTS,
    SIDE_INFORMATION,
    AlgorithmDeclaration,
    Interval,
    choices_of,
    declared,
    settings_bounds,
    settings_choices,
    settings_fields,
)

__all__ = ["AlgorithmSpec", "BuildContext", "CONTEXT_FIELDS", "build", "ALGORITHMS", "SIDE_INFORMATION", "LOOPS",
           "MODEL_PARTS", "Interval", "Declaration", "check_ranges", "range_errors", "register", "get", "names",
           "declarations", "declared_names", "algorithm_modules", "load_plugins", "plugin_file"]


@dataclass(frozen=True)
class BuildContext:
    """What the data gives an algorithm's factory: the data-derived keyword arguments, never config keys.

    :func:`build` passes each field that is set (not None) to a factory with a keyword parameter of that name; a
    config (grid, fixed settings, a paper's hyper-parameters) may not set one.

    Attributes
    ----------
    module : nn.Module or object
        The model the factory builds on (its first positional argument); for the SGDA/FedMM family the network
        directions (:func:`fedshift.algorithms.sgda_local.network_directions`).
    num_clients : int, optional
        Clients in the federation (SCAFFOLD's and FedDyn's per-client state, DRFA's λ over clients).
    num_domains : int, optional
        Domains p (AFL, AgnosticFedAvg: the length of the mixture weight λ).
    domain_sizes : sequence of int, shape (p,), optional
        Training examples per domain (AFL's empirical mixture).
    client_ids : sequence of int, optional
        The ids of the clients, in order (FedMM's per-client dual variables).
    target_label_marginal : array_like, shape (K,), optional
        The target's label marginal T (FedPALS; side information ``target_label_marginal``).
    client_label_marginals : array_like, shape (M, K), optional
        Each client's label marginal S_i, rows in client order (FedPALS).
    """

    module: Any
    num_clients: int | None = None
    num_domains: int | None = None
    domain_sizes: Any = None
    client_ids: Any = None
    target_label_marginal: Any = None
    client_label_marginals: Any = None


#: The data-derived keyword names (:class:`BuildContext`'s fields less ``module``): not hyper-parameters.
CONTEXT_FIELDS = tuple(f for f in BuildContext.__dataclass_fields__ if f != "module")


#: The facts of a :class:`~fedshift.algorithms.declaration_checks.Declaration` read on an :class:`AlgorithmSpec`.
#: The declaration's facts a spec reads through (every field of :class:`Declaration`; ``factory`` is the spec's own).
_DECLARED = frozenset(f.name for f in dataclasses.fields(Declaration))


@dataclass(frozen=True)
class AlgorithmSpec:
    """One registered algorithm: its declaration, checked and spelled out, and the factory registered under it.

    The declaration's facts are read on the spec itself (``spec.name``, ``spec.bounds``, ...): ``name`` (a plain
    identifier), ``module`` (the module that registered it), ``fixed`` (keyword arguments the name fixes, not
    settable through ``build``), ``hparams`` (the algorithm's typed hyper-parameters, its config keys: the settings'
    fields, or for a plug-in declared on its register line the factory's keyword-only parameters, less ``fixed`` and
    the data-derived :data:`CONTEXT_FIELDS`), ``needs`` (side information, :mod:`fedshift.shifts`: the shift matrix
    marks a cell "n/a" when its shift does not give all of it), ``bounds`` (name → :class:`Interval`), ``loop``
    (:data:`LOOPS`), ``model_parts`` (:data:`MODEL_PARTS`; empty: any model), ``cell`` (``"module:function"`` of its
    hook for a caller with a common budget, imported only when called) and ``settings`` (its settings dataclass; None
    for a plug-in declared on its register line).

    Attributes
    ----------
    declaration : Declaration
        What it declares (:class:`~fedshift.algorithms.declaration_checks.Declaration`; for a built-in algorithm the
        one :func:`declarations` reads without importing it).
    factory : callable
        ``factory(*args, **hparams) -> FederatedAlgorithm``, refusing a value outside ``bounds`` on every call.
    """

    declaration: Declaration
    factory: Callable[..., Any]

    def __getattr__(self, key: str) -> Any:
        if key in _DECLARED:
            return getattr(self.declaration, key)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")

    def build(self, *args: Any, **hparams: Any) -> Any:
        """Check ``hparams`` against the factory's keyword-only parameters and types, then call it.

        Raises
        ------
        ValueError
            For an unknown or fixed hyper-parameter, or a value whose type does not match the annotation
            (``float`` accepts int but not bool), naming the algorithm and key.
        """
        params = inspect.signature(self.factory).parameters
        accepts_any = self.settings is None and any(p.kind is p.VAR_KEYWORD for p in params.values())
        for key, value in hparams.items():
            if key in self.fixed:
                raise ValueError(f"algorithm {self.name!r}: {key!r} is fixed to {self.fixed[key]!r} by the name")
            if key in CONTEXT_FIELDS and key in params:  # data-derived (BuildContext), typed there
                continue
            if key not in self.hparams:
                if accepts_any:
                    continue
                raise ValueError(f"algorithm {self.name!r}: unknown hyper-parameter {key!r}; "
                                 f"known: {sorted(self.hparams)}")
            allowed = choices_of(self.hparams[key])
            for _, msg in choice_errors({key: allowed} if allowed is not None else {}, {key: value}):
                raise ValueError(f"algorithm {self.name!r}: {msg}")
            if not _matches(value, self.hparams[key]):
                raise ValueError(f"algorithm {self.name!r}: hyper-parameter {key!r} = {value!r} is not "
                                 f"of type {getattr(self.hparams[key], '__name__', self.hparams[key])}")
        check_ranges(self.name, hparams)
        return self.factory(*args, **self.fixed, **hparams)


def check_ranges(name: str, values: Mapping[str, Any]) -> None:
    """Refuse a hyper-parameter of algorithm ``name`` outside its declared range.

    The ranges are its settings' ``Annotated`` intervals and its declaration's ``bounds``.

    Called by :meth:`AlgorithmSpec.build` and by every registered factory on a direct call (:func:`register` wraps
    it), so a library user who calls a factory directly meets the same ranges as the config schema
    (:func:`fedshift.validation.hparam_schema`).

    Raises
    ------
    ValueError
        ``algorithm 'name': hyper-parameter 'key' = value is outside its range [lo, hi) (key must be ...)``.
    """
    spec = ALGORITHMS.get(name)
    for _, msg in range_errors(spec.bounds if spec is not None else {}, values):
        raise ValueError(f"algorithm {name!r}: {msg}")


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the annotation ``hint`` (unknown or generic hints accept anything)."""
    if hint is Any or isinstance(hint, str):
        return True
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (bool, str):
        return isinstance(value, hint)
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    return True


#: Registered name → spec. Filled by the ``@register`` lines as algorithm modules are imported; :func:`get`
#: and :func:`names` import every module of :mod:`fedshift.algorithms` first.
ALGORITHMS: dict[str, AlgorithmSpec] = {}


def _checked_calls(factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory`` wrapped to refuse, on every call, a keyword (given or defaulted) outside its declared range.

    The ranges are those of each name it is registered under whose fixed arguments the call gives
    (``range_checks``: (name, fixed, bounds)).

    A factory that reads a value otherwise than as given says how its values are checked by a ``range_values``
    attribute, ``range_values(kwargs) -> kwargs``: FedPALS's λ = ∞ (allowed on a direct call), the SGDA family's μ
    (one number for the pair).

    It refuses as well, whatever the name, a string outside the choices (a ``Literal`` type) of a keyword-only
    parameter (``choice_checks``: the factory's own, such as the ``kind`` a name fixes, and its settings' fields)."""
    if hasattr(factory, "range_checks"):
        return factory
    defaults = {n: p.default for n, p in inspect.signature(factory).parameters.items()
                if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}

    @functools.wraps(factory)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for _, msg in choice_errors(checked.choice_checks, {**defaults, **kwargs}):
            raise ValueError(f"{factory.__module__}.{factory.__qualname__}: {msg}")
        values = getattr(checked, "range_values", lambda kw: kw)({**defaults, **kwargs})
        for name, fixed, bounds in checked.range_checks:
            if all(k in kwargs and kwargs[k] == v for k, v in fixed.items()):
                for _, msg in range_errors(bounds, values):
                    raise ValueError(f"algorithm {name!r}: {msg}")
        return factory(*args, **kwargs)

    checked.range_checks = []
    checked.choice_checks = {k: c for k, (t, _) in keyword_signature(factory, set()).items()
                             if (c := choices_of(t)) is not None}
    return checked


# Over 50 lines: the one place a declaration meets its factory (both paths: a declaration, a plug-in's line).
def register(declaration: AlgorithmDeclaration | str, *, needs: tuple[str, ...] | frozenset[str] = (),
             bounds: Mapping[str, str] | None = None, loop: str = "round", model_parts: tuple[str, ...] = (),
             cell: str | None = None, settings: type | None = None, **fixed: Any
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the factory under a declared algorithm (or a name); returns it, range-checked.

    ``declaration`` is an :class:`~fedshift.algorithms.declarations.AlgorithmDeclaration` (every built-in algorithm,
    ``fedshift.algorithms.decl.<module>``; a plug-in may declare its own): its settings dataclass gives the
    hyper-parameters, types, defaults and ranges, and its fields the needs, loop, model parts and cell hook. A plug-in
    may instead give a name and declare on this line, as literals:

    - ``needs``: the side information it needs (an :class:`AlgorithmSpec`'s ``needs``; default none);
    - ``bounds``: hyper-parameter → allowed range as an interval string (``{"beta1": "[0, 1)"}``, :class:`Interval`);
      a key ``"a*b"`` bounds the product of two knobs;
    - ``loop``: ``"round"`` (default) or ``"own"`` (:data:`LOOPS`); ``cell``: ``"module:function"`` of the hook a
      common-budget caller uses for an own-loop algorithm;
    - ``model_parts``: the model parts it needs (:data:`MODEL_PARTS`; default: any model);
    - ``settings``: a settings dataclass (else the hyper-parameters are the factory's keyword-only parameters);
    - ``fixed``: keyword arguments the name fixes.

    The returned factory checks the declared ranges (:func:`check_ranges`) and string choices (the ``Literal`` types of
    its settings and keyword-only parameters) on every call, so no factory repeats them.

    Raises
    ------
    ValueError
        When the name is not a plain identifier or is taken by another factory, a declaration is malformed (an unknown
        side information, loop or model part, an unparsable interval, a bound on a keyword the factory does not
        take), or the factory's keyword-only parameters are not the settings' fields (names, types, defaults).
    """
    if isinstance(declaration, AlgorithmDeclaration):
        if needs or bounds or loop != "round" or model_parts or cell is not None or settings is not None or fixed:
            raise ValueError(f"algorithm {declaration.name!r}: declared by {type(declaration).__name__}; its register "
                             "line takes nothing else")
        name = declaration.name
    else:
        name = declaration
        bounds = {**(settings_bounds(settings) if settings is not None else {}), **(bounds or {})}
    if not (isinstance(name, str) and name.isidentifier() and name == name.lower()):
        raise ValueError(f"algorithm name {name!r} must be a lower-case identifier")
    if isinstance(declaration, AlgorithmDeclaration):
        facts = declaration_facts(declaration)
        settings, fixed, ranges = facts.settings, dict(facts.fixed), facts.bounds
    else:
        needs_, ranges, loop, parts, cell = checked_facts(name, needs, bounds, loop, model_parts, cell)

    def add(factory: Callable[..., Any]) -> Callable[..., Any]:
        checked = _checked_calls(factory)
        raw = checked.__wrapped__
        if isinstance(declaration, AlgorithmDeclaration) and (raw.__module__, raw.__name__) != (
                declaration.module, declaration.factory):
            raise ValueError(f"algorithm {name!r} is declared for {declaration.module}.{declaration.factory}, "
                             f"not {raw.__module__}.{raw.__name__}")
        first = next(iter(inspect.signature(raw).parameters), None)
        if isinstance(declaration, AlgorithmDeclaration) and first != declaration.builds_on:
            raise ValueError(f"algorithm {name!r} is declared to build on {declaration.builds_on!r}, but the factory's "
                             f"first parameter is {first!r}")
        if settings is not None:
            check_factory(name, raw, settings, fixed | dict.fromkeys(CONTEXT_FIELDS))
            hparams = {k: t for k, (t, _) in settings_fields(settings).items() if k not in fixed}
        else:
            hparams = {k: t for k, (t, _) in keyword_signature(raw, fixed | dict.fromkeys(CONTEXT_FIELDS)).items()}
        takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(raw).parameters.values())
        unknown = sorted(k for k in ranges if any(f not in hparams for f in factors(k)) and not takes_any)
        if unknown:
            raise ValueError(f"algorithm {name!r}: bounds on {unknown}, which the factory does not take")
        if isinstance(declaration, AlgorithmDeclaration):
            declared_as = facts
        else:  # declared on the register line: the same facts, the hyper-parameters read from the factory
            declared_as = Declaration(name=name, module=raw.__module__, factory=raw.__name__, settings=settings,
                                      fixed=dict(fixed), needs=needs_, bounds=ranges, loop=loop, model_parts=parts,
                                      cell=cell, hparams=hparams, var_keywords=takes_any)
        spec = AlgorithmSpec(declared_as, checked)
        old = ALGORITHMS.get(name)
        if old is not None and (old.module, old.factory.__qualname__) != (spec.module, raw.__qualname__):
            raise ValueError(f"algorithm {name!r} is already registered by {old.module}.{old.factory.__qualname__}")
        ALGORITHMS[name] = spec
        checked.range_checks[:] = [c for c in checked.range_checks if c[0] != name] + [(name, dict(fixed), ranges)]
        checked.choice_checks.update(settings_choices(settings) if settings is not None else {})
        return checked

    return add


@functools.cache
def _discover() -> None:
    package = importlib.import_module("fedshift.algorithms")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"fedshift.algorithms.{info.name}")


def get(name: str) -> AlgorithmSpec:
    """The registered algorithm ``name``.

    Raises
    ------
    KeyError
        For an unregistered name, listing the registered ones.
    """
    if name not in ALGORITHMS and name in algorithm_modules():  # import only the module that registers it
        importlib.import_module(algorithm_modules()[name])
    if name not in ALGORITHMS:
        _discover()
    if name not in ALGORITHMS:
        raise KeyError(f"unknown algorithm {name!r}; registered: {names()}")
    return ALGORITHMS[name]


def build(name: str, context: BuildContext, /, **hparams: Any) -> Any:
    """Algorithm ``name`` built on ``context`` with the configured ``hparams``: the one way to build an algorithm.

    Each :data:`CONTEXT_FIELDS` entry the factory takes by name comes from ``context``; ``hparams`` are the
    config's keys, the factory's keyword names (checked by :meth:`AlgorithmSpec.build`).

    Raises
    ------
    KeyError
        For an unregistered name.
    ValueError
        When ``hparams`` sets a data-derived key (it belongs to the context), when the factory requires a context
        field that ``context`` leaves unset, or from :meth:`AlgorithmSpec.build`.
    """
    spec = get(name)
    data_keys = sorted(set(hparams) & set(CONTEXT_FIELDS))
    if data_keys:
        raise ValueError(f"algorithm {name!r}: {', '.join(data_keys)} come(s) from the data (BuildContext), "
                         "not from a config")
    params = inspect.signature(spec.factory).parameters
    kw = {}
    for field_name in CONTEXT_FIELDS:
        if field_name not in params or field_name in spec.fixed:
            continue
        value = getattr(context, field_name)
        if value is not None:
            kw[field_name] = value
        elif params[field_name].default is inspect.Parameter.empty:
            raise ValueError(f"algorithm {name!r} needs {field_name}, which the build context does not give")
    return spec.build(context.module, **kw, **hparams)


def names() -> list[str]:
    """Every registered algorithm name, sorted.

    Imports every algorithm module; the plan reads :func:`declared_names`.
    """
    _discover()
    return sorted(ALGORITHMS)


def declared_names(root: str | Path | None = None) -> list[str]:
    """Every registered algorithm name, sorted, read without importing an algorithm module (no torch).

    The built-in declarations (:func:`declarations`) and the algorithms registered at run time (plug-ins, tests:
    :data:`ALGORITHMS`): the list :func:`names` returns once it has imported every algorithm module.

    Parameters
    ----------
    root : str or Path, optional
        Unused (the declarations are those of the installed package); kept for callers that name the package folder.

    Returns
    -------
    list of str
        The names, sorted.
    """
    return sorted(set(declarations(root)) | set(ALGORITHMS))


@functools.cache
def _declarations() -> dict[str, Declaration]:
    return {name: declaration_facts(d) for name, d in declared().items()}


def declarations(root: str | Path | None = None) -> dict[str, Declaration]:
    """Registered name → :class:`Declaration` of every built-in algorithm, read without importing an algorithm module.

    The planning side (config validation, the workflow's plan, the shift matrix's n/a cells, the docs) reads these
    instead of importing the algorithm modules and torch; :func:`get` gives the same declarations on the imported
    :class:`AlgorithmSpec` (:func:`register` checks the factory against them). ``root`` is unused (the declarations
    are those of the installed package, :func:`fedshift.algorithms.declarations.declared`).

    Raises
    ------
    ValueError
        For a malformed declaration, naming the algorithm.
    """
    return dict(_declarations())


def algorithm_modules(root: str | Path | None = None) -> dict[str, str]:
    """Registered name → module, read from the declarations without importing an algorithm module.

    Algorithms registered at run time from elsewhere (tests, plug-ins) are added from :data:`ALGORITHMS`; ``root`` is
    unused, as for :func:`declarations`.
    """
    return {**{n: s.module for n, s in ALGORITHMS.items()}, **{n: d.module for n, d in declared().items()}}


def load_plugins(targets: Any, *, where: str = "algorithm_plugins") -> dict[str, tuple[str, ...]]:
    """Import algorithm plug-ins (config ``algorithm_plugins``) whose ``@register`` lines add algorithms.

    :func:`fedshift.plugins.load_plugins` with this registry's table; same arguments, returns and errors.
    """
    return plugins.load_plugins(targets, where=where, table=ALGORITHMS, what="algorithm", discover=_discover)


def plugin_file(name: str) -> Path | None:
    """The source file of registered algorithm ``name`` when its module is outside the fedshift package, else None."""
    spec = ALGORITHMS.get(name)
    if spec is None or spec.module.split(".")[0] == "fedshift":
        return None
    module = sys.modules.get(spec.module)
    return Path(module.__file__).resolve() if module is not None and getattr(module, "__file__", None) else None
