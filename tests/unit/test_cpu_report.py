"""``--cpu-report`` (tests/cpu_report.py) counts a test's subprocesses, not its waiting, serially and under
pytest-xdist; ``benchmarks/suite_cpu.py`` sums the report by file and compares two reports."""

from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BURN = textwrap.dedent('''
    import subprocess, sys, time

    def test_burns_a_second_in_a_child():
        code = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.0: pass"
        subprocess.run([sys.executable, "-c", code], check=True)

    def test_only_waits():
        time.sleep(0.6)

    def test_fails():
        assert False
''')


def _suite_cpu():
    spec = importlib.util.spec_from_file_location("suite_cpu", ROOT / "benchmarks" / "suite_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_report_counts_subprocesses_and_not_waiting(tmp_path, workers):
    (tmp_path / "test_burn.py").write_text(BURN)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's addopts
    out = tmp_path / "cpu.csv"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "cpu_report", "-p", "no:cacheprovider", *workers,
                           "--cpu-report", str(out), "test_burn.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:]  # one test fails on purpose
    assert "CPU seconds of the tests" in proc.stdout
    with out.open() as f:
        rows = {r["nodeid"].split("::")[1]: r for r in csv.DictReader(f)}
    assert set(rows) == {"test_burns_a_second_in_a_child", "test_only_waits", "test_fails"}
    burn, wait = rows["test_burns_a_second_in_a_child"], rows["test_only_waits"]
    assert float(burn["cpu_s"]) >= 0.95 and float(burn["cpu_s_call"]) >= 0.95
    assert float(wait["cpu_s"]) < 0.3 <= 0.55 <= float(wait["wall_s"])
    assert rows["test_fails"]["outcome"] == "failed" and burn["outcome"] == "passed"
    assert all(r["worker"].startswith("gw") for r in rows.values()) == bool(workers)

    suite_cpu = _suite_cpu()
    report = suite_cpu.read(out)
    files = suite_cpu.by_file(report)
    assert list(files) == ["test_burn.py"] and files["test_burn.py"]["tests"] == 3
    assert files["test_burn.py"]["cpu_s"] == pytest.approx(sum(float(r["cpu_s"]) for r in rows.values()))
    halved = [{**r, "cpu_s": r["cpu_s"] / 2} for r in report]
    text = suite_cpu.report(halved, report, top=2)
    assert "| `test_burn.py` | 3 |" in text and "| 0.50 |" in text  # the ratio against the earlier report
    assert text.count("`test_burn.py::") == 2  # --top


def test_the_ordered_workflow_files_are_the_workflow_files():
    """Every workflow file is placed by CI's order (tests/conftest.py): a renamed or new file is not left to run last
    by accident."""
    tests = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("root_conftest", tests / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)  # by path: under xdist `import conftest` may find another one
    spec.loader.exec_module(conftest)
    on_disk = {p.name for p in (tests / "workflow").glob("test_*.py")}
    named = set(conftest.WORKFLOW_LONGEST_FIRST) | {Path(f).name for f in conftest.FIRST_UNDER_XDIST
                                                    if f.startswith("workflow/")}
    assert on_disk == named
    assert len(conftest.WORKFLOW_LONGEST_FIRST) == len(set(conftest.WORKFLOW_LONGEST_FIRST))
