"""No module of the package imports another module's private names (``from fedshift.x import _name``): a name one
module needs from another is public there (in its ``__all__``, with a docstring)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _private_imports(src: Path = SRC) -> set[tuple[str, str]]:
    found = set()
    for path in sorted((src / "fedshift").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedshift"):
                found |= {(path.relative_to(src).as_posix(), a.name) for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")}
    return found


def test_no_module_imports_another_modules_private_names():
    assert _private_imports() == set()


def test_the_scan_sees_a_private_import_and_not_an_alias(tmp_path):
    (tmp_path / "fedshift").mkdir()
    (tmp_path / "fedshift" / "a.py").write_text("from fedshift.b import _hidden, shown\nfrom fedshift.c import d as _d\n")
    assert _private_imports(tmp_path) == {("fedshift/a.py", "_hidden")}
