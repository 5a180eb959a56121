"""Run provenance: versions, git commit, device, and a stable fingerprint of a configuration."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import subprocess
import tempfile
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

__all__ = ["pick_device", "claim_gpu", "environment_info", "fingerprint", "git_commit"]

# Installed versions recorded in run.json besides torch and numpy (the direct requirements that compute).
RECORDED_PACKAGES = ("pandas", "cvxpy", "matplotlib", "snakemake", "snakemake-executor-plugin-slurm")


def pick_device(preference: str = "auto") -> torch.device:
    """Choose the run's device.

    Parameters
    ----------
    preference : {"auto", "cpu", "cuda"}
        "auto" takes a visible CUDA device (as restricted by ``CUDA_VISIBLE_DEVICES``, which SLURM
        or the user sets) when there is one, else the CPU; "cuda" insists on one.

    Returns
    -------
    torch.device
        ``cpu``, or ``cuda:<i>``: with one visible GPU (a SLURM job's ``--gpus=1``) that one; with
        several (a local run with ``--resources gpu=N``: Snakemake assigns no device), the first
        that no other fedshift process on this machine holds (see :func:`claim_gpu`).

    Raises
    ------
    RuntimeError
        If "cuda" is asked for and no CUDA device is visible.
    ValueError
        For another preference.
    """
    if preference not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {preference!r}")
    if preference == "cpu" or (preference == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but no CUDA device is visible")
    return torch.device("cuda", claim_gpu(torch.cuda.device_count()))


_CLAIMED: dict[str, Any] = {}  # key of the claimed GPU -> open lock file, held until the process ends


def claim_gpu(count: int, lock_dir: str | Path | None = None) -> int:
    """Claim one of ``count`` visible GPUs for this process through a lock file per device.

    Local Snakemake runs limit GPU jobs with ``--resources gpu=N`` but set no
    ``CUDA_VISIBLE_DEVICES``, so every job sees every GPU. Each job takes the first device whose
    lock (``fcntl.flock`` on ``<lock_dir>/gpu-<CUDA_VISIBLE_DEVICES entry or index>.lock``) is free
    and holds it until the process exits, so N jobs use N different GPUs. One visible device
    needs no lock.

    Parameters
    ----------
    count : int
        Number of visible CUDA devices (>= 1).
    lock_dir : path, optional
        Folder of the lock files (default: ``$TMPDIR/fedshift-gpu-locks``; one per machine).

    Returns
    -------
    int
        Index of the device among the visible ones. When every device is held (more GPU jobs
        than GPUs: ``--resources gpu=N`` missing), device ``pid % count``, with a warning.
    """
    if count <= 1:
        return 0
    folder = Path(lock_dir) if lock_dir is not None else Path(tempfile.gettempdir()) / "fedshift-gpu-locks"
    folder.mkdir(parents=True, exist_ok=True)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    names = visible if len(visible) == count else [str(i) for i in range(count)]
    for i, name in enumerate(names):
        key = str(folder / f"gpu-{name}.lock")
        if key in _CLAIMED:
            return i
        fh = open(key, "a")  # noqa: SIM115 (held open on purpose)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            continue
        _CLAIMED[key] = fh
        return i
    i = os.getpid() % count
    warnings.warn(f"all {count} GPUs are held by other jobs; sharing GPU {i} (run Snakemake with "
                  f"--resources gpu={count} to run at most {count} GPU jobs at once)", stacklevel=2)
    return i


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
    """Versions and hardware actually used by a run (for ``run.json``).

    Parameters
    ----------
    device : torch.device
        The run's device (from :func:`pick_device`).

    Returns
    -------
    dict
        Python and platform, fedshift, torch and numpy versions, ``packages`` (installed versions of
        :data:`RECORDED_PACKAGES`, None when absent), device, torch threads, ``CUDA_VISIBLE_DEVICES`` (as
        SLURM set it), host name; on CUDA also the GPU model and CUDA version.
    """
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
        "packages": {name: _installed(name) for name in RECORDED_PACKAGES},
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def fingerprint(*objs: Any) -> str:
    """sha256 of the canonical JSON of ``objs`` (sorted keys): identifies a configuration."""
    blob = json.dumps(objs, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()
