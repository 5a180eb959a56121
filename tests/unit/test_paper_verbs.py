"""One verb per stage in every paper package: ``config.resolve_run``, ``fit.train_run``, ``fit.evaluate_run``.

Read from the source (``ast``), so the check imports nothing; the plug-in's ``train`` and ``evaluate`` call those verbs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fedshift

PAPERS = Path(fedshift.__file__).resolve().parent / "papers"
#: stage → (module, function) every paper package defines
VERBS = {"resolve": ("config", "resolve_run"), "train": ("fit", "train_run"), "evaluate": ("fit", "evaluate_run")}


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            out.setdefault(node.name, node)
    return out


def _calls(node: ast.AST) -> set[str]:
    return {f"{c.func.value.id}.{c.func.attr}" for c in ast.walk(node) if isinstance(c, ast.Call)
            and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)}


@pytest.mark.parametrize("paper", ["afl", "agnostic_fedavg", "fedmm", "fedpals", "wafl"])
def test_every_paper_names_its_stages_with_the_same_verbs(paper):
    for module, verb in VERBS.values():
        assert verb in _functions(PAPERS / paper / f"{module}.py"), f"{paper}.{module} has no {verb}"
    plugin = _functions(PAPERS / paper / "paper.py")
    assert "fit.train_run" in _calls(plugin["train"]), f"{paper}: Paper.train does not call fit.train_run"
    assert "fit.evaluate_run" in _calls(plugin["evaluate"]), f"{paper}: Paper.evaluate does not call fit.evaluate_run"


def test_a_paper_with_its_own_verb_is_found(tmp_path):
    """The check can fail: a fit module that calls its training ``fit_run`` lacks ``train_run``."""
    fit = tmp_path / "fit.py"
    fit.write_text("def fit_run(resolved, seed):\n    return None\n\n\ndef evaluate_run(resolved, seed):\n    return None\n")
    assert "train_run" not in _functions(fit) and "evaluate_run" in _functions(fit)
