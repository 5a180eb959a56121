"""Run provenance: versions, git commit, device, CPU, the reproducibility switch, and a configuration's fingerprint.

The portable-CPU switch (config ``portable_cpu``; README "Reproducibility") pins the instruction set every
numerical library of a job dispatches on to the lowest x86-64 level they share, so that a job gives the same bytes
on any x86-64-v2 CPU (SSE4.2, 2009 on: numpy's own minimum), not only on the machine it ran on. The workflow puts
:data:`PORTABLE_CPU_ENV` into the environment of every job (it must be there before ``torch`` is imported: the
libraries read it once, at load time); :func:`pick_device`, the first call of every training and evaluation
job, then turns on deterministic algorithms and checks that the pinning took effect.
"""

from __future__ import annotations

import contextlib
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

__all__ = ["pick_device", "claim_gpu", "environment_info", "fingerprint", "git_commit", "PORTABLE_CPU_ENV",
           "PORTABLE_CPU_FLAG", "portable_cpu_environment", "apply_reproducibility", "cpu_info",
           "library_versions"]

#: Set (to "1") in a job's environment when the portable-CPU switch is on.
PORTABLE_CPU_FLAG = "FEDSHIFT_PORTABLE_CPU"
#: What the switch sets. ATen's own kernels without AVX (its "default" build: x86-64 SSE2), oneDNN
#: (convolutions, some matmuls) capped at SSE4.1 (its lowest level), MKL (BLAS) in its conditional numerical
#: reproducibility mode COMPATIBLE (the same results on every Intel-compatible CPU), numpy's OpenBLAS on its
#: SSE3 kernels, numpy's own loops on its baseline (x86-64-v2: its dispatch targets, as numpy 2.4 names them,
#: disabled), glibc's libm (exp, log, ... in ATen's scalar kernels) without its FMA/AVX2 variants, and the cuBLAS
#: workspace that deterministic algorithms need on CUDA (run-to-run determinism there, not portability).
PORTABLE_CPU_ENV = {
    PORTABLE_CPU_FLAG: "1",
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "MKL_CBWR": "COMPATIBLE",
    "OPENBLAS_CORETYPE": "Prescott",
    "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
    "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX2,-FMA,-FMA4,-AVX",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}
# Environment variables recorded in run.json (what decides the kernels a job ran).
_RECORDED_ENV = (*PORTABLE_CPU_ENV, "MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# CPU flags recorded in run.json: the instruction-set extensions the libraries dispatch on.
_ISA_FLAGS = ("sse4_1", "sse4_2", "avx", "fma", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
              "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def portable_cpu_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables the portable-CPU switch sets, merged with ``base``.

    Parameters
    ----------
    base : dict, optional
        The current environment (default ``os.environ``): an existing ``GLIBC_TUNABLES`` is kept, the
        switch's tunable appended to it.

    Returns
    -------
    dict
        :data:`PORTABLE_CPU_ENV`, with ``GLIBC_TUNABLES`` merged.
    """
    base = dict(os.environ if base is None else base)
    env = dict(PORTABLE_CPU_ENV)
    old = base.get("GLIBC_TUNABLES", "")
    if old and not _masked_hwcaps(env["GLIBC_TUNABLES"]) <= _masked_hwcaps(old):
        env["GLIBC_TUNABLES"] = f"{old}:{env['GLIBC_TUNABLES']}"
    elif old:
        env["GLIBC_TUNABLES"] = old
    return env


def _masked_hwcaps(tunables: str) -> set[str]:
    """The CPU features a ``GLIBC_TUNABLES`` value hides from glibc (``glibc.cpu.hwcaps=-AVX2,-FMA:...``)."""
    out: set[str] = set()
    for item in tunables.split(":"):
        key, _, value = item.partition("=")
        if key == "glibc.cpu.hwcaps":
            out |= {f[1:] for f in value.split(",") if f.startswith("-")}
    return out


def apply_reproducibility() -> bool:
    """Apply the portable-CPU switch to this process when its environment says so.

    With ``FEDSHIFT_PORTABLE_CPU=1`` (set by the workflow, with the rest of :data:`PORTABLE_CPU_ENV`), turns on
    ``torch.use_deterministic_algorithms`` (``warn_only``: an operation without a deterministic kernel warns) and
    checks that torch runs its kernels at the pinned level.

    Returns
    -------
    bool
        Whether the switch is on.

    Raises
    ------
    RuntimeError
        The switch is on but a variable of :data:`PORTABLE_CPU_ENV` is missing or differs, or torch chose
        other kernels than ATen's default ones (the variables were set after torch was imported).
    """
    if os.environ.get(PORTABLE_CPU_FLAG, "") != "1":
        return False
    wrong = [k for k, v in PORTABLE_CPU_ENV.items()
             if k != "GLIBC_TUNABLES" and os.environ.get(k) != v]
    if not _masked_hwcaps(PORTABLE_CPU_ENV["GLIBC_TUNABLES"]) <= _masked_hwcaps(os.environ.get("GLIBC_TUNABLES", "")):
        wrong.append("GLIBC_TUNABLES")
    capability = torch.backends.cpu.get_cpu_capability()
    if wrong or capability != "DEFAULT":
        raise RuntimeError(
            f"{PORTABLE_CPU_FLAG}=1 (config portable_cpu) but {', '.join(wrong) or 'nothing'} differ(s) from "
            f"{PORTABLE_CPU_ENV} and torch runs its {capability} kernels: these variables must be in the "
            "environment before torch is imported (the workflow sets them for every job)")
    # warn_only: an operation torch has no deterministic kernel for (e.g. max_unpool2d, in the gradient-reversal
    # CNNs of FedMM) warns in the job's log instead of failing it; torch flags such operations for their CUDA
    # kernels (atomic adds), their CPU kernels are deterministic at a fixed thread count
    torch.use_deterministic_algorithms(True, warn_only=True)
    return True


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
        If "cuda" is asked for and no CUDA device is visible; or from :func:`apply_reproducibility`, which
        runs first (the first call of every job).
    ValueError
        For another preference.
    """
    if preference not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {preference!r}")
    apply_reproducibility()
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
        SLURM set it), host name, ``cpu`` (:func:`cpu_info`), ``libraries`` (:func:`library_versions`),
        ``reproducibility`` (the portable-CPU switch, whether deterministic algorithms were on, and the
        environment variables that choose kernels); on CUDA also the GPU model and CUDA version.
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
        "cpu": cpu_info(),
        "libraries": library_versions(),
        "reproducibility": {
            "portable_cpu": os.environ.get(PORTABLE_CPU_FLAG, "") == "1",
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "environment": {k: os.environ.get(k) for k in _RECORDED_ENV},
        },
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def cpu_info() -> dict[str, Any]:
    """The CPU a job ran on, as far as it decides the kernels.

    Returns
    -------
    dict
        ``model`` (``/proc/cpuinfo``'s model name, else :func:`platform.processor`), ``machine``
        (e.g. ``x86_64``), ``isa_flags`` (those of the instruction-set extensions the libraries dispatch on that
        the CPU has: SSE4.1 … AVX-512, AMX), ``torch_capability`` (the level of ATen's kernels in use:
        ``DEFAULT``, ``AVX2``, ``AVX512``, …) and ``numpy_simd`` (numpy's dispatch targets in use above its
        baseline; None where numpy does not say).
    """
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    model = model or platform.processor() or None
    numpy_simd = None
    with contextlib.suppress(Exception):  # numpy's dispatch record: a private module
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

        numpy_simd = [t for t in __cpu_dispatch__ if __cpu_features__.get(t)]
    return {"model": model, "machine": platform.machine(), "isa_flags": [f for f in _ISA_FLAGS if f in flags],
            "torch_capability": torch.backends.cpu.get_cpu_capability(), "numpy_simd": numpy_simd}


def library_versions() -> dict[str, Any]:
    """Versions of the numerical libraries inside torch and numpy (MKL, oneDNN, OpenBLAS, cuDNN).

    Returns
    -------
    dict
        ``mkl`` and ``onednn`` (from ``torch.__config__.show()``), ``cudnn`` (None without CUDA), ``numpy_blas``
        (name and version of numpy's BLAS); None where a library is absent or not named.
    """
    import re

    import numpy

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", shown)
    onednn = re.search(r"MKL-DNN v([^\s]+)", shown)
    blas = None
    with contextlib.suppress(Exception):  # numpy's build record: a private layout across versions
        info = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{info.get('name')} {info.get('version')}"
    return {"mkl": mkl.group(1) if mkl else None, "onednn": onednn.group(1) if onednn else None,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "numpy_blas": blas}


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def fingerprint(*objs: Any) -> str:
    """sha256 of the canonical JSON of ``objs`` (sorted keys): identifies a configuration."""
    blob = json.dumps(objs, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()
