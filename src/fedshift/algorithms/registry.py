"""The algorithm registry: registered name → factory of a :class:`~fedshift.algorithms.base.FederatedAlgorithm`.

An algorithm module registers each of its algorithms by one line above its factory::

    @register("fedprox")
    def build_fedprox(module, *, mu: float, squared: bool = True, **fedavg_kwargs): ...

Several names may share a factory with fixed keyword arguments (``@register("fedpgm", kind="fedpgm")``).
Papers and the configuration refer to algorithms by these names: :func:`get` returns the
:class:`AlgorithmSpec`, whose :meth:`~AlgorithmSpec.build` checks the hyper-parameters against the
factory's signature (names and annotated types) before calling it. :func:`algorithm_modules` reads the
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
import hashlib
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

__all__ = ["AlgorithmSpec", "ALGORITHMS", "register", "get", "names", "algorithm_modules", "load_plugins",
           "import_target", "plugin_file"]


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
        factory, less ``fixed``: the algorithm's typed hyper-parameters.
    needs : frozenset of str
        Side information the algorithm needs beyond its clients' labelled data (``"target_label_marginal"``,
        ``"domain_ids"``, ``"unlabelled_target"``; :mod:`fedshift.papers.shift_matrix.shifts`); empty: none. The
        shift matrix marks a cell "n/a" when its shift does not give all of it.
    """

    name: str
    factory: Callable[..., Any]
    module: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    hparams: Mapping[str, Any] = field(default_factory=dict)
    needs: frozenset[str] = frozenset()

    def build(self, *args: Any, **hparams: Any) -> Any:
        """Check ``hparams`` against the factory's keyword-only parameters and types, then call it.

        Raises
        ------
        ValueError
            For an unknown or fixed hyper-parameter, or a value whose type does not match the annotation
            (``float`` accepts int but not bool), naming the algorithm and key.
        """
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(self.factory).parameters.values())
        for key, value in hparams.items():
            if key in self.fixed:
                raise ValueError(f"algorithm {self.name!r}: {key!r} is fixed to {self.fixed[key]!r} by the name")
            if key not in self.hparams:
                if accepts_any:
                    continue
                raise ValueError(f"algorithm {self.name!r}: unknown hyper-parameter {key!r}; "
                                 f"known: {sorted(self.hparams)}")
            if not _matches(value, self.hparams[key]):
                raise ValueError(f"algorithm {self.name!r}: hyper-parameter {key!r} = {value!r} is not "
                                 f"of type {getattr(self.hparams[key], '__name__', self.hparams[key])}")
        return self.factory(*args, **self.fixed, **hparams)


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
            for n, p in sig.parameters.items() if p.kind is p.KEYWORD_ONLY and n not in fixed}


def register(name: str, *, needs: tuple[str, ...] | frozenset[str] = (), **fixed: Any
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``factory`` under ``name`` (with ``fixed`` keyword arguments); returns it unchanged.

    ``needs`` declares the side information the algorithm needs (:attr:`AlgorithmSpec.needs`; default none).

    Raises
    ------
    ValueError
        When ``name`` is not a plain identifier, or is taken by another factory.
    """
    if not (name.isidentifier() and name == name.lower()):
        raise ValueError(f"algorithm name {name!r} must be a lower-case identifier")

    def add(factory: Callable[..., Any]) -> Callable[..., Any]:
        spec = AlgorithmSpec(name, factory, factory.__module__, dict(fixed), _typed_hparams(factory, fixed),
                             frozenset(needs))
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


def names() -> list[str]:
    """Every registered algorithm name, sorted."""
    _discover()
    return sorted(ALGORITHMS)


@functools.cache
def _static_modules(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted((root / "algorithms").glob("*.py")):
        tree = ast.parse(path.read_bytes(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "register" and dec.args
                        and isinstance(dec.args[0], ast.Constant)):
                    out[dec.args[0].value] = f"fedshift.algorithms.{path.stem}"
    return out


def algorithm_modules(root: str | Path | None = None) -> dict[str, str]:
    """Registered name → module, read from the ``@register("name", ...)`` lines without importing anything.

    ``root`` is the package folder (``src/fedshift``, default: the installed one); algorithms registered at
    run time from elsewhere (tests) are added from :data:`ALGORITHMS`.
    """
    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    return {**{n: s.module for n, s in ALGORITHMS.items()}, **_static_modules(root)}


#: Resolved plug-in target (file path or module name) → the names its import registered.
_PLUGINS: dict[str, tuple[str, ...]] = {}


def load_plugins(targets: Any, *, where: str = "algorithm_plugins") -> dict[str, tuple[str, ...]]:
    """Import algorithm plug-ins: each target is a ``.py`` file (relative to the working directory) or a module.

    Importing a target runs its ``@register`` lines. A target already loaded is not imported again.

    Parameters
    ----------
    targets : list of str
        Config ``algorithm_plugins`` (``None`` is the empty list).
    where : str
        Key path named in errors.

    Returns
    -------
    dict
        Target → the algorithm names it registered.

    Raises
    ------
    fedshift.config.ConfigError
        ``algorithm_plugins[i]``: not a list of strings, a missing file, an import that fails, or a target that
        registers no algorithm.
    """
    from fedshift.config import ConfigError

    if targets is None:
        return {}
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"config error at {where}: expected a list of file paths or module names, got {targets!r}")
    out = {}
    for i, target in enumerate(targets):
        key = str(Path(target).resolve()) if target.endswith(".py") else target
        if key not in _PLUGINS:
            before = set(ALGORITHMS)
            if target.endswith(".py") and not Path(key).is_file():
                raise ConfigError(f"config error at {where}[{i}]: no file {target!r}")
            try:
                # the path's digest in the name: two plug-ins with one file name stay two modules (and code hashes)
                digest = hashlib.sha256(key.encode()).hexdigest()[:8]
                import_target(target, f"fedshift_algorithm_plugin_{Path(key).stem}_{digest}")
            except Exception as err:  # noqa: BLE001 — any failure of the plug-in's import names the key
                raise ConfigError(f"config error at {where}[{i}]: cannot import {target!r}: "
                                  f"{type(err).__name__}: {err}") from err
            added = tuple(sorted(set(ALGORITHMS) - before))
            if not added:
                raise ConfigError(f"config error at {where}[{i}]: {target!r} registers no algorithm "
                                  "(an @register line that is new)")
            _PLUGINS[key] = added
        out[target] = _PLUGINS[key]
    return out


def import_target(target: str, module_name: str) -> types.ModuleType:
    """Import ``target``: a ``.py`` file (as ``module_name``, entered in :data:`sys.modules`) or a module name."""
    if not target.endswith(".py"):
        return importlib.import_module(target)
    spec = importlib.util.spec_from_file_location(module_name, Path(target).resolve())
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def plugin_file(name: str) -> Path | None:
    """The source file of registered algorithm ``name`` when its module is outside the fedshift package, else None."""
    spec = ALGORITHMS.get(name)
    if spec is None or spec.module.split(".")[0] == "fedshift":
        return None
    module = sys.modules.get(spec.module)
    return Path(module.__file__).resolve() if module is not None and getattr(module, "__file__", None) else None
