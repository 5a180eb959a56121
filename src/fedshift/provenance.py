"""Run provenance: versions, git commit, device, and a stable fingerprint of a configuration."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

__all__ = ["pick_device", "environment_info", "fingerprint", "git_commit"]


def pick_device(preference: str = "auto") -> torch.device:
    """Choose the run's device.

    Parameters
    ----------
    preference : {"auto", "cpu", "cuda"}
        "auto" takes the first visible CUDA device (as restricted by ``CUDA_VISIBLE_DEVICES``,
        which SLURM or the user sets) when there is one, else the CPU.

    Raises
    ------
    RuntimeError
        If "cuda" is asked for and no CUDA device is visible.
    ValueError
        For another preference.
    """
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if preference == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but no CUDA device is visible")
        return torch.device("cuda")
    if preference == "cpu":
        return torch.device("cpu")
    raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {preference!r}")


def git_commit(path: str | Path = ".") -> str | None:
    """The ``HEAD`` commit of the repository containing ``path`` (with ``+dirty``), or None."""
    try:
        sha = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment_info(device: torch.device) -> dict[str, Any]:
    """Versions and hardware actually used by a run (for ``run.json``)."""
    import numpy

    import fedshift

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "fedshift": fedshift.__version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "hostname": platform.node(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def fingerprint(*objs: Any) -> str:
    """sha256 of the canonical JSON of ``objs`` (sorted keys): identifies a configuration."""
    blob = json.dumps(objs, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()
