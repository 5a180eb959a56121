"""The algorithm registry: registered name → factory of a :class:`~fedshift.core.base.FederatedAlgorithm`.

An algorithm module registers each of its algorithms by one line above its factory::

    @register("fedprox")
    def build_fedprox(module, *, mu: float, squared: bool = True, **fedavg_kwargs): ...

Several names may share a factory with fixed keyword arguments (``@register("fedpgm", kind="fedpgm")``).
Papers and the configuration refer to algorithms by these names. Everything that builds an algorithm — every
paper and every shift-matrix cell — calls :func:`build` ``(name, context, **hparams)``: the config's keys are the
factory's keyword names (checked against its signature: names and annotated types), and what the data gives (the
model, the number of clients and domains, the target label marginal T, the clients' label marginals S, ...) comes
from one typed :class:`BuildContext`, taken by each factory that names it. :func:`algorithm_modules` reads the
same decorators statically (no import), for the workflow's per-job code hash
(:func:`fedshift.codehash.code_hash`).

An algorithm outside the package is a *plug-in*: a file or module whose ``@register`` lines run when
:func:`load_plugins` imports it (config ``algorithm_plugins: [path/to/file.py]``; the workflow and every job load
them before anything else, :func:`fedshift.contract.load_papers`). Its runs' code hash covers its file
(:func:`plugin_file`).

Same idea as FedJAX's algorithm factories (a function closing over hyper-parameters that returns
``FederatedAlgorithm(init, apply)``), with a name → factory table in front.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import pkgutil
import sys
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedshift import plugins

#: The package folder (``src/fedshift``) the declarations are read from by default; resolved once, since the plan
#: asks for the declarations per matrix cell (13,000 calls at quick scale, each resolving the path: 0.3 CPU-s).
PACKAGE_DIR = Path(__file__).resolve().parents[1]

__all__ = ["AlgorithmSpec", "BuildContext", "CONTEXT_FIELDS", "build", "ALGORITHMS", "SIDE_INFORMATION", "LOOPS",
           "MODEL_PARTS", "Interval", "Declaration", "check_ranges", "range_errors", "register", "get", "names",
           "declarations", "algorithm_modules", "load_plugins", "plugin_file", "static_type", "keyword_parameters",
           "static_function", "parsed_module"]

#: The side-information vocabulary: what an algorithm may need (``register(..., needs=...)``) beyond its clients'
#: labelled data, and what a shift may give (:attr:`fedshift.shifts.Shift.side_information`): the target's label
#: marginal T (FedPALS), each client's domain id (AFL / AgnosticFedAvg), unlabelled target images (FedMM, DANN).
SIDE_INFORMATION = frozenset({"target_label_marginal", "domain_ids", "unlabelled_target"})

#: How an algorithm trains (``register(..., loop=...)``): ``"round"``, the common round over a list of clients
#: (``apply(state, clients, key)`` of :class:`~fedshift.core.base.FederatedAlgorithm`, driven by
#: :func:`fedshift.core.training.run_training`); ``"own"``, a training loop of its own (Stochastic-AFL, the
#: DANN/SGDA family), which a caller such as the shift matrix reaches through the algorithm's ``cell`` hook.
LOOPS = frozenset({"round", "own"})

#: The parts of a model an algorithm may need (``register(..., model_parts=...)``): a feature extractor and a
#: classification head on its features (the DANN family, FedSR); empty: any model.
MODEL_PARTS = frozenset({"features", "head"})

_INF = float("inf")


@dataclass(frozen=True)
class Interval:
    """The allowed range of a numeric hyper-parameter, written as in mathematics: ``"[0, 1)"``, ``"(0, inf)"``.

    Declared once, where the algorithm is registered (``register(..., bounds={"beta1": "[0, 1)"})``); the factory
    check (:meth:`AlgorithmSpec.build`) and the config schema (:meth:`schema`) both read it.

    Attributes
    ----------
    lo, hi : float
        The ends (``-inf`` / ``inf`` for an open side).
    lo_closed, hi_closed : bool
        Whether the end belongs to the range (``[`` / ``]``).
    """

    lo: float
    hi: float
    lo_closed: bool
    hi_closed: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        """The interval written ``text``: ``[`` or ``(``, two numbers (``inf``, ``-inf`` allowed), ``]`` or ``)``.

        Raises
        ------
        ValueError
            For any other form, an infinite end marked closed, or ``lo > hi``.
        """
        t = text.strip() if isinstance(text, str) else ""
        if len(t) < 5 or t[0] not in "[(" or t[-1] not in "])" or t.count(",") != 1:
            raise ValueError(f"interval {text!r} is not of the form '[lo, hi)' (brackets [ ] or ( ), ends numbers "
                             "or inf)")
        try:
            lo, hi = (float(x) for x in t[1:-1].split(","))
        except ValueError:
            raise ValueError(f"interval {text!r}: the ends must be numbers (or inf, -inf)") from None
        out = cls(lo, hi, t[0] == "[", t[-1] == "]")
        if (out.lo_closed and lo == -_INF) or (out.hi_closed and hi == _INF) or lo > hi:
            raise ValueError(f"interval {text!r} is empty or closes an infinite end")
        return out

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        above = value >= self.lo if self.lo_closed else value > self.lo
        below = value <= self.hi if self.hi_closed else value < self.hi
        return above and below

    def schema(self) -> dict[str, float]:
        """The JSON-schema keywords of the range (``minimum``/``exclusiveMinimum``, ``maximum``/...)."""
        out: dict[str, float] = {}
        if self.lo != -_INF:
            out["minimum" if self.lo_closed else "exclusiveMinimum"] = self.lo
        if self.hi != _INF:
            out["maximum" if self.hi_closed else "exclusiveMaximum"] = self.hi
        return out

    def __str__(self) -> str:
        def end(x: float) -> str:
            return "inf" if x == _INF else "-inf" if x == -_INF else f"{x:g}"
        return f"{'[' if self.lo_closed else '('}{end(self.lo)}, {end(self.hi)}{']' if self.hi_closed else ')'}"


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


@dataclass(frozen=True)
class AlgorithmSpec:
    """One registered algorithm.

    Attributes
    ----------
    name : str
        Registered name (a plain identifier: lower-case letters, digits, ``_``).
    factory : callable
        ``factory(*args, **hparams) -> FederatedAlgorithm``.
    module : str
        The module that registered it (``fedshift.algorithms.fedprox``).
    fixed : mapping
        Keyword arguments the name fixes (``{"kind": "fedpgm"}``); not settable through ``build``.
    hparams : mapping
        Keyword-only parameter name → annotated type (a string when it could not be resolved) of the
        factory, less ``fixed`` and the data-derived :data:`CONTEXT_FIELDS`: the algorithm's typed
        hyper-parameters, its config keys.
    needs : frozenset of str
        Side information the algorithm needs beyond its clients' labelled data (``"target_label_marginal"``,
        ``"domain_ids"``, ``"unlabelled_target"``; :mod:`fedshift.shifts`); empty: none. The
        shift matrix marks a cell "n/a" when its shift does not give all of it.
    bounds : mapping of str to Interval
        Hyper-parameter name → its allowed range (:class:`Interval`), declared once here; empty: types only.
    loop : {"round", "own"}
        How it trains (:data:`LOOPS`).
    model_parts : frozenset of str
        The model parts it needs (:data:`MODEL_PARTS`); empty: any model.
    cell : str or None
        ``"module:function"`` of its hook for a caller with a common budget (the shift matrix) when ``loop`` is
        ``"own"``; imported only when called.
    """

    name: str
    factory: Callable[..., Any]
    module: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    hparams: Mapping[str, Any] = field(default_factory=dict)
    needs: frozenset[str] = frozenset()
    bounds: Mapping[str, Interval] = field(default_factory=dict)
    loop: str = "round"
    model_parts: frozenset[str] = frozenset()
    cell: str | None = None

    def build(self, *args: Any, **hparams: Any) -> Any:
        """Check ``hparams`` against the factory's keyword-only parameters and types, then call it.

        Raises
        ------
        ValueError
            For an unknown or fixed hyper-parameter, or a value whose type does not match the annotation
            (``float`` accepts int but not bool), naming the algorithm and key.
        """
        params = inspect.signature(self.factory).parameters
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
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
            if not _matches(value, self.hparams[key]):
                raise ValueError(f"algorithm {self.name!r}: hyper-parameter {key!r} = {value!r} is not "
                                 f"of type {getattr(self.hparams[key], '__name__', self.hparams[key])}")
        check_ranges(self.name, hparams)
        return self.factory(*args, **self.fixed, **hparams)


def _factors(key: str) -> list[str]:
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
        names = _factors(key)
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


def check_ranges(name: str, values: Mapping[str, Any]) -> None:
    """Refuse a hyper-parameter of algorithm ``name`` outside its declared range (``register(..., bounds=...)``).

    Called by :meth:`AlgorithmSpec.build` and by each factory for its own knobs (so a library user who calls a
    factory directly meets the same ranges as the config schema, :func:`fedshift.validation.hparam_schema`).

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
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    return True


#: Registered name → spec. Filled by the ``@register`` lines as algorithm modules are imported; :func:`get`
#: and :func:`names` import every module of :mod:`fedshift.algorithms` first.
ALGORITHMS: dict[str, AlgorithmSpec] = {}


def _typed_hparams(factory: Callable[..., Any], fixed: Mapping[str, Any]) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(factory)
    except Exception:  # noqa: BLE001 — an unresolvable annotation only loses its type check
        hints = {}
    sig = inspect.signature(factory)
    return {n: hints.get(n, p.annotation if p.annotation is not p.empty else Any)
            for n, p in sig.parameters.items()
            if p.kind is p.KEYWORD_ONLY and n not in fixed and n not in CONTEXT_FIELDS}


def _declared(name: str, needs: Any, bounds: Any, loop: Any, model_parts: Any, cell: Any
              ) -> tuple[frozenset[str], dict[str, Interval], str, frozenset[str], str | None]:
    """The checked declarations of ``register`` (shared by the decorator and the static reader)."""
    needs = frozenset(needs)
    if needs - SIDE_INFORMATION:
        raise ValueError(f"algorithm {name!r}: needs {sorted(needs - SIDE_INFORMATION)} not in the side-information "
                         f"vocabulary {sorted(SIDE_INFORMATION)}")
    if not isinstance(bounds, Mapping):
        raise ValueError(f"algorithm {name!r}: bounds must be a mapping name -> '[lo, hi)', got {bounds!r}")
    ranges = {}
    for key, text in bounds.items():
        try:
            ranges[key] = Interval.parse(text)
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


def register(name: str, *, needs: tuple[str, ...] | frozenset[str] = (), bounds: Mapping[str, str] | None = None,
             loop: str = "round", model_parts: tuple[str, ...] = (), cell: str | None = None, **fixed: Any
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``factory`` under ``name`` (with ``fixed`` keyword arguments); returns it unchanged.

    Everything a caller needs to know about the algorithm is declared here, once, as literals (so that
    :func:`declarations` reads it without importing the module, i.e. without torch):

    - ``needs``: the side information it needs (:attr:`AlgorithmSpec.needs`; default none);
    - ``bounds``: hyper-parameter → allowed range as an interval string (``{"beta1": "[0, 1)"}``,
      :class:`Interval`), checked by :meth:`AlgorithmSpec.build`, by the factory (:func:`check_ranges`) and by the
      config schema; a key ``"a*b"`` bounds the product of two knobs (FedNova ``{"client_lr*prox_mu": "[0, 1)"}``);
    - ``loop``: ``"round"`` (default) or ``"own"`` (:data:`LOOPS`); ``cell``: ``"module:function"`` of the hook a
      common-budget caller uses for an own-loop algorithm;
    - ``model_parts``: the model parts it needs (:data:`MODEL_PARTS`; default: any model).

    Raises
    ------
    ValueError
        When ``name`` is not a plain identifier, is taken by another factory, or a declaration is malformed
        (an unknown side information, loop or model part, an unparsable interval, a bound on a keyword the
        factory does not take).
    """
    if not (name.isidentifier() and name == name.lower()):
        raise ValueError(f"algorithm name {name!r} must be a lower-case identifier")
    needs_, ranges, loop, parts, cell = _declared(name, needs, bounds or {}, loop, model_parts, cell)

    def add(factory: Callable[..., Any]) -> Callable[..., Any]:
        hparams = _typed_hparams(factory, fixed)
        takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(factory).parameters.values())
        unknown = sorted(k for k in ranges if any(f not in hparams for f in _factors(k)) and not takes_any)
        if unknown:
            raise ValueError(f"algorithm {name!r}: bounds on {unknown}, which the factory does not take")
        spec = AlgorithmSpec(name, factory, factory.__module__, dict(fixed), hparams, needs_, ranges, loop, parts,
                             cell)
        old = ALGORITHMS.get(name)
        if old is not None and (old.module, old.factory.__qualname__) != (spec.module, factory.__qualname__):
            raise ValueError(f"algorithm {name!r} is already registered by {old.module}.{old.factory.__qualname__}")
        ALGORITHMS[name] = spec
        return factory

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
    """Every registered algorithm name, sorted (imports every algorithm module; the plan reads
    :func:`declared_names`)."""
    _discover()
    return sorted(ALGORITHMS)


def declared_names(root: str | Path | None = None) -> list[str]:
    """Every registered algorithm name, sorted, read without importing an algorithm module (no torch).

    The package's ``@register`` lines (:func:`declarations`) and the algorithms registered at run time (plug-ins,
    tests: :data:`ALGORITHMS`): the list :func:`names` returns once it has imported every algorithm module.

    Parameters
    ----------
    root : str or Path, optional
        The package folder (``src/fedshift``, default: the installed one), as for :func:`declarations`.

    Returns
    -------
    list of str
        The names, sorted.
    """
    return sorted(set(declarations(root)) | set(ALGORITHMS))


@dataclass(frozen=True)
class Declaration:
    """What a ``@register(...)`` line declares, read from the source without importing it (:func:`declarations`).

    Attributes
    ----------
    name, module : str
        Registered name and the module that registers it.
    factory : str
        The factory's name in that module.
    path : Path
        The module's file; ``line`` the decorator's line in it.
    fixed, needs, bounds, loop, model_parts, cell
        As :class:`AlgorithmSpec`.
    hparams : mapping
        The factory's keyword-only parameters (less ``fixed`` and the :class:`BuildContext` fields) → type, the
        annotation read by :func:`static_type` (what :func:`typing.get_type_hints` gives, with a name it cannot
        resolve without importing standing as ``object``: not settable from a config file).
    defaults : mapping
        Those parameters' literal defaults (a default that is no literal is left out).
    var_keywords : bool
        Whether the factory takes ``**kwargs`` (where they go: :data:`fedshift.validation.VAR_KEYWORDS`).
    """

    name: str
    module: str
    factory: str
    path: Path
    line: int
    fixed: Mapping[str, Any] = field(default_factory=dict)
    needs: frozenset[str] = frozenset()
    bounds: Mapping[str, Interval] = field(default_factory=dict)
    loop: str = "round"
    model_parts: frozenset[str] = frozenset()
    cell: str | None = None
    hparams: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    var_keywords: bool = False


#: The names an annotation may use without importing its module (anything else reads as ``object``).
_TYPE_NAMES: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool, "bytes": bytes, "object": object,
                               "tuple": tuple, "list": list, "dict": dict, "set": set, "frozenset": frozenset,
                               "Any": Any, "Callable": Callable, "Mapping": Mapping, "Sequence": typing.Sequence,
                               "Iterable": typing.Iterable, "Optional": typing.Optional, "Union": typing.Union}


def static_type(node: ast.expr | None) -> Any:
    """The type an annotation's syntax names, resolved without importing anything.

    Builtins and the :mod:`typing` / :mod:`collections.abc` names of :data:`_TYPE_NAMES` resolve as Python would;
    ``X | Y`` and ``Optional[X]`` to a union; any other name (a module's alias such as ``LossFn``, ``torch.Tensor``)
    to ``object``, which a config file cannot set, as the imported class or callable alias could not be either.
    None (no annotation) is ``Any``.
    """
    if node is None:
        return Any
    if isinstance(node, ast.Constant):
        if node.value is None:
            return type(None)
        if node.value is Ellipsis:
            return Ellipsis
        if isinstance(node.value, str):  # a quoted annotation
            return static_type(ast.parse(node.value, mode="eval").body)
        return object
    if isinstance(node, ast.Name):
        return _TYPE_NAMES.get(node.id, object)
    if isinstance(node, ast.Attribute):  # typing.Any, collections.abc.Mapping: their last name; else an import's
        return _TYPE_NAMES.get(node.attr, object) if getattr(node.value, "id", "") in ("typing", "abc") else object
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return typing.Union[static_type(node.left), static_type(node.right)]  # noqa: UP007 — of runtime values
    if isinstance(node, ast.List):
        return [static_type(e) for e in node.elts]
    if isinstance(node, ast.Subscript):
        base = static_type(node.value)
        if base is object:
            return object
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        resolved = tuple(static_type(a) for a in args)
        try:
            return base[resolved if len(resolved) > 1 else resolved[0]]
        except TypeError:
            return object
    return object


def keyword_parameters(node: ast.FunctionDef, skip: frozenset[str] | set[str] = frozenset()
                       ) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """A function's keyword-only parameters read from its syntax: name → :func:`static_type`, name → literal
    default, and whether it takes ``**kwargs``. ``skip`` and the :class:`BuildContext` fields are left out."""
    types_, defaults = {}, {}
    for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
        if arg.arg in skip or arg.arg in CONTEXT_FIELDS:
            continue
        types_[arg.arg] = static_type(arg.annotation)
        if default is not None:
            try:
                defaults[arg.arg] = ast.literal_eval(default)
            except ValueError:
                pass
    return types_, defaults, node.args.kwarg is not None


def static_function(module: str, qualname: str, root: str | Path | None = None) -> ast.FunctionDef:
    """The syntax of function ``module:qualname`` of the fedshift package, read without importing it.

    Raises
    ------
    KeyError
        When the module's file has no such top-level function.
    """
    root = Path(root) if root is not None else PACKAGE_DIR
    path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
    for node in parsed_module(path).body:
        if isinstance(node, ast.FunctionDef) and node.name == qualname:
            return node
    raise KeyError(f"{module}:{qualname}: no such function in {path}")


def parsed_module(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per process while its size and modification time stay the same.

    The plan asks for the same few modules' functions again and again (a whole-workflow validation called
    :func:`static_function` 150 times, 0.38 of its 0.8 CPU-s in ``ast.parse``). Callers read the tree; none edits it.
    """
    stat = path.stat()
    return _parse(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _parse(path: Path, size: int, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def _read_declarations(path: Path, module: str) -> dict[str, Declaration]:
    """Every ``@register("name", ...)`` of the file ``path`` (module ``module``), by :mod:`ast` alone.

    Raises
    ------
    ValueError
        Naming ``path:line`` when a declaration is not a literal or is malformed (:func:`register`'s checks).
    """
    tree = parsed_module(path)
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            func = dec.func if isinstance(dec, ast.Call) else None
            called = getattr(func, "id", None) or getattr(func, "attr", None)
            if called != "register" or not dec.args or not isinstance(dec.args[0], ast.Constant):
                continue
            name = dec.args[0].value
            kw = {}
            for k in dec.keywords:
                try:
                    kw[k.arg] = ast.literal_eval(k.value)
                except ValueError:
                    raise ValueError(f"{path}:{dec.lineno}: register({name!r}, {k.arg}=...) must be a literal "
                                     "(declarations are read without importing the module)") from None
            decl = {k: kw.pop(k) for k in ("needs", "bounds", "loop", "model_parts", "cell") if k in kw}
            try:
                needs, ranges, loop, parts, cell = _declared(
                    name, decl.get("needs", ()), decl.get("bounds") or {}, decl.get("loop", "round"),
                    decl.get("model_parts", ()), decl.get("cell"))
            except ValueError as err:
                raise ValueError(f"{path}:{dec.lineno}: {err}") from None
            hparams, defaults, var_keywords = keyword_parameters(node, set(kw))
            out[name] = Declaration(name, module, node.name, path, dec.lineno, kw, needs, ranges, loop, parts, cell,
                                    hparams, defaults, var_keywords)
    return out


@functools.cache
def _static_declarations(root: Path) -> dict[str, Declaration]:
    out = {}
    for path in sorted((root / "algorithms").glob("*.py")):
        out |= _read_declarations(path, f"fedshift.algorithms.{path.stem}")
    return out


def declarations(root: str | Path | None = None) -> dict[str, Declaration]:
    """Registered name → :class:`Declaration` of every algorithm of the package, read without importing anything.

    The planning side (config validation, the workflow's plan, the shift matrix's n/a cells) reads these instead
    of importing the algorithm modules and torch; :func:`get` gives the same declarations on the imported
    :class:`AlgorithmSpec` (a test holds the two equal for every algorithm). ``root`` is the package folder
    (``src/fedshift``, default: the installed one).

    Raises
    ------
    ValueError
        For a declaration that is not a literal or is malformed, naming its file and line.
    """
    root = Path(root) if root is not None else PACKAGE_DIR
    return dict(_static_declarations(root))


def _static_modules(root: Path) -> dict[str, str]:
    return {n: d.module for n, d in _static_declarations(root).items()}


def algorithm_modules(root: str | Path | None = None) -> dict[str, str]:
    """Registered name → module, read from the ``@register("name", ...)`` lines without importing anything.

    ``root`` is the package folder (``src/fedshift``, default: the installed one); algorithms registered at
    run time from elsewhere (tests) are added from :data:`ALGORITHMS`.
    """
    root = Path(root) if root is not None else PACKAGE_DIR
    return {**{n: s.module for n, s in ALGORITHMS.items()}, **_static_modules(root)}


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
