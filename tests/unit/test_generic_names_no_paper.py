"""The generic packages name no paper: what they need to know of one is a hook of its ``Paper`` plug-in.

Three rules, each a grep of the source (comments and docstrings included unless said):

* ``validation/`` names no paper at all: neither a paper package (``fedpals``, ``shift_matrix``), nor a paper's
  short name (FedPALS, "shift matrix"). An algorithm's module path (``fedshift.algorithms.fedpals.build_fedpals``)
  is an algorithm, not a paper, and is allowed.
* ``core/``, ``algorithms/``, ``partition/``, ``shifts/``, ``data/`` and ``validation/`` hold no paper package
  string (``fedshift.papers.<paper>``, ``papers/<paper>/``). Their algorithm names are the papers' method names
  (``algorithms/fedpals.py``) and ``shifts/`` is the matrix's shift registry (its errors name the
  ``shift_matrix.shifts`` key path), so a paper's short name is allowed there.
* No module of ``src/fedshift`` outside ``papers/`` imports a paper package or names one in a string its code uses
  (docstrings and comments aside): ``docsgen/`` (the paper pages and citations) and ``claims/`` (each paper's
  claims) are paper-facing by design and may describe papers in prose, never depend on one's package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import fedshift

PACKAGE = Path(fedshift.__file__).resolve().parent
PAPER_PACKAGES = sorted(p.name for p in (PACKAGE / "papers").iterdir() if (p / "__init__.py").is_file())
#: The papers' short names as the docs write them, besides their package names.
SHORT_NAMES = ("AFL", "WAFL", "FedMM", "AgnosticFedAvg", "FedPALS", "shift matrix")
STRICT = ("validation",)
NO_PACKAGE_STRINGS = ("validation", "core", "algorithms", "partition", "shifts", "data")

_PACKAGE_STRING = re.compile(rf"fedshift\.papers\.(?:{'|'.join(PAPER_PACKAGES)})\b|"
                             rf"\bpapers/(?:{'|'.join(PAPER_PACKAGES)})/")
_ANY_NAME = re.compile(r"\b(?:" + "|".join(re.escape(n).replace(r"\ ", "[ _]")
                                           for n in (*PAPER_PACKAGES, *SHORT_NAMES)) + r")\b", re.I)
_ALGORITHM_PATH = re.compile(r"fedshift\.algorithms\.\w+(?:[.:]\w+)*")


def _sources(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (PACKAGE / pkg).rglob("*.py"))


def _hits(pattern: re.Pattern[str], text: str, path: Path) -> list[str]:
    return [f"{path.relative_to(PACKAGE)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for m in pattern.finditer(text)]


def names_of_papers(text: str, path: Path) -> list[str]:
    """Every paper name in ``text`` (algorithm module paths blanked out first)."""
    return _hits(_ANY_NAME, _ALGORITHM_PATH.sub(lambda m: " " * len(m.group(0)), text), path)


def code_references(text: str, path: Path) -> list[str]:
    """Imports of a paper package and code strings naming one (docstrings are prose and left out)."""
    tree = ast.parse(text)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names = [node.value]
        out += [f"{path.relative_to(PACKAGE)}:{node.lineno}: {n}" for n in names if _PACKAGE_STRING.search(n)]
    return out


def test_validation_names_no_paper():
    found = [h for p in _sources(*STRICT) for h in names_of_papers(p.read_text(), p)]
    assert found == []


def test_the_generic_packages_hold_no_paper_package_string():
    found = [h for p in _sources(*NO_PACKAGE_STRINGS) for h in _hits(_PACKAGE_STRING, p.read_text(), p)]
    assert found == []


def test_no_module_outside_the_papers_depends_on_a_paper_package():
    files = [p for p in PACKAGE.rglob("*.py") if (PACKAGE / "papers") not in p.parents]
    found = [h for p in sorted(files) for h in code_references(p.read_text(), p)]
    assert found == []


@pytest.mark.parametrize("text, rule", [
    ('if _from_package(paper, "fedshift.papers.fedpals"):\n', "package"),
    ("# participants per round of the shift matrix\n", "name"),
    ("FedPALS' last client is the target\n", "name"),
    ("see src/fedshift/papers/shift_matrix/paper.py\n", "package"),
])
def test_each_rule_finds_a_paper_where_one_is_named(text, rule):
    path = PACKAGE / "validation" / "x.py"
    assert names_of_papers(text, path)
    assert bool(_hits(_PACKAGE_STRING, text, path)) == (rule == "package")


def test_an_algorithm_path_and_an_import_in_a_docstring_are_not_a_paper():
    path = PACKAGE / "validation" / "x.py"
    assert names_of_papers('X = {"fedshift.algorithms.fedpals.build_fedpals": 1}\n', path) == []
    assert code_references('"""From :mod:`fedshift.papers.wafl`."""\n', path) == []
    assert code_references("from fedshift.papers.wafl import fit\n", path)
    assert code_references('M = "fedshift.papers.fedmm.report"\n', path)
