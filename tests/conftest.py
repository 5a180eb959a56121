"""Shared pytest fixtures.

The real datasets come from the mirror named by ``FEDSHIFT_DATA_MIRROR`` (default: the folder
``../shared/data`` beside the repository). Tests that need it skip when it is absent, except under
``CI=true``, where a missing mirror is a failure.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fedshift.jobs import allocator_environment

REPO_ROOT = Path(__file__).resolve().parents[1]

# The workflow's memory allocator settings (fedshift.jobs.ALLOCATOR_ENV, which the workflow gives every job) for
# the tests' own processes too: xdist's workers and every subprocess start with them (glibc reads them at start).
os.environ.update(allocator_environment())

pytest_plugins = ("cpu_report",)  # --cpu-report FILE: each test's CPU seconds (tests/cpu_report.py)


def _mirror_path() -> Path:
    env = os.environ.get("FEDSHIFT_DATA_MIRROR")
    return Path(env).resolve() if env else (REPO_ROOT.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root folder."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    """The data mirror; skips (or fails under CI=true) when it is missing."""
    path = _mirror_path()
    if not path.is_dir():
        msg = f"data mirror {path} not found (set FEDSHIFT_DATA_MIRROR)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def copy_repo(repo_root) -> Callable[[Path], Path]:
    """A function that copies the repository's tracked and untracked-but-not-ignored files to a folder.

    The copy holds no outputs, caches or virtual environment: a fresh checkout to run the
    workflow in. The function returns the destination folder.
    """

    def copy(dest: Path) -> Path:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo_root,
                               capture_output=True, text=True, check=True).stdout.split("\0")
        for f in filter(None, files):
            src = repo_root / f
            if src.is_file():
                (dest / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / f)
        return dest

    return copy


# ---- WILDS-layout archives (PACS, iWildCam): the real on-disk format, tiny -------------------------

PACS_DOMAINS = ("art_painting", "cartoon", "photo", "sketch")


def _png(rng: np.random.Generator, side: int = 40) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (side, side + 4, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def archive(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def write_pacs(raw: Path, per: int = 6, seed: int = 0) -> pd.DataFrame:
    """A PACS v1.0 archive: official split (train = cartoon + sketch, id_val from them, test = photo)."""
    rng = np.random.default_rng(seed)
    rows, files = [], {}
    for domain in PACS_DOMAINS:
        for y in range(7):
            for j in range(per):
                path = f"kfold/{domain}/{y}/{j}.png"
                split = {"photo": "test", "art_painting": "val"}.get(domain, "id_val" if j == 0 else "train")
                rows.append({"path": path, "split": split, "y": y, "domain": domain})
                files[path] = _png(rng)
    df = pd.DataFrame(rows)
    files["metadata.csv"] = df.to_csv(index=False).encode()
    raw.mkdir(parents=True, exist_ok=True)
    archive(raw / "pacs_v1.0.tar.gz", files)
    return df


def write_iwildcam(raw: Path, locations: int = 9, seed: int = 0) -> pd.DataFrame:
    """An iWildCam v2.0 archive: images under train/, location_remapped domains, 182 classes (few used)."""
    rng = np.random.default_rng(seed)
    rows, files = [], {}
    for loc in range(locations):
        for j in range(3 + loc):
            name = f"{loc:03d}_{j}.png"
            split = "test" if loc == locations - 1 else ("val" if loc == locations - 2 else "train")
            rows.append({"filename": name, "split": split, "y": int(rng.choice([0, 3, 181])), "location_remapped": loc,
                         "sequence_remapped": 0, "datetime": "2013-06-01 10:00:00.000"})
            files[f"train/{name}"] = _png(rng)
    df = pd.DataFrame(rows)
    files["metadata.csv"] = df.to_csv(index=False).encode()
    files["categories.csv"] = pd.DataFrame({"y": [0, 3, 181], "name": ["empty", "deer", "zebra"]}).to_csv(
        index=False).encode()
    raw.mkdir(parents=True, exist_ok=True)
    archive(raw / "iwildcam_v2.0.tar.gz", files)
    return df


@pytest.fixture(scope="session")
def wilds_archives() -> SimpleNamespace:
    """Writers of tiny PACS v1.0 / iWildCam v2.0 archives in the WILDS layout (``write_pacs(raw_dir)``,
    ``write_iwildcam(raw_dir)``, ``archive(path, files)``, ``PACS_DOMAINS``)."""
    return SimpleNamespace(write_pacs=write_pacs, write_iwildcam=write_iwildcam, archive=archive,
                           PACS_DOMAINS=PACS_DOMAINS)


# ---------------------------------------------------------------------------------------------- kill -9 at a point

# Run in the killed child before the job's code: the N-th os.replace onto a file named NAME prints a line and
# waits to be killed, before the rename (the temporary file is complete, the destination untouched) or after it.
_KILL_PRELUDE = '''
import os, time
_when, _name, _nth = os.environ["FEDSHIFT_TEST_KILL_AT"].split(":")
_replace, _seen = os.replace, [0]
def _kill_point(src, dst, *args, **kwargs):
    if os.path.basename(os.fspath(dst)) == _name:
        _seen[0] += 1
        if _seen[0] == int(_nth):
            if _when == "after":
                _replace(src, dst, *args, **kwargs)
            print("KILL POINT", flush=True)
            time.sleep(600)
    return _replace(src, dst, *args, **kwargs)
os.replace = _kill_point
'''


def run_killed(code: str, at: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run ``code`` in a fresh Python process and SIGKILL it at the point ``at``.

    ``at`` is ``"before:<file name>:<n>"`` or ``"after:<file name>:<n>"``: the n-th atomic write of a file of
    that name (``os.replace`` of its finished temporary file), before or after the rename. Fails when the
    process ends without reaching the point.
    """
    env = {**os.environ, **(env or {}), "FEDSHIFT_TEST_KILL_AT": at, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", _KILL_PRELUDE + textwrap.dedent(code)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reached = False
    for line in proc.stdout:
        if line.strip() == "KILL POINT":
            reached = True
            break
    if reached:
        proc.kill()  # SIGKILL
    _, err = proc.communicate(timeout=600)
    if not reached:
        pytest.fail(f"the job never reached {at} (exit {proc.returncode}):\n{err[-3000:]}")
    assert proc.returncode == -signal.SIGKILL


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: relative path -> (content, permission bits); names in ``skip`` left out."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in skip}


@pytest.fixture(scope="session")
def kill_at() -> SimpleNamespace:
    """``run_killed(code, at, cwd)`` (SIGKILL a job at a chosen atomic write) and ``tree(root)`` (a snapshot)."""
    return SimpleNamespace(run_killed=run_killed, tree=tree)


# ------------------------------------------------------------------------------- rule coverage of the workflow tests


def _executed_here() -> dict[str, set[str]] | None:
    return getattr(sys.modules.get("test_workflow"), "EXECUTED_RULES", None)


_FROM_WORKERS: dict[str, set[str]] = {"rehearsal": set(), "other": set()}  # merged on the pytest-xdist controller


def pytest_sessionfinish(session) -> None:
    """On a pytest-xdist worker, hand the rules its workflow tests executed to the controller (``workeroutput``)."""
    out = getattr(session.config, "workeroutput", None)
    executed = _executed_here()
    if out is not None and executed:
        out["fedshift_executed_rules"] = {scale: sorted(rules) for scale, rules in executed.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """On the pytest-xdist controller, merge a finished worker's executed rules (``pytest_sessionfinish`` above)."""
    for scale, rules in getattr(node, "workeroutput", {}).get("fedshift_executed_rules", {}).items():
        _FROM_WORKERS[scale].update(rules)


def pytest_terminal_summary(terminalreporter) -> None:
    """Report which rules of the rehearsal workflow (``snakemake --list-rules`` under config/rehearsal.yaml) ran.

    The workflow tests record every rule whose job finished (``test_workflow.EXECUTED_RULES``, by scale; under
    pytest-xdist each worker's set reaches the controller through ``workeroutput``); this prints how many of the
    rehearsal's rules ran in this session, at rehearsal scale or at any scale, and names those that never did
    (issue 16, point 6: the CI rehearsal is meant to execute every rule). Nothing is printed when no workflow test
    ran.
    """
    here = _executed_here() or {}
    executed = {scale: rules | here.get(scale, set()) for scale, rules in _FROM_WORKERS.items()}
    if not any(executed.values()):
        return
    proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--list-rules", "--configfile",
                           "config/rehearsal.yaml", "--config", f"data_mirror={_mirror_path()}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    rules = {line.strip() for line in proc.stdout.splitlines() if line.strip().isidentifier()}
    write = terminalreporter.write_line
    terminalreporter.section("rules of the rehearsal workflow executed by these tests")
    if proc.returncode != 0 or not rules:
        write(f"snakemake --list-rules failed ({proc.returncode}): {proc.stderr[-500:]}")
        return
    anywhere = executed["rehearsal"] | executed["other"]
    write(f"{len(rules & anywhere)} of {len(rules)} rules executed, {len(rules & executed['rehearsal'])} of them "
          f"at rehearsal scale (config/rehearsal.yaml)")
    write("never executed: " + (" ".join(sorted(rules - anywhere)) or "none"))


# ------------------------------------------------------------------------------- CUDA tests (tests/cuda, issue 38)


def pytest_configure(config) -> None:
    """Register the ``cuda`` marker (tests that need a CUDA device); one intra-op thread for in-process torch.

    The tests run thousands of tiny tensor operations, for which torch's OpenMP pool of one thread per core costs
    far more than it gives: on the 2-core machine the unit tests spent ~10x the CPU time with it (the Stochastic-AFL
    tests: 169 s of CPU instead of 17 s) as soon as anything else ran beside them. Jobs set their own thread count
    (``fedshift.jobs``), and the subprocesses of the tests are not affected.
    """
    config.addinivalue_line("markers", "cuda: needs a CUDA device; always collected, skipped when none is visible "
                                       "(FEDSHIFT_REQUIRE_CUDA=1 turns the skip into a failure)")
    import torch

    torch.set_num_threads(1)


# Under pytest-xdist's ``--dist loadfile`` (pyproject.toml) the files are handed out in this order: the longest file
# (the CI rehearsal, Snakemake on both cores for most of CI) first, so that it does not end the session alone; the
# SLURM tests second: they mostly wait (for their package install, then for SLURM's polling), which costs little
# beside the rehearsal. Then the fast checks (the unit files, seconds each, where most breakage shows) so that a
# failure names itself within minutes (CI stops at the first failure, .ci/run), then the other workflow files
# (minutes each). Serially (-n 0) the unit files come first, then the workflow files, the SLURM tests last
# (tests/cluster/conftest.py).
FIRST_UNDER_XDIST = ("workflow/test_rehearsal_workflow.py", "cluster/test_slurm.py")
#: The other workflow files, longest first, so that the last file a worker takes is a short one (CPU-s per file from
#: a fresh-clone ``.ci/run``'s ``--cpu-report``, the table on docs/performance.md; in the collected order the longest
#: came last and ran alone for six minutes). Files not named here follow them.
WORKFLOW_LONGEST_FIRST = ("test_workflow.py", "test_fedpals_files_workflow.py", "test_contract_workflow.py",
                          "test_fedmm_workflow.py", "test_wafl_workflow.py", "test_shift_matrix_workflow.py",
                          "test_agnostic_fedavg_workflow.py", "test_matrix_join.py",
                          "test_reruns.py", "test_style.py")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Order the files (above) and skip the ``cuda``-marked tests when no CUDA device is visible (fail them under
    ``FEDSHIFT_REQUIRE_CUDA=1``)."""
    order = FIRST_UNDER_XDIST if hasattr(config, "workerinput") else ()

    def rank(item) -> tuple[int, int]:  # the named files, the fast files (seconds each), the other workflow files
        path = Path(str(item.path)).as_posix()
        named = next((k for k, f in enumerate(order) if path.endswith("tests/" + f)), None)
        if named is not None:
            return named, 0
        if "/tests/workflow/" in path:
            name = Path(path).name
            long = WORKFLOW_LONGEST_FIRST.index(name) if name in WORKFLOW_LONGEST_FIRST else len(WORKFLOW_LONGEST_FIRST)
            return len(order) + 1, long if order else 0
        return len(order) + (2 if "/tests/cluster/" in path else 0), 0

    items.sort(key=rank)  # stable: the files within a rank keep their order
    marked = [item for item in items if item.get_closest_marker("cuda")]
    if not marked:
        return
    import torch

    if torch.cuda.is_available():
        return
    if os.environ.get("FEDSHIFT_REQUIRE_CUDA") == "1":
        raise pytest.UsageError("FEDSHIFT_REQUIRE_CUDA=1 but torch sees no CUDA device "
                                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    skip = pytest.mark.skip(reason="no CUDA device visible")
    for item in marked:
        item.add_marker(skip)
