"""The plan imports no heavy library (issue 46): loading the Snakefile and building its DAG imports no torch.

Every Snakemake parse (the first ``snakemake -n``, each SLURM job's own parse, each table job's start) pays for what
the plan imports. The plan is every paper's experiments, runs, inputs, outputs, claims, resources and code-hash
inputs; it needs each paper's ``config`` and ``paper`` modules, :mod:`fedshift.contract` and light modules, never
the training code. Here a dry run of the workflow is made in a fresh interpreter, which then reports which of
:data:`HEAVY` are in ``sys.modules`` and, for each, the fedshift line that imported it first. The failing case is
the toy paper (``tests/toy_paper/paper.py``) with ``import torch`` added at its top in the test's copy: switched on,
it breaks the rule and is named.
"""

from __future__ import annotations

import ast
import collections.abc
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: The libraries the plan must not import (the issue's list; POT is the module ``ot``).
HEAVY = ("torch", "torchvision", "cvxpy", "ot", "scipy", "matplotlib")

# A fresh interpreter: a hook on the import system notes, for each heavy library, the four deepest lines of the
# repository (src, Snakefile, rule files, plug-ins) on the stack when it is first imported; then Snakemake's own command line makes the dry run.
_PROBE = r"""
import json, os, sys, traceback
HERE = os.getcwd() + os.sep  # the repository copy: its src, Snakefile, rule files and plug-ins
HEAVY = set(sys.argv[1].split(","))
FIRST = {}

class Note:
    def find_spec(self, name, path=None, target=None):
        if name in HEAVY and name not in FIRST:
            ours = [f for f in traceback.extract_stack() if f.filename.startswith(HERE)]
            FIRST[name] = " <- ".join(f"{f.filename}:{f.lineno}: {f.line}" for f in ours[::-1][:4]) or "(snakemake)"
        return None

sys.meta_path.insert(0, Note())
from snakemake.cli import main
try:
    main(["-n", "--cores", "1", "--quiet", *sys.argv[2:]])
except SystemExit as e:
    code = e.code
print("PLAN-IMPORTS " + json.dumps({"rc": code, "heavy": {m: FIRST.get(m, "?") for m in sorted(HEAVY & set(sys.modules))}}))
"""


def plan_imports(workdir: Path, *args: str) -> dict[str, str]:
    """Heavy library → the line that imported it, after ``snakemake -n <args>`` in ``workdir`` (its ``src`` first).

    Raises
    ------
    AssertionError
        When the dry run fails (its output is shown).
    """
    env = {**os.environ, "PYTHONPATH": str(workdir / "src")}
    proc = subprocess.run([sys.executable, "-c", _PROBE, ",".join(HEAVY), *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600)
    line = [x for x in proc.stdout.splitlines() if x.startswith("PLAN-IMPORTS ")]
    assert line, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(line[-1].removeprefix("PLAN-IMPORTS "))
    assert report["rc"] in (0, None), proc.stdout[-3000:] + proc.stderr[-3000:]
    return report["heavy"]


def _copy(dest: Path, drop: tuple[str, ...] = ()) -> Path:
    """The repository's tracked and untracked-but-not-ignored files, less ``drop``, copied to ``dest``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        if f in drop or not (ROOT / f).is_file():
            continue
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        (dest / f).write_bytes((ROOT / f).read_bytes())
    return dest


def _without_matrix(dest: Path) -> Path:
    """A copy with the shift matrix switched off: its paper file gone, its section left out of the quick overlay."""
    work = _copy(dest, drop=("config/papers/shift_matrix.yaml",))
    quick = work / "config" / "quick.yaml"
    overlay = yaml.safe_load(quick.read_text())
    overlay.pop("shift_matrix", None)
    quick.write_text(yaml.safe_dump(overlay))
    return work


def test_the_five_papers_plan_imports_no_heavy_library(tmp_path):
    """Quick scale, every paper but the shift matrix (issue 50 makes its plug-in follow the same pattern)."""
    work = _without_matrix(tmp_path)
    assert plan_imports(work, "--configfile", "config/quick.yaml") == {}


def test_the_whole_plan_imports_no_heavy_library(tmp_path):
    """Every paper, quick scale: the Snakefile's parse and the DAG it builds."""
    assert plan_imports(_copy(tmp_path), "--configfile", "config/quick.yaml") == {}


def test_a_plan_that_imports_torch_breaks_the_rule(tmp_path):
    """The failing case: the toy paper with torch imported at its top; switched on, torch is found and its line
    named (the toy paper itself imports torch inside ``train`` and ``evaluate``, as the package's papers do)."""
    work = _without_matrix(tmp_path)
    paper = work / "tests/toy_paper/paper.py"
    paper.write_text(paper.read_text().replace("import numpy as np\n", "import numpy as np\nimport torch\n", 1))
    assert "\nimport torch\n" in paper.read_text()
    heavy = plan_imports(work, "--configfile", "config/quick.yaml", "tests/toy_paper/toy.yaml")
    assert "torch" in heavy
    assert "toy_paper/paper.py" in heavy["torch"] and "import torch" in heavy["torch"]


def test_the_plans_dataset_names_are_those_prepare_decodes():
    """The plan reads which datasets ``fedshift.data.prepare`` decodes from the registry (no torch): the same names."""
    from fedshift.data import prepare, registry

    assert set(registry.DECODED) == set(prepare.PREPARERS) | set(prepare.IMAGE_FILE_PREPARERS)
    assert prepare.GENERATED is registry.GENERATED and prepare.raw_datasets_of is registry.raw_datasets_of


def _script_imports(script: str) -> str:
    """The import lines of one workflow job script, as source."""
    tree = ast.parse((ROOT / "workflow" / "scripts" / script).read_text())
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def _heavy_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(sorted(set({HEAVY!r}) & set(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=300).stdout
    return ast.literal_eval(out.strip().splitlines()[-1])


PAPER_MODULES = "\n".join(f"import fedshift.papers.{p}.paper" for p in
                          ("afl", "agnostic_fedavg", "fedmm", "fedpals", "wafl"))


@pytest.mark.parametrize("script", ["job_output.py", "job_partition.py"])
def test_a_table_or_partition_job_starts_without_torch(script):
    """Job scripts import only what their job uses: a table/figure or partition job's script and every paper's
    plug-in module start no heavy library (the paper's own make_output or write_partition imports what it needs)."""
    assert _heavy_after(_script_imports(script) + "\n" + PAPER_MODULES) == []


def test_a_training_job_imports_torch_where_it_trains():
    """The contrast: the same check sees torch once a paper's training code is imported (what ``train`` does)."""
    assert "torch" in _heavy_after(_script_imports("job_train.py") + "\nimport fedshift.papers.afl.fit")


def test_hyper_parameter_schemas_are_read_without_importing_an_algorithm():
    """validation.hparam_schema of every registered algorithm reads its declaration: no torch imported, and
    the same schema and closedness as read from the imported factory (``_imported_hparam_types``)."""
    code = ("from fedshift.algorithms import registry\nfrom fedshift.validation import hparam_schema\n"
            "[hparam_schema(n) for n in registry.declarations()]")
    assert _heavy_after(code) == []
    from fedshift.algorithms import registry
    from fedshift.validation.hparams import _imported_hparam_types, _type_schema, hparam_types

    for name in registry.declarations():
        (static, closed), (imported, imported_closed) = hparam_types(name), _imported_hparam_types(name)
        assert closed == imported_closed, name
        assert {k: _type_schema(v) for k, v in static.items()} == {k: _type_schema(v) for k, v in imported.items()}, name


@pytest.mark.parametrize(("factory_hint", "declared_hint", "same"), [
    (typing.Sequence[int] | None, collections.abc.Sequence[int] | None, True),
    (typing.Optional[dict[str, typing.Any]], dict[str, typing.Any] | None, True),  # noqa: UP045 — the point
    (typing.Union[float, tuple[float, float]], float | tuple[float, float], True),  # noqa: UP007 — the point
    (collections.abc.Callable[[list[int], object], object] | None, collections.abc.Callable[..., typing.Any] | None,
     True),  # code-only: set by code, never by a config, on both sides
    (int, float, False), (tuple[float, float], tuple[float], False), (int | None, int, False)])
def test_a_factory_annotation_matches_its_declared_type_as_python_reads_it(factory_hint, declared_hint, same):
    """The registry's check that a factory agrees with its settings compares types as Python resolves them
    (``typing.Sequence`` is ``collections.abc.Sequence``, ``Optional[X]`` is ``X | None``), and the docs and the
    matrix write a declared type as source text."""
    from fedshift.algorithms.declaration_checks import same_type
    from fedshift.algorithms.declarations import type_text

    assert same_type(factory_hint, declared_hint) is same
    assert [type_text(t) for t in (float, int | None, tuple[float, float])] == ["float", "int | None",
                                                                                "tuple[float, float]"]
