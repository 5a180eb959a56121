"""Plug-ins: algorithms, shifts and datasets from files outside the package, imported by config lists.

``algorithm_plugins``, ``shift_plugins`` and ``dataset_plugins`` each list ``.py`` files (relative to the working
directory) or module names; importing one runs its registration lines (``@register``, ``@register_shift``,
``register_dataset``). The registries themselves live with what they register; this module only imports, and
checks what each target registered.

A plug-in cannot take the run down silently: its import is isolated (an exception *or* ``SystemExit`` — a
``sys.exit(0)`` at import would otherwise end the dry run with status 0 having done nothing — is reported as a
:class:`~fedshift.errors.ConfigError` naming the config key, the plug-in's file and the error; what it registered
before failing is removed again). A name that is already registered is a clash, reported naming the file and the
name, unless the plug-in says it replaces that built-in: a module-level literal ``REPLACES = ("fedavg",)`` in the
plug-in file, read with :mod:`ast` before the import. A replaced algorithm or shift is the plug-in's from then on,
and so is its code hash (:func:`fedshift.algorithms.registry.plugin_file`, :func:`fedshift.shifts.shift_module_file`
name the plug-in's file). Datasets cannot be replaced (a built-in's decoder,
:data:`fedshift.data.prepare.PREPARERS`, takes precedence over a plug-in's).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from fedshift.errors import ConfigError

__all__ = ["load_plugins", "import_target", "loaded_files", "unload", "declared_replacements", "REPLACED",
           "lazy_exports"]


#: Resolved plug-in target (file path or module name) → the names its import registered.
_PLUGINS: dict[str, tuple[str, ...]] = {}

#: Registered name → the plug-in target that replaced a built-in of that name (declared ``REPLACES``).
REPLACED: dict[str, str] = {}
#: Registered name → the built-in entry a plug-in replaced (put back by :func:`unload`).
_ORIGINALS: dict[str, Any] = {}


def declared_replacements(path: str | Path) -> tuple[str, ...]:
    """The names a plug-in file declares it replaces: its module-level ``REPLACES = ("name", ...)`` literal.

    Raises
    ------
    ValueError
        When ``REPLACES`` is not a literal tuple or list of strings (naming the file and line).
    """
    tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "REPLACES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = None
            if not isinstance(value, tuple | list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{path}:{node.lineno}: REPLACES must be a literal tuple of registered names")
            return tuple(value)
    return ()


def load_plugins(targets: Any, *, where: str, table: MutableMapping[str, Any], what: str,
                 discover: Callable[[], Any] | None = None, replaceable: bool = True) -> dict[str, tuple[str, ...]]:
    """Import plug-ins: each target is a ``.py`` file (relative to the working directory) or a module.

    Importing a target runs its registration lines, which add entries to ``table`` (the algorithm registry,
    :data:`fedshift.shifts.SHIFTS`, :data:`fedshift.data.registry.FACTS`). A target already loaded is not
    imported again. The import is isolated (module docstring).

    Parameters
    ----------
    targets : list of str
        The config list (``algorithm_plugins``, ``shift_plugins``, ``dataset_plugins``; ``None`` is the empty list).
    where : str
        Key path named in errors.
    table : mapping
        The registry the plug-in must add to.
    what : str
        What one entry of ``table`` is called in errors.
    discover : callable, optional
        Imports every built-in of ``table`` (a registry filled lazily: algorithms, shifts), called before a
        plug-in's import, so that a name the plug-in registers is compared with every built-in (a clash, not a
        silent take-over) and a replaced built-in's module is imported first (it never re-registers later).
    replaceable : bool
        Whether a plug-in may replace a built-in of ``table`` (``REPLACES``); False for datasets.

    Returns
    -------
    dict
        Target → the names it registered.

    Raises
    ------
    fedshift.errors.ConfigError
        ``<where>[i]``: not a list of strings, a missing file, an import that fails or exits (``SystemExit``), a
        name that clashes with a registered one (naming the file and the name), a ``REPLACES`` that names no
        registered entry or that the plug-in does not register, or a target that registers nothing new.
    """
    if targets is None:
        return {}
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"config error at {where}: expected a list of file paths or module names, got {targets!r}")
    out = {}
    for i, target in enumerate(targets):
        key = str(Path(target).resolve()) if target.endswith(".py") else target
        if key not in _PLUGINS:
            _PLUGINS[key] = _load_one(target, key, f"{where}[{i}]", table, what, discover, replaceable)
        out[target] = _PLUGINS[key]
    return out


def _load_one(target: str, key: str, at: str, table: MutableMapping[str, Any], what: str,
              discover: Callable[[], Any] | None, replaceable: bool) -> tuple[str, ...]:
    """Import one plug-in target in isolation (:func:`load_plugins`); the names it registered."""
    is_file = target.endswith(".py")
    if is_file and not Path(key).is_file():
        raise ConfigError(f"config error at {at}: no file {target!r}")
    shown = f"plug-in {key}" if is_file else f"plug-in module {target!r}"
    try:
        replaces = declared_replacements(key) if is_file else ()
    except (ValueError, SyntaxError) as err:
        raise ConfigError(f"config error at {at}: {shown}: {err}") from err
    if replaces and not replaceable:
        raise ConfigError(f"config error at {at}: {shown} declares REPLACES {list(replaces)}, but a {what} cannot be "
                          "replaced (a built-in's decoder takes precedence); register it under a new name")
    if discover is not None:
        discover()
    unknown = [n for n in replaces if n not in table]
    if unknown:
        raise ConfigError(f"config error at {at}: {shown} declares REPLACES {unknown}, which no {what} registered "
                          f"before it is called; registered: {sorted(table)}")
    before = dict(table)
    for name in replaces:
        del table[name]
    # the path's digest in the name: two plug-ins with one file name stay two modules (and code hashes)
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    module_name = f"fedshift_{what.split()[0]}_plugin_{Path(key).stem}_{digest}"
    try:
        import_target(target, module_name)
    except (Exception, SystemExit) as err:  # noqa: BLE001 — any failure of the plug-in's import names it
        _restore(table, before)
        sys.modules.pop(module_name, None)
        clash = isinstance(err, ValueError) and ("already registered" in str(err) or "taken" in str(err))
        hint = (f"; a plug-in replaces a built-in {what} only when it says so: REPLACES = ('<name>',) in its file"
                if clash else "")
        if isinstance(err, SystemExit):
            raise ConfigError(f"config error at {at}: {shown} exits on import (SystemExit {err.code!r}): a plug-in "
                              "may not end the run") from err
        raise ConfigError(f"config error at {at}: cannot import {shown} ({type(err).__name__}: {err}){hint}") from err
    added = tuple(sorted(set(table) - set(before) | {n for n in replaces if n in table}))
    missing = [n for n in replaces if n not in table]
    if missing:
        _restore(table, before)
        raise ConfigError(f"config error at {at}: {shown} declares REPLACES {missing} but registers no {what} of "
                          "that name")
    if not added:
        raise ConfigError(f"config error at {at}: {shown} registers no {what} (a registration line that is new)")
    for name in replaces:
        REPLACED[name] = key
        _ORIGINALS[name] = before[name]
    return added


def _restore(table: MutableMapping[str, Any], before: Mapping[str, Any]) -> None:
    """Put ``table`` back as it was before a plug-in's import (its partial registrations removed)."""
    for name in [n for n in table if n not in before or table[n] is not before[n]]:
        del table[name]
    table.update(before)


def import_target(target: str, module_name: str) -> types.ModuleType:
    """Import ``target``: a ``.py`` file (as ``module_name``, entered in :data:`sys.modules`) or a module name."""
    if not target.endswith(".py"):
        return importlib.import_module(target)
    spec = importlib.util.spec_from_file_location(module_name, Path(target).resolve())
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def loaded_files(targets: Any) -> list[str]:
    """The resolved ``.py`` files among loaded plug-in targets (what a job's code hash adds for them)."""
    return sorted(str(Path(t).resolve()) for t in (targets or []) if isinstance(t, str) and t.endswith(".py"))


def unload(target: str, table: dict[str, Any]) -> tuple[str, ...]:
    """Undo :func:`load_plugins` for one target: its names leave ``table`` (a replaced built-in comes back) and its
    module leaves ``sys.modules``.

    For tests and interactive sessions that load a plug-in for a while. Returns the names removed (empty when the
    target was not loaded).
    """
    key = str(Path(target).resolve()) if target.endswith(".py") else target
    names = _PLUGINS.pop(key, ())
    for name in names:
        table.pop(name, None)
        if REPLACED.get(name) == key:
            del REPLACED[name]
            table[name] = _ORIGINALS.pop(name)
    for mod in [m for m, v in sys.modules.items() if str(getattr(v, "__file__", "") or "") == key or m == target]:
        del sys.modules[mod]
    return names


def lazy_exports(package: str, modules: Sequence[str]) -> Callable[[str], Any]:
    """A paper package's module ``__getattr__`` (PEP 562): its computation modules' public names, imported on use.

    ``from fedshift.papers import wafl as W; W.resolve_run`` keeps working while ``import fedshift.papers.wafl``
    (which every submodule's import runs first) imports nothing but the package: the plan reads ``config`` and
    ``paper`` without the training code (torch). A name is looked up in ``modules`` in order, each one's
    ``__all__``; a submodule's own name (``from fedshift.papers.wafl import report``) is left to the import
    system, so importing ``config`` never imports ``fit``. The imports are by computed name, so the package's
    code hash (:mod:`fedshift.codehash`) does not cover its submodules: a job hashes those it reaches itself.

    Parameters
    ----------
    package : str
        The package's name (``__name__``).
    modules : sequence of str
        Submodule names whose ``__all__`` are re-exported, searched in order (``("config", "data", "fit")``).

    Returns
    -------
    callable
        ``__getattr__(name)``; raises AttributeError for a name none of ``modules`` exports.
    """
    def __getattr__(name: str) -> Any:
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        for m in modules:
            module = importlib.import_module(f"{package}.{m}")
            if name in getattr(module, "__all__", ()):
                return getattr(module, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r} (nor have its modules {list(modules)})")

    return __getattr__
