"""Shared pytest fixtures.

The real datasets come from the mirror named by ``FEDSHIFT_DATA_MIRROR`` (default: the folder
``../shared/data`` beside the repository). Tests that need it skip when it is absent, except under
``CI=true``, where a missing mirror is a failure.
"""

from __future__ import annotations

import os
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
