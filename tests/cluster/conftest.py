"""The SLURM test's package install, started in the background when a session collects the test.

On a fresh CI machine ``apt-get install`` of munge, SLURM, slurmdbd and MariaDB takes minutes. When this session
will run ``test_slurm.py`` (it is collected and not deselected, e.g. by ``-m "not workflow"``), as root on
Debian/Ubuntu, with any of the packages missing, ``slurm_install.sh`` starts right after collection (once per run:
under pytest-xdist the first worker to claim it), and the ``cluster`` fixture waits for the install
(``slurm_packages``) before ``slurm_up.sh`` starts the daemons. Serially the SLURM tests are moved to the end of the
session; under pytest-xdist they are handed out second, beside the rehearsal (tests/conftest.py). Either way the
install overlaps other tests instead of adding to them.
``FEDSHIFT_SLURM_PREINSTALL=0`` turns this off (``slurm_up.sh`` then installs, as when run by hand).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_INSTALL: dict = {}  # "proc", "log", "t0" of the background install, when one was started


def why_not_here() -> str | None:
    """Why the loopback cluster cannot run on this machine, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (apt-get install, starting daemons)"
    if not (Path("/etc/debian_version").exists() and shutil.which("apt-get") and shutil.which("dpkg")):
        return "needs Debian or Ubuntu (apt-get, dpkg)"
    return None


def _is_slurm_test(item) -> bool:
    return Path(str(item.path)).resolve().parent == HERE


def pytest_collection_modifyitems(config, items) -> None:
    """Run the SLURM tests last, so that their package install overlaps everything before them (serially; under
    pytest-xdist tests/conftest.py hands them out second, beside the rehearsal)."""
    if hasattr(config, "workerinput"):
        return
    items[:] = [i for i in items if not _is_slurm_test(i)] + [i for i in items if _is_slurm_test(i)]


def _paths() -> tuple[Path, Path, Path]:
    """The install's claim, log and exit-status files, shared by every pytest-xdist worker of one run."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
    base = Path(tempfile.gettempdir()) / f"fedshift-slurm-install-{run}"
    return base.with_suffix(".claim"), base.with_suffix(".log"), base.with_suffix(".rc")


def pytest_collection_finish(session) -> None:
    """Start ``slurm_install.sh`` in the background when this session runs a SLURM test that will need it.

    Under pytest-xdist every worker collects the SLURM tests; the first to create the claim file starts the
    install, the others find its exit status in the ``.rc`` file (``slurm_packages``).
    """
    if session.config.option.collectonly or os.environ.get("FEDSHIFT_SLURM_PREINSTALL") == "0":
        return
    if not any(_is_slurm_test(i) for i in session.items) or why_not_here():
        return
    claim, log, rc = _paths()
    try:
        claim.open("x").close()
    except FileExistsError:
        _INSTALL.update(log=log, rc=rc, t0=time.monotonic())  # another worker of this run installs
        return
    with open(log, "w") as out:
        _INSTALL.update(proc=subprocess.Popen(["bash", "-c", 'bash "$1"; echo $? > "$2"', "install",
                                               str(HERE / "slurm_install.sh"), str(rc)], stdout=out,
                                              stderr=subprocess.STDOUT, start_new_session=True,
                                              env={**os.environ, "WITH_DBD": "1", "NOISE": str(log)}),
                        log=log, rc=rc, t0=time.monotonic())


def _wait(timeout: float) -> int | None:
    """The install's exit status once it has ended (None: none started, or still running after ``timeout`` s)."""
    if "rc" not in _INSTALL:
        return None
    proc = _INSTALL.get("proc")
    if proc is not None:
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if not _INSTALL["rc"].exists():  # the wrapper was killed before it wrote the status
            return code
    deadline = time.monotonic() + timeout
    while not _INSTALL["rc"].exists() and time.monotonic() < deadline:
        time.sleep(2)
    try:
        return int(_INSTALL["rc"].read_text())
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="session")
def slurm_packages() -> str:
    """Skips (fails under ``CI=true``) where the cluster cannot run; else waits for the background install, if one
    was started, and says how it went (``slurm_up.sh`` installs whatever is still missing, failing with apt-get's
    output if that fails too)."""
    why = why_not_here()
    if why:
        (pytest.fail if os.environ.get("CI", "").lower() == "true" else pytest.skip)(f"loopback SLURM cluster: {why}")
    if "rc" not in _INSTALL:
        return "no background install (packages present, or FEDSHIFT_SLURM_PREINSTALL=0)"
    t_wait = time.monotonic()
    code = _wait(timeout=900)
    now = time.monotonic()
    return (f"background slurm_install.sh: exit {code}, {now - _INSTALL['t0']:.0f} s since collection, "
            f"waited {now - t_wait:.0f} s (log {_INSTALL['log']})")


def pytest_sessionfinish(session) -> None:
    """Never leave dpkg half-way: an install still running when the session ends is waited for."""
    proc = _INSTALL.get("proc")
    if proc is not None and proc.poll() is None:
        print(f"\nwaiting for the background SLURM package install ({_INSTALL['log']}) ...", flush=True)
        _wait(timeout=900)
