"""Plug-ins: algorithms, shifts and datasets from files outside the package, imported by config lists.

``algorithm_plugins``, ``shift_plugins`` and ``dataset_plugins`` each list ``.py`` files (relative to the working
directory) or module names; importing one runs its registration lines (``@register``, ``@register_shift``,
``register_dataset``). The registries themselves live with what they register; this module only imports, and
checks that each target registered something.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedshift.config import ConfigError

__all__ = ["load_plugins", "import_target", "loaded_files", "unload", "lazy_exports"]


#: Resolved plug-in target (file path or module name) → the names its import registered.
_PLUGINS: dict[str, tuple[str, ...]] = {}


def load_plugins(targets: Any, *, where: str, table: Mapping[str, Any], what: str) -> dict[str, tuple[str, ...]]:
    """Import plug-ins: each target is a ``.py`` file (relative to the working directory) or a module.

    Importing a target runs its registration lines, which add entries to ``table`` (the algorithm registry,
    :data:`fedshift.shifts.SHIFTS`, :data:`fedshift.data.registry.FACTS`). A target already loaded is not
    imported again.

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

    Returns
    -------
    dict
        Target → the names it registered.

    Raises
    ------
    fedshift.config.ConfigError
        ``<where>[i]``: not a list of strings, a missing file, an import that fails, or a target that
        registers nothing new in ``table``.
    """
    if targets is None:
        return {}
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"config error at {where}: expected a list of file paths or module names, got {targets!r}")
    out = {}
    for i, target in enumerate(targets):
        key = str(Path(target).resolve()) if target.endswith(".py") else target
        if key not in _PLUGINS:
            before = set(table)
            if target.endswith(".py") and not Path(key).is_file():
                raise ConfigError(f"config error at {where}[{i}]: no file {target!r}")
            try:
                # the path's digest in the name: two plug-ins with one file name stay two modules (and code hashes)
                digest = hashlib.sha256(key.encode()).hexdigest()[:8]
                import_target(target, f"fedshift_{what.split()[0]}_plugin_{Path(key).stem}_{digest}")
            except Exception as err:  # noqa: BLE001 — any failure of the plug-in's import names the key
                raise ConfigError(f"config error at {where}[{i}]: cannot import {target!r}: "
                                  f"{type(err).__name__}: {err}") from err
            added = tuple(sorted(set(table) - before))
            if not added:
                raise ConfigError(f"config error at {where}[{i}]: {target!r} registers no {what} "
                                  "(a registration line that is new)")
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


def loaded_files(targets: Any) -> list[str]:
    """The resolved ``.py`` files among loaded plug-in targets (what a job's code hash adds for them)."""
    return sorted(str(Path(t).resolve()) for t in (targets or []) if isinstance(t, str) and t.endswith(".py"))


def unload(target: str, table: dict[str, Any]) -> tuple[str, ...]:
    """Undo :func:`load_plugins` for one target: its names leave ``table`` and its module leaves ``sys.modules``.

    For tests and interactive sessions that load a plug-in for a while. Returns the names removed (empty when the
    target was not loaded).
    """
    key = str(Path(target).resolve()) if target.endswith(".py") else target
    names = _PLUGINS.pop(key, ())
    for name in names:
        table.pop(name, None)
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
