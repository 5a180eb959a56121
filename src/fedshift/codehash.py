"""What a job executes: the fedshift modules a script imports, and a hash of their source.

A workflow job's rerun trigger for library code (``params: code=...``). Snakemake's own ``code`` trigger
sees only the job's script; a hash of the whole library would rerun every training job when a plotting
module changes. Here a job's code is the *import closure* of its script inside the fedshift package,
computed statically from the ``import`` statements (:mod:`ast`; imports inside functions count, as they
run too), with the parent packages' ``__init__.py`` that Python executes on the way.

Registered algorithm modules (:mod:`fedshift.algorithms.registry`) are cut from a script's closure when
the job names its algorithms: a job then hashes the closure of its own algorithms' modules only, so
editing SCAFFOLD retrains SCAFFOLD's runs and not FedAvg's, even though both are built by one paper
module that imports both.

Why the import statements are read from the source (:mod:`ast`) rather than by importing: the plan computes every
job's hash and imports no torch (``.importlinter``'s plan contract); :mod:`modulefinder` would compile the same files
and follow the standard library too. Only the ``import`` statements are read, never what a module declares: the
algorithms' declarations are Python objects (:mod:`fedshift.algorithms.declarations`).

Only modules reached by an ``import`` are seen. The library imports two kinds of module by a computed name:
paper plug-ins and shifts (discovered, :func:`fedshift.shifts.discover`); a job names those files itself
(``plugins``: its paper's module and :attr:`fedshift.contract.RunSpec.modules`, a matrix run's shift).
"""

from __future__ import annotations

import ast
import atexit
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import fedshift

__all__ = ["PACKAGE_DIR", "module_file", "imports_of", "import_closure", "code_hash", "keep_code_memo_in"]

PACKAGE = "fedshift"
PACKAGE_DIR = Path(fedshift.__file__).resolve().parent


def module_file(name: str, root: Path = PACKAGE_DIR) -> Path | None:
    """The source file of the fedshift module ``name`` ("fedshift.algorithms.fedavg"), None if there is none.

    A package resolves to its ``__init__.py``; ``root`` is the package's folder (``src/fedshift``).
    """
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    # os.path, not pathlib: a paper-scale plan asks ~40,000 times (pathlib's joins were 1 of its 31 CPU-s profiled)
    base = os.path.join(root, *parts[1:])
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return Path(path)
    return None


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _module_name(path: Path, root: Path) -> str:
    rel = path.resolve().relative_to(root).with_suffix("")
    parts = [PACKAGE, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: str | Path, root: Path = PACKAGE_DIR) -> set[str]:
    """The fedshift modules one source file imports (every ``import``, at any depth of the file).

    ``from fedshift.algorithms import adversarial`` yields ``fedshift.algorithms.adversarial`` (a
    submodule) as well as ``fedshift.algorithms``; each imported module comes with its parent packages.
    Relative imports are resolved against the file's own package when the file lies under ``root``.

    Raises
    ------
    SyntaxError
        When the file does not parse.
    """
    path = Path(path)
    tree = ast.parse(path.read_bytes(), filename=str(path))
    try:
        here = _module_name(path, root)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    except ValueError:  # a script outside the package
        package = ""
    found: set[str] = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            if mod.split(".")[0] != PACKAGE:
                continue
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names if module_file(f"{mod}.{a.name}", root))
    return {p for m in found for p in _with_parents(m) if module_file(p, root)}


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of ``body``, at any depth (function, class, ``if``, ``try``, ``with``, ``match`` bodies).

    Imports are statements, so expressions are not entered: a third of the time ``ast.walk`` took.
    """
    for stmt in body:
        yield stmt
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if inner:
                yield from _statements(inner)
        for part in (*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())):
            yield from _statements(part.body)


@functools.cache
def _imports_cached(path: Path, root: Path, stamp: tuple[int, int, int, int]) -> frozenset[str]:
    """:func:`imports_of` of ``path`` as it is at ``stamp`` (:func:`_stamp`), from the memo file when it has it."""
    key = f"{path}\0{root}"
    entry = _DISK["imports"].get(key)
    if isinstance(entry, list) and len(entry) == 2 and tuple(entry[0]) == stamp:
        return frozenset(entry[1])
    found = frozenset(imports_of(path, root))
    if _DISK["path"] is not None:
        _DISK["imports"][key] = [list(stamp), sorted(found)]
        _DISK["dirty"] = True
    return found


def _stamp(path: Path) -> tuple[int, int, int, int]:
    """Size, modification and change time (ns) and inode of ``path``: an edit changes the change time, which no
    tool sets back, and a file replaced by a checkout is a new inode."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


#: The on-disk memo (:func:`keep_code_memo_in`): its file, what :func:`imports_of` found per file
#: ("<file>\0<root>" → [stamp, imports]), the digests of :func:`code_hash` (repr of its key → [files read, their
#: stamps, digest]), and whether this process added any.
_DISK: dict[str, Any] = {"path": None, "imports": {}, "hashes": {}, "dirty": False}


def keep_code_memo_in(path: str | Path) -> None:
    """Keep the code hashes, and what :func:`imports_of` finds, in the JSON file ``path`` between processes.

    Each entry is kept with the :func:`_stamp` of every file it read (and of their folders, for a module added or
    removed beside them) and is used only while they are all unchanged. Parsing and hashing the package's sources
    is most of what the code hashes cost a plan (``ast.parse`` of ~100 files and a sha256 of each job's closure:
    0.3-0.5 CPU-s of each ``snakemake -n``, and again in every SLURM job's parse). With this, a process reads the
    entries, recomputes those whose files changed, and at exit writes the file again (atomically, when it added
    any). A file that is missing, unreadable or not this format is ignored (everything is computed), and one that
    cannot be written is skipped: the memo saves time and never decides a hash on its own. The workflow keeps it
    under ``.snakemake/`` (``workflow/rules/common.smk``).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    _DISK.update(path=path, dirty=False,
                 **{k: data[k] if isinstance(data.get(k), dict) else {} for k in ("imports", "hashes")})
    _imports_cached.cache_clear()
    _MEMO.clear()
    if not _DISK.get("registered"):
        atexit.register(_write_memo)
        _DISK["registered"] = True


def _write_memo() -> None:
    path = _DISK["path"]
    if path is None or not _DISK["dirty"]:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({k: _DISK[k] for k in ("imports", "hashes")}, sort_keys=True))
        os.replace(tmp, path)
        _DISK["dirty"] = False
    except OSError:
        try:
            tmp.unlink(missing_ok=True)  # a full disk: no half-written file left beside the memo
        except OSError:
            pass


def import_closure(start: Iterable[str | Path], *, cut: Iterable[str] = (), root: Path = PACKAGE_DIR
                   ) -> set[str]:
    """Every fedshift module that importing ``start`` executes, transitively.

    Parameters
    ----------
    start : iterable of str or path
        Source files (a workflow script, anywhere) or fedshift module names.
    cut : iterable of str
        Module names not to enter (nor include), unless they are named in ``start``.
    root : path
        The package folder whose files are read.

    Returns
    -------
    set of str
        Module names, with the parent packages executed on the way.
    """
    cut = set(cut)
    todo: list[Path] = []
    seen: set[str] = set()
    for s in start:
        if isinstance(s, Path) or "/" in str(s) or str(s).endswith(".py"):
            todo.append(Path(s))
        else:
            names = [n for n in _with_parents(str(s)) if module_file(n, root)]
            seen.update(names)
            todo += [module_file(n, root) for n in names]
    todo = [p.resolve() for p in todo]  # a module's file found under root needs no resolving of its own
    while todo:
        path = todo.pop()
        for name in _imports_cached(path, root, _stamp(path)):
            if name not in seen and name not in cut:
                seen.add(name)
                todo.append(module_file(name, root))
    return seen


def code_hash(script: str | Path, *, algorithms: Iterable[str] | None = None,
              algorithm_modules: dict[str, str] | None = None, plugins: Iterable[str | Path] = (),
              cut: Iterable[str] = (), root: Path = PACKAGE_DIR) -> str:
    """A 16-hex-digit hash of the fedshift source one job executes.

    Parameters
    ----------
    script : path
        The job's script (its own text is Snakemake's ``code`` trigger; here only what it imports).
    algorithms : iterable of str, optional
        Registered algorithm names the job runs. When given, every registered algorithm module is cut from
        the script's closure and the closures of these algorithms' modules are added instead. A plug-in
        algorithm (:func:`fedshift.algorithms.registry.load_plugins`) counts by its file's text and closure.
    algorithm_modules : dict, optional
        Registered name → module name (default: :func:`fedshift.algorithms.registry.algorithm_modules`).
    plugins : iterable of path
        Source files the job's script imports by a computed name (a paper plug-in, :mod:`fedshift.contract`):
        hashed with their own import closure; a file outside the package also by its own text.
    cut : iterable of str
        Module names the job never runs although its closure reaches them (a paper plug-in's
        :attr:`~fedshift.contract.Paper.output_modules` in its training job): not entered, not hashed.
    root : path
        The package folder whose files are hashed.

    Raises
    ------
    KeyError
        For an algorithm name that is not registered.
    """
    names = None if algorithms is None else tuple(algorithms)
    external: tuple = ()
    if names is not None:  # a plug-in algorithm (registry.load_plugins): its file and what it imports count
        from fedshift.algorithms.registry import plugin_file

        files = {a: plugin_file(a) for a in names}
        external = tuple(sorted(str(f) for f in files.values() if f is not None))
        names = tuple(a for a in names if files[a] is None)
    modules = None if algorithm_modules is None else tuple(sorted(algorithm_modules.items()))
    plugins = tuple(sorted(str(Path(p).resolve()) for p in plugins))
    key = (Path(script).resolve(), names, modules, Path(root), plugins, tuple(sorted(cut)), external)
    hit = _MEMO.get(key)
    if hit is None and _DISK["path"] is not None:
        kept = _DISK["hashes"].get(repr(key))
        if isinstance(kept, list) and len(kept) == 3:
            hit = (tuple(Path(p) for p in kept[0]), tuple(map(tuple, kept[1])), kept[2])
    if hit is not None and _stamps(hit[0]) == hit[1]:
        _MEMO[key] = hit
        return hit[2]
    read, digest = _code_hash(*key)
    _MEMO[key] = (read, _stamps(read), digest)
    if _DISK["path"] is not None and _MEMO[key][1] is not None:
        _DISK["hashes"][repr(key)] = [[str(p) for p in read], [list(t) for t in _MEMO[key][1]], digest]
        _DISK["dirty"] = True
    return digest


#: A job's hash key → (the files and folders its hash read, their stamps, the digest). Every job of a rule asks
#: again (4,516 jobs at paper scale); a repeated key re-reads the stamps of its own files only, where stamping the
#: whole package for every job took a fifth of ``snakemake -n`` (benchmarks/plan_start.py, py-spy). The folders'
#: stamps see a module created or removed beside those read.
_MEMO: dict[tuple, tuple[tuple[Path, ...], tuple | None, str]] = {}


def _stamps(paths: tuple[Path, ...]) -> tuple | None:
    """:func:`_stamp` of each path (None when one is gone: the hash is computed again)."""
    try:
        return tuple(_stamp(p) for p in paths)
    except OSError:
        return None


def _code_hash(script: Path, algorithms: tuple[str, ...] | None, algorithm_modules: tuple | None, root: Path,
               plugins: tuple[str, ...] = (), cut: tuple[str, ...] = (), external: tuple[str, ...] = ()
               ) -> tuple[tuple[Path, ...], str]:
    """The files one job's hash reads (with their folders) and the digest (:func:`code_hash`)."""
    algorithm_modules = dict(algorithm_modules) if algorithm_modules is not None else None
    inside = [p for p in plugins if Path(p).is_relative_to(root.resolve())]
    outside = [p for p in plugins if not Path(p).is_relative_to(root.resolve())]
    starts = [Path(script), *(Path(p) for p in outside), *(_module_name(Path(p), root.resolve()) for p in inside)]
    if algorithms is None:
        modules = import_closure(starts, cut=cut, root=root)
    else:
        if algorithm_modules is None:
            from fedshift.algorithms.registry import algorithm_modules as registered

            algorithm_modules = registered(root)
        names = list(algorithms)
        unknown = [a for a in names if a not in algorithm_modules]
        if unknown:
            raise KeyError(f"unregistered algorithm(s) {unknown}; registered: {sorted(algorithm_modules)}")
        own = {algorithm_modules[a] for a in names}
        modules = import_closure(starts, cut=set(algorithm_modules.values()) - own | set(cut), root=root)
        modules |= import_closure([*sorted(own), *(Path(p) for p in external)], cut=cut, root=root)
    digest = hashlib.sha256()
    files = [module_file(name, root) for name in sorted(modules)]
    for name, path in zip(sorted(modules), files, strict=True):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for path in (*outside, *external):
        digest.update(path.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    read = [Path(script), *files, *(Path(p) for p in (*outside, *external))]
    if algorithms is not None and algorithm_modules is not None:  # the declarations decide the cut
        read += sorted((root / "algorithms").glob("*.py")) + sorted((root / "algorithms" / "decl").glob("*.py"))
    read += sorted({p.parent for p in read})
    return tuple(read), digest.hexdigest()[:16]
