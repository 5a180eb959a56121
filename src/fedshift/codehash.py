"""What a job executes: the fedshift modules a script imports, and a hash of their source.

A workflow job's rerun trigger for library code (``params: code=...``). Snakemake's own ``code`` trigger
sees only the job's script; a hash of the whole library would rerun every training job when a plotting
module changes. Here a job's code is the *import closure* of its script inside the fedshift package,
computed statically from the ``import`` statements (imports inside functions count, as they run too), with the
parent packages' ``__init__.py`` that Python executes on the way.

Registered algorithm modules (:mod:`fedshift.algorithms.registry`) are cut from a script's closure when
the job names its algorithms: a job then hashes the closure of its own algorithms' modules only, so
editing SCAFFOLD retrains SCAFFOLD's runs and not FedAvg's, even though both are built by one paper
module that imports both.

Who reads the import statements: the package's import graph is `grimp <https://grimp.readthedocs.io>`_'s (the engine
of import-linter, which checks ``.importlinter``; one scan of every module, in Rust, about 0.04 CPU-s), and a file
that is no module of the package (a workflow script, a plug-in's file, a script folder inside the package) is read by
:mod:`modulefinder` (its compiled code's import instructions). Neither imports anything: the plan computes every
job's hash and imports no torch (``.importlinter``'s plan contract). Only the ``import`` statements are read, never
what a module declares: the algorithms' declarations are Python objects (:mod:`fedshift.algorithms.declarations`).
``if TYPE_CHECKING:`` imports count as imports.

Only modules reached by an ``import`` are seen. The library imports two kinds of module by a computed name:
paper plug-ins and shifts (discovered, :func:`fedshift.shifts.discover`); a job names those files itself
(``plugins``: its paper's module and :attr:`fedshift.contract.RunSpec.modules`, a matrix run's shift).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import json
import modulefinder
import os
import subprocess
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

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


#: The graph of a package folder that is not the one this process imported (a copy in a test): grimp finds a package
#: by its import name, so a fresh interpreter with the copy's parent folder first on its path scans it.
_SCAN_ELSEWHERE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import grimp
graph = grimp.build_graph(sys.argv[2], cache_dir=None)
json.dump({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}, sys.stdout)
"""


def _scan(root: Path) -> dict[str, frozenset[str]]:
    """Each module of the package folder ``root`` → the package's modules it imports directly (grimp's graph).

    grimp is asked for no cache (``cache_dir=None``): its cache trusts a file's modification time alone, and the
    hashes' memo (:func:`keep_code_memo_in`) already spares a later plan the scan.
    """
    root = Path(root).resolve()
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and any(Path(p).resolve() == root for p in spec.submodule_search_locations or ()):
        import grimp

        graph = grimp.build_graph(PACKAGE, cache_dir=None)
        found = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    else:
        found = json.loads(subprocess.run([sys.executable, "-c", _SCAN_ELSEWHERE, str(root.parent), PACKAGE],
                                          capture_output=True, text=True, check=True).stdout)
    return {m: frozenset(v) for m, v in found.items()}


class _Graph(NamedTuple):
    """One scan of a package folder (:func:`_graph`)."""

    #: module → the modules importing it runs first-hand: those it imports, with their parent packages
    imports: dict[str, frozenset[str]]
    #: module → its file
    files: dict[str, str]
    #: the :func:`_stamp` of each file and folder of the package, taken before the scan
    stamps: dict[str, tuple[int, int, int, int]]


#: Package folder → its :class:`_Graph`, used while the files and folders a closure reads keep their stamps
#: (:func:`import_closure`).
_GRAPHS: dict[Path, _Graph] = {}


def _graph(root: Path, *, again: bool = False) -> _Graph:
    """:func:`_scan` of ``root`` with the stamps of its files and folders, kept per process (``again``: scan anew)."""
    if again or root not in _GRAPHS:
        stamps = {}
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            stamps[folder] = _stamp(folder)
            stamps.update((p, _stamp(p)) for p in (os.path.join(folder, f) for f in files if f.endswith(".py")))
        scanned = _scan(root)
        files = {m: str(module_file(m, root)) for m in scanned}
        imports = {m: _with_packages(deps, root) for m, deps in scanned.items()}
        _GRAPHS[root] = _Graph(imports, files, stamps)
    return _GRAPHS[root]


def _with_packages(names: Iterable[str], root: Path) -> frozenset[str]:
    """``names`` and their parent packages, those that are modules under ``root``."""
    return frozenset(p for m in names for p in _with_parents(m) if module_file(p, root))


def _file_imports(path: Path, root: Path) -> set[str]:
    """The fedshift modules (and candidates: ``from fedshift.x import y`` gives ``fedshift.x.y``) a file imports.

    :mod:`modulefinder` yields each import instruction of the compiled code, nested functions' included; a relative
    import is resolved against the file's own package when the file lies under ``root``, and is ignored elsewhere.
    """
    try:
        here = _module_name(path, root)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    except ValueError:  # a script outside the package
        package = ""
    finder = modulefinder.ModuleFinder(path=[])
    todo, found = [compile(path.read_bytes(), str(path), "exec")], set()
    while todo:
        code = todo.pop()
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        for kind, args in finder.scan_opcodes(code):
            if kind == "absolute_import":
                (fromlist, name), level = args, 0
            elif kind == "relative_import":
                level, fromlist, name = args
            else:
                continue
            if level:
                if not package:
                    continue
                base = package.split(".")[: package.count(".") + 2 - level]
                name = ".".join([*base, name] if name else base)
            found.add(name)
            found.update(f"{name}.{a}" for a in fromlist or ())
    return {n for n in found if n.split(".")[0] == PACKAGE}


@functools.cache
def _file_imports_at(path: Path, root: Path, stamp: tuple[int, int, int, int]) -> frozenset[str]:
    """:func:`_file_imports` of ``path`` as it is at ``stamp`` (:func:`_stamp`)."""
    return frozenset(_file_imports(path, root))


def imports_of(path: str | Path, root: Path = PACKAGE_DIR) -> set[str]:
    """The fedshift modules one source file imports (every ``import``, at any depth of the file).

    ``from fedshift.algorithms import adversarial`` yields ``fedshift.algorithms.adversarial`` (a
    submodule) as well as ``fedshift.algorithms``; each imported module comes with its parent packages.
    A module of the package is looked up in the package's import graph (grimp); any other file is read by
    :mod:`modulefinder`, its relative imports resolved against its own package when it lies under ``root``.

    Raises
    ------
    SyntaxError
        When a file that is no module of the package does not parse.
    grimp.exceptions.SourceSyntaxError
        When a module of the package does not parse.
    subprocess.CalledProcessError
        When ``root`` is not the imported package's folder and scanning it fails.
    """
    return set(_imports(Path(path), root, _graph(root)))


def _imports(path: Path, root: Path, graph: _Graph) -> frozenset[str]:
    """:func:`imports_of` in a given graph."""
    try:
        found = graph.imports.get(_module_name(path, root))
    except ValueError:  # a file outside the package
        found = None
    return _with_packages(_file_imports_at(path, root, _stamp(path)), root) if found is None else found


def _stamp(path: str | Path) -> tuple[int, int, int, int]:
    """Size, modification and change time (ns) and inode of ``path``: an edit changes the change time, which no
    tool sets back, and a file replaced by a checkout is a new inode."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


#: The on-disk memo (:func:`keep_code_memo_in`): its file, the digests of :func:`code_hash` (repr of its key → [files
#: read, their stamps, digest]), and whether this process added any.
_DISK: dict[str, Any] = {"path": None, "hashes": {}, "dirty": False}


def keep_code_memo_in(path: str | Path) -> None:
    """Keep the code hashes in the JSON file ``path`` between processes.

    Each entry is kept with the :func:`_stamp` of every file it read (and of their folders, for a module added or
    removed beside them) and is used only while they are all unchanged. Scanning the package's imports and hashing
    each job's closure is what the code hashes cost a plan, and again every SLURM job's parse. With this, a process
    reads the entries, recomputes those whose files changed (scanning the package only then), and at exit writes the
    file again (atomically, when it added any). A file that is missing, unreadable or not this format is ignored
    (everything is computed), and one that cannot be written is skipped: the memo saves time and never decides a
    hash on its own. The workflow keeps it under ``.snakemake/`` (``workflow/rules/common.smk``).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    hashes = data.get("hashes") if isinstance(data, dict) else None
    _DISK.update(path=path, dirty=False, hashes=hashes if isinstance(hashes, dict) else {})
    _file_imports_at.cache_clear()
    _GRAPHS.clear()
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
        tmp.write_text(json.dumps({"hashes": _DISK["hashes"]}, sort_keys=True))
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

    Raises
    ------
    SyntaxError
        When a start file that is no module of the package does not parse.
    """
    start, cut = list(start), set(cut)
    for again in (False, True):  # a module edited since the package was scanned: scanned anew, once
        graph = _graph(root, again=again)
        seen = _closure(start, cut, root, graph)
        files = [graph.files.get(name) or str(module_file(name, root)) for name in seen]
        if all(graph.stamps.get(p) == _stamp(p) for p in {*files, *map(os.path.dirname, files)}):
            break
    return seen


def _closure(start: list[str | Path], cut: set[str], root: Path, graph: _Graph) -> set[str]:
    """:func:`import_closure` in one graph."""
    seen: set[str] = set()
    todo: list[str] = []
    for s in start:
        if isinstance(s, Path) or "/" in str(s) or str(s).endswith(".py"):
            found = [n for n in _imports(Path(s).resolve(), root, graph) if n not in seen and n not in cut]
        else:
            found = [n for n in _with_parents(str(s)) if module_file(n, root)]
        seen.update(found)
        todo += found
    while todo:
        name = todo.pop()
        found = graph.imports.get(name)
        if found is None:  # a file that is no module of the graph (a script folder inside the package)
            found = _imports(module_file(name, root), root, graph)
        new = found - seen - cut
        seen |= new
        todo += new
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
