"""The layers hold: the ground floor imports nothing above it, and no paper imports another (``.importlinter``).

import-linter reads every ``import`` of the package, those inside functions included, and checks the contracts of
``.importlinter``; a second test keeps the contracts complete as papers and top-level packages are added.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import fedshift

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(fedshift.__file__).resolve().parent
CONTRACTS = ROOT / ".importlinter"


def _lint(config: Path, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports;"
                           f" sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, no_logo=True))"],
                          cwd=cwd, env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_every_layer_contract_is_kept():
    proc = _lint(CONTRACTS, ROOT, PACKAGE.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def _lint_edited(tmp_path: Path, module: str, leak: str) -> subprocess.CompletedProcess:
    """Lint a copy of the package in which ``module`` (a path under it) gains a function importing ``leak``."""
    copy = tmp_path / "src"
    shutil.copytree(PACKAGE, copy / "fedshift", ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / "fedshift" / module
    path.write_text(path.read_text() + f"\n\ndef _leak():\n    {leak}  # noqa\n")
    return _lint(CONTRACTS, ROOT, copy)


def test_a_paper_importing_another_paper_breaks_the_contract(tmp_path):
    """The check can fail: a copy of the package in which FedMM imports WAFL is refused, naming both."""
    proc = _lint_edited(tmp_path, "papers/fedmm/report.py", "from fedshift.papers.wafl import report")
    assert proc.returncode != 0
    assert "No paper imports another paper BROKEN" in proc.stdout
    assert "fedshift.papers.fedmm" in proc.stdout and "fedshift.papers.wafl" in proc.stdout


def test_the_contracts_cover_every_paper_and_the_ground_floor():
    """A new paper package is independent of the others only if the contract lists it."""
    cfg = configparser.ConfigParser()
    cfg.read(CONTRACTS)
    listed = set(cfg["importlinter:contract:papers-independent"]["modules"].split())
    papers = {f"fedshift.papers.{p.name}" for p in (PACKAGE / "papers").iterdir()
              if p.is_dir() and (p / "__init__.py").is_file()}
    assert papers == listed
    assert [x for x in cfg["importlinter:contract:layers"]["layers"].split()] == [
        "fedshift.papers", "fedshift.algorithms", "fedshift.models", "fedshift.core"]


def test_a_plan_module_importing_torch_breaks_the_plan_contract(tmp_path):
    """The plan's torch-free half (``plan-no-torch``) can fail: a paper's config importing torch is named."""
    proc = _lint_edited(tmp_path, "papers/afl/config.py", "import torch")
    assert proc.returncode != 0
    assert "The plan imports no torch" in proc.stdout and "BROKEN" in proc.stdout
    assert "fedshift.papers.afl.config is not allowed to import torch" in proc.stdout.replace("\n", " ")
