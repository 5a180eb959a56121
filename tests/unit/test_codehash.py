"""Per-job code hashes (fedshift.codehash): the static import closure, and which edits change which job's hash."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedshift.algorithms import registry
from fedshift.codehash import PACKAGE_DIR, code_hash, import_closure, imports_of

SCRIPTS = Path(__file__).resolve().parents[2] / "workflow" / "scripts"


@pytest.fixture
def package(tmp_path) -> Path:
    """A copy of the fedshift package folder to edit."""
    return Path(shutil.copytree(PACKAGE_DIR, tmp_path / "fedshift", ignore=shutil.ignore_patterns("__pycache__")))


def _edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n# edited\n")


def test_imports_of_resolves_submodules_parents_relative_and_nested(tmp_path):
    pkg = tmp_path / "fedshift"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "a.py", "b.py", "c.py", "sub/__init__.py", "sub/d.py", "sub/e.py"):
        (pkg / f).write_text("")
    (pkg / "sub" / "d.py").write_text(
        "import os\nfrom fedshift import a\nfrom . import e\nfrom ..b import x\n"
        "def f():\n    import fedshift.c\n")
    assert imports_of(pkg / "sub" / "d.py", pkg) == {"fedshift", "fedshift.a", "fedshift.b", "fedshift.c",
                                                      "fedshift.sub", "fedshift.sub.e"}
    assert import_closure(["fedshift.sub.d"], root=pkg) == {"fedshift", "fedshift.a", "fedshift.b", "fedshift.c",
                                                           "fedshift.sub", "fedshift.sub.d", "fedshift.sub.e"}
    assert import_closure(["fedshift.sub.d"], cut={"fedshift.c"}, root=pkg) == {
        "fedshift", "fedshift.a", "fedshift.b", "fedshift.sub", "fedshift.sub.d", "fedshift.sub.e"}
    # an edit in the same process is followed: a new module, imported by an edited one, joins the closure
    (pkg / "f.py").write_text("")
    (pkg / "sub" / "e.py").write_text("from fedshift import f\n")
    assert import_closure(["fedshift.sub.d"], cut={"fedshift.c"}, root=pkg) == {
        "fedshift", "fedshift.a", "fedshift.b", "fedshift.f", "fedshift.sub", "fedshift.sub.d", "fedshift.sub.e"}
    # a file that is no module of the package (a workflow script): the same imports, its relative ones ignored
    script = tmp_path / "script.py"
    script.write_text((pkg / "sub" / "d.py").read_text())
    assert imports_of(script, pkg) == {"fedshift", "fedshift.a", "fedshift.c"}


def test_static_closure_holds_every_module_python_imports():
    """What importing the train jobs' modules really loads is inside the static closure."""
    mods = ["fedshift.runner", "fedshift.papers.afl.paper", "fedshift.papers.fedpals.paper", "fedshift.papers.wafl",
            "fedshift.papers.fedmm", "fedshift.papers.agnostic_fedavg"]
    code = (f"import json, sys\nfor m in {mods!r}: __import__(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'fedshift')))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                           check=True).stdout))
    static = import_closure(mods)
    assert loaded - static == set()
    # a report module is not what a train job runs: the paper's output_modules are cut from its closure
    from fedshift.papers.fedpals.paper import FedpalsPaper

    assert "fedshift.papers.fedpals.report" not in import_closure(mods, cut=FedpalsPaper.output_modules)


def test_registered_modules_read_statically_match_the_registry():
    names = registry.names()  # imports every algorithm module
    static = registry.algorithm_modules()
    assert names == sorted(static)
    assert {n: registry.get(n).module for n in names} == static


def test_edits_change_the_hash_of_exactly_the_jobs_that_run_them(package):
    script = SCRIPTS / "job_train.py"  # the generic train job, loading the FedPALS plug-in by name
    plugin = package / "papers" / "fedpals" / "paper.py"

    from fedshift.papers.fedpals.paper import FedpalsPaper

    def hashes():  # as workflow/rules/common.smk's code_of: the paper's output-only modules cut
        return {a: code_hash(script, algorithms=[a], plugins=[plugin], cut=FedpalsPaper.output_modules, root=package)
                for a in ("fedavg", "scaffold", "fedpals")}

    before = hashes()
    assert len(set(before.values())) == 3

    _edit(package / "papers" / "fedpals" / "report.py")  # plotting/report code: no training job changes
    assert hashes() == before
    _edit(package / "algorithms" / "afl.py")             # another paper's algorithm (imported via the runner)
    assert hashes() == before
    _edit(package / "algorithms" / "scaffold.py")         # SCAFFOLD: its runs only
    after = hashes()
    assert after["scaffold"] != before["scaffold"]
    assert {a: after[a] for a in ("fedavg", "fedpals")} == {a: before[a] for a in ("fedavg", "fedpals")}
    _edit(package / "algorithms" / "fedavg.py")           # FedAvg's module: FedPALS and SCAFFOLD import it too
    assert all(hashes()[a] != after[a] for a in after)
    last = hashes()
    _edit(package / "core" / "engine.py")                        # the shared local-training engine: every run
    assert all(hashes()[a] != last[a] for a in last)


def test_unregistered_algorithm_is_refused():
    with pytest.raises(KeyError, match="unregistered algorithm"):
        code_hash(SCRIPTS / "fedpals_train.py", algorithms=["no_such_algorithm"])


@pytest.mark.parametrize(("paper", "cls", "algorithm"),
                         [("wafl", "WaflPaper", "wafl"), ("fedmm", "FedmmPaper", "fedmm")])
def test_a_plugins_output_modules_count_for_its_outputs_only(package, paper, cls, algorithm):
    """A paper's report module (Paper.output_modules): editing it changes the hash of the paper's table/figure
    jobs and not that of its training jobs (``code_of`` passes the cut to every job but job_output.py); editing any
    of its computation modules (config, data, fit) changes the training jobs' hash."""
    import importlib

    output_modules = getattr(importlib.import_module(f"fedshift.papers.{paper}.paper"), cls).output_modules
    plugin = package / "papers" / paper / "paper.py"

    def train():
        return code_hash(SCRIPTS / "job_train.py", algorithms=[algorithm], plugins=[plugin], cut=output_modules,
                         root=package)

    def output():
        return code_hash(SCRIPTS / "job_output.py", plugins=[plugin], root=package)

    before = train(), output()
    _edit(package / "papers" / paper / "report.py")
    assert train() == before[0] and output() != before[1]
    for module in ("config.py", "data.py", "fit.py"):
        last = train()
        _edit(package / "papers" / paper / module)
        assert train() != last, module


def test_a_matrix_cell_hashes_its_own_shift_and_no_paper(package):
    """Shifts are discovered (no import names them), so a matrix run names its shift's file (RunSpec.modules): editing
    the shared label-shift draw reruns the label column only, and editing FedPALS's own code reruns no matrix cell."""
    from fedshift.shifts import SHIFTS, discover

    discover()
    script, plugin = SCRIPTS / "job_train.py", package / "papers" / "shift_matrix" / "paper.py"

    def shift_file(kind: str) -> Path:
        return package / "shifts" / f"{SHIFTS[kind].__module__.rsplit('.', 1)[1]}.py"

    def hashes():  # as workflow/rules/common.smk's run_code for a FedAvg cell of each column
        return {k: code_hash(script, algorithms=["fedavg"], plugins=[plugin, shift_file(k)], root=package)
                for k in ("label", "adversarial", "mixture")}

    before = hashes()
    assert len(set(before.values())) == 3
    _edit(package / "papers" / "fedpals" / "data.py")
    assert hashes() == before
    _edit(package / "partition" / "label_shift.py")
    after = hashes()
    assert after["label"] != before["label"]
    assert {k: after[k] for k in ("adversarial", "mixture")} == {k: before[k] for k in ("adversarial", "mixture")}
    _edit(package / "shifts" / "adversarial.py")
    assert hashes()["adversarial"] != after["adversarial"] and hashes()["label"] == after["label"]


def test_matrix_runs_name_the_file_of_their_shift():
    import copy

    from fedshift.errors import load_yaml
    from fedshift.contract import load_paper

    root = Path(__file__).resolve().parents[2]
    cfg = load_yaml(root / "config/papers/shift_matrix.yaml")
    paper = load_paper("shift_matrix", cfg["papers"]["shift_matrix"], copy.deepcopy(cfg))
    runs = paper.runs()
    kinds = {r.experiment: r.hparams["shift"]["kind"] for r in runs}
    assert runs and all(len(r.modules) == 1 and Path(r.modules[0]).name == f"{kinds[r.experiment]}.py" for r in runs)


PAPERS = {"afl": "AflPaper", "agnostic_fedavg": "AgnosticFedAvgPaper", "fedmm": "FedmmPaper",
          "fedpals": "FedpalsPaper", "wafl": "WaflPaper"}


def _paper_class(paper: str):
    import importlib

    return getattr(importlib.import_module(f"fedshift.papers.{paper}.paper"), PAPERS[paper])


def _method_imports(cls, method: str) -> set[str]:
    """The fedshift modules one method of a paper class imports in its body (``from ... import`` lines)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(cls, method))))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedshift"):
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_a_papers_train_modules_are_never_run_by_its_outputs(paper):
    """Paper.train_modules is cut from the table/figure jobs' hash, so no output may run one: neither the paper's
    make_output nor any module its output modules import reaches them (else an edit would not rerun the table)."""
    cls = _paper_class(paper)
    assert cls.train_modules, "every paper names its training-only modules"
    ran = import_closure([*cls.output_modules, *_method_imports(cls, "make_output")])
    assert not ran & set(cls.train_modules), sorted(ran & set(cls.train_modules))
    trained = import_closure(_method_imports(cls, "train") | _method_imports(cls, "write_partition"))
    assert set(cls.train_modules) <= trained | set(cls.output_modules)


def test_the_disjointness_check_fails_when_an_output_runs_training_code():
    """The check above can fail: WAFL's eq. 9 output runs ``data``, which is why WAFL cuts only ``fit``."""
    cls = _paper_class("wafl")
    ran = import_closure([*cls.output_modules, *_method_imports(cls, "make_output")])
    assert "fedshift.papers.wafl.data" in ran and "fedshift.papers.wafl.fit" not in ran


@pytest.mark.parametrize(("paper", "algorithm"), [("afl", "afl"), ("fedpals", "fedpals")])
def test_a_plugins_train_modules_count_for_its_training_jobs_only(package, paper, algorithm):
    """The twin of the test above: editing a paper's fit.py changes its training jobs' hash and not its table
    jobs' (``code_of`` cuts Paper.train_modules from job_output.py's closure); editing its report changes only theirs."""
    cls = _paper_class(paper)
    plugin = package / "papers" / paper / "paper.py"

    def train():
        return code_hash(SCRIPTS / "job_train.py", algorithms=[algorithm], plugins=[plugin], cut=cls.output_modules,
                         root=package)

    def output():
        return code_hash(SCRIPTS / "job_output.py", plugins=[plugin], cut=cls.train_modules, root=package)

    before = train(), output()
    _edit(package / "papers" / paper / "fit.py")
    assert train() != before[0] and output() == before[1]
    middle = train(), output()
    _edit(package / "papers" / paper / "report.py")
    assert train() == middle[0] and output() != middle[1]
    _edit(package / "papers" / paper / "config.py")  # the plan's half: every job runs it
    assert train() != middle[0] and output() != middle[1]


NESTED = ("try:\n    import fedshift.a\nexcept E:\n    import fedshift.b\nelse:\n    import fedshift.c\nfinally:\n"
          "    import fedshift.d\nclass K:\n    def f(self):\n        with x:\n            while y:\n"
          "                from fedshift import e\nmatch v:\n    case 1:\n        import fedshift.g\n"
          "if TYPE_CHECKING:\n    from fedshift.h import Name\n")


def test_imports_in_every_kind_of_nested_body_are_found(tmp_path):
    """Imports at any depth (try/except/else/finally, a method, with, while, match, an ``if TYPE_CHECKING:``), in a
    module of the package (grimp's graph) and in a file outside it (modulefinder) alike."""
    pkg = tmp_path / "fedshift"
    pkg.mkdir()
    names = ("a", "b", "c", "d", "e", "g", "h")
    for f in ("__init__", *names):
        (pkg / f"{f}.py").write_text("")
    (pkg / "nested.py").write_text(NESTED)
    (tmp_path / "script.py").write_text(NESTED)
    every = {"fedshift", *(f"fedshift.{n}" for n in names)}
    assert imports_of(pkg / "nested.py", pkg) == every
    assert imports_of(tmp_path / "script.py", pkg) == every


@pytest.fixture
def memo_file(tmp_path):
    """codehash's on-disk memo pointed at a fresh file; the process's own state restored afterwards."""
    from fedshift import codehash

    saved = {k: v for k, v in codehash._DISK.items()}
    yield tmp_path / "memo" / "code-hashes.json"
    codehash._DISK.clear()
    codehash._DISK.update(saved, path=None, dirty=False)
    codehash._MEMO.clear()
    codehash._GRAPHS.clear()
    codehash._file_imports_at.cache_clear()


def test_the_memo_file_gives_the_same_hashes_and_follows_every_edit(package, memo_file, monkeypatch):
    """A plan that reads the memo (keep_code_memo_in) gets the hashes a fresh computation gets, without scanning an
    unchanged package or reading an unchanged script; an edited file is read again."""
    from fedshift import codehash
    from fedshift.papers.fedpals.paper import FedpalsPaper

    script, plugin = SCRIPTS / "job_train.py", package / "papers" / "fedpals" / "paper.py"

    def hashes():
        return {a: code_hash(script, algorithms=[a], plugins=[plugin], cut=FedpalsPaper.output_modules, root=package)
                for a in ("fedavg", "scaffold")}

    codehash.keep_code_memo_in(memo_file)
    first = hashes()
    codehash._write_memo()  # what the process does at exit
    assert memo_file.is_file() and set(json.loads(memo_file.read_text())) == {"hashes"}

    codehash.keep_code_memo_in(memo_file)  # the next process: nothing scanned or read, nothing hashed again
    with monkeypatch.context() as m:
        m.setattr(codehash, "_scan", lambda *a, **k: pytest.fail("scanned an unchanged package"))
        m.setattr(codehash, "_file_imports", lambda *a, **k: pytest.fail("read an unchanged script"))
        m.setattr(codehash, "_code_hash", lambda *a, **k: pytest.fail("hashed unchanged files"))
        assert hashes() == first

    _edit(package / "algorithms" / "scaffold.py")
    codehash.keep_code_memo_in(memo_file)
    edited = hashes()
    assert edited["scaffold"] != first["scaffold"] and edited["fedavg"] == first["fedavg"]
    codehash._MEMO.clear()
    codehash._GRAPHS.clear()
    codehash._file_imports_at.cache_clear()
    codehash._DISK["path"] = None  # the same tree, computed without the memo
    assert hashes() == edited


def test_a_broken_or_unwritable_memo_file_only_costs_time(package, memo_file):
    from fedshift import codehash

    script = SCRIPTS / "job_train.py"
    plain = code_hash(script, algorithms=["fedavg"], root=package)
    memo_file.parent.mkdir()
    for text in ("{not json", "[1, 2]", '{"hashes": {"k": 3}, "imports": []}'):
        memo_file.write_text(text)
        codehash.keep_code_memo_in(memo_file)
        assert code_hash(script, algorithms=["fedavg"], root=package) == plain
    codehash._write_memo()
    assert set(json.loads(memo_file.read_text())) == {"hashes"}  # rewritten whole
    codehash.keep_code_memo_in(memo_file.parent / "a-file" / "below-it.json")
    (memo_file.parent / "a-file").write_text("")  # its folder cannot be made: the write is skipped
    assert code_hash(script, algorithms=["scaffold"], root=package)
    codehash._write_memo()
    assert not (memo_file.parent / "a-file").is_dir()
