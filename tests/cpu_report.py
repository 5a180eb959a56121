"""``--cpu-report FILE``: each test's CPU seconds (user + system), its own process and its children, as a CSV.

Each phase (setup, call, teardown) of a test is measured in the process that runs it, with
``resource.getrusage`` of the process itself and of its waited-for children (Snakemake, its jobs, DVC, the docs
build), so the figure does not depend on what else the machine ran at the time, unlike the wall time (which the
report keeps beside it). A module- or session-scoped fixture counts for the test whose setup or teardown ran it.
Under pytest-xdist each worker measures its own tests and hands the figures to the controller with the test's
report (``user_properties``), which writes the file at the end of the session. Not counted: daemons a test starts
and leaves running (the SLURM test's ``slurmctld``/``slurmd`` and their job steps), and the controller's own work.

``benchmarks/suite_cpu.py`` runs the suite with this option and prints the per-file and per-test tables.
"""

from __future__ import annotations

import csv
import os
import resource
from pathlib import Path

import pytest

_PHASES = ("setup", "call", "teardown")
_ROWS: dict[str, dict] = {}  # nodeid -> row, on the process that writes the file


def pytest_addoption(parser) -> None:
    parser.addoption("--cpu-report", metavar="CSV", default=None,
                     help="write each test's CPU seconds (user + system, with its subprocesses) and wall seconds to "
                          "this CSV (benchmarks/suite_cpu.py reads it)")


def _cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _measure(item, phase: str):
    before = _cpu_seconds()
    yield
    item.user_properties.append((f"cpu_s_{phase}", round(_cpu_seconds() - before, 3)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    if item.config.getoption("cpu_report"):
        yield from _measure(item, "setup")
    else:
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if item.config.getoption("cpu_report"):
        yield from _measure(item, "call")
    else:
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    if item.config.getoption("cpu_report"):
        yield from _measure(item, "teardown")
    else:
        yield


def pytest_runtest_logreport(report) -> None:
    """Collect a phase's figures (on the controller under pytest-xdist, else in this process)."""
    worker = getattr(getattr(report, "node", None), "workerinput", {}).get("workerid", "")  # xdist's "gw0"
    row = _ROWS.setdefault(report.nodeid, {"nodeid": report.nodeid, "file": report.nodeid.split("::")[0],
                                           "worker": worker, "outcome": "passed", "wall_s": 0.0,
                                           **{f"cpu_s_{p}": 0.0 for p in _PHASES}})
    row["wall_s"] = round(row["wall_s"] + report.duration, 3)
    for key, value in report.user_properties:
        if key.startswith("cpu_s_"):
            row[key] = value
    if report.outcome != "passed" and (report.when == "call" or report.outcome == "failed"):
        row["outcome"] = report.outcome


def pytest_sessionfinish(session) -> None:
    """Write the CSV (not on a pytest-xdist worker: its controller has the rows)."""
    path = session.config.getoption("cpu_report")
    if not path or hasattr(session.config, "workerinput") or not _ROWS:
        return
    fields = ["nodeid", "file", "worker", "outcome", "cpu_s", *(f"cpu_s_{p}" for p in _PHASES), "wall_s"]
    rows = [{**r, "cpu_s": round(sum(r[f"cpu_s_{p}"] for p in _PHASES), 3)} for r in _ROWS.values()]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, target)


def pytest_terminal_summary(terminalreporter, config) -> None:
    """With ``--cpu-report``: the session's CPU seconds over its tests and the files that took the most."""
    if not config.getoption("cpu_report") or hasattr(config, "workerinput") or not _ROWS:
        return
    files: dict[str, float] = {}
    for row in _ROWS.values():
        files[row["file"]] = files.get(row["file"], 0.0) + sum(row[f"cpu_s_{p}"] for p in _PHASES)
    total = sum(files.values())
    terminalreporter.section("CPU seconds of the tests (user + system, with their subprocesses)")
    terminalreporter.write_line(f"{total:,.0f} CPU-s over {len(_ROWS)} tests in {len(files)} files; "
                                f"per test: {config.getoption('cpu_report')}")
    for name, cpu in sorted(files.items(), key=lambda kv: -kv[1])[:12]:
        terminalreporter.write_line(f"{cpu:9,.1f}  {name}")
