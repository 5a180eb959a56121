"""Shared pytest fixtures.

The real datasets come from the mirror named by ``FEDSHIFT_DATA_MIRROR`` (default: the folder
``../shared/data`` beside the repository). Tests that need it skip when it is absent, except under
``CI=true``, where a missing mirror is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


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
