"""Make the bundle that ``benchmarks/device_check`` carries to the GPU machine: wheels and a small real data set.

The GPU machine (issue 38) has Python 3.12 and torch 2.11 with numpy, pandas, scipy, matplotlib, PyYAML, tqdm,
pytest, ... but not cvxpy, POT or jsonschema, and it cannot download: what fedshift needs beyond its image travels
in the working tree (64 MiB per command in all). This script writes, under ``--out`` (default ``.devbundle/``,
ignored by git, named in the ``run`` call's ``carry``):

``wheels/``
    cp312 manylinux x86-64 wheels of fedshift's runtime requirements (``pyproject.toml``) that the image lacks, and
    of their requirements, recursively, minus what the image has (:data:`IMAGE_PACKAGES`) and what the check never
    imports (:data:`NOT_CARRIED`: POT, and cvxpy's solvers other than CLARABEL); the versions installed
    here where this environment has the package (the versions the project is tested with), else pip's choice. At
    most ``--max-wheel-mib`` (40) MiB, else it fails. ``wheels/MANIFEST.json`` lists them with their sizes.
``data/``
    Real MNIST and Fashion-MNIST subsets in the mirror's own layout (gzip IDX files, readable by
    :func:`fedshift.data.fashion_mnist.read_idx`): the first ``--train`` training and ``--test`` test rows of each
    (both splits come shuffled), from the data mirror, with ``data/MANIFEST.json`` (rows, source files'
    checksums, the subsets' sha256).

Usage (needs PyPI for the wheels and the mirror for the data; ``--skip-wheels`` or ``--skip-data`` for one half)::

    python benchmarks/device_bundle.py [--mirror ../shared/data] [--out .devbundle]
"""

from __future__ import annotations

import argparse
import email.parser
import gzip
import hashlib
import importlib.metadata as im
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64")
#: The target interpreter, for evaluating the requirements' environment markers.
TARGET_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
              "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
              "platform_machine": "x86_64", "os_name": "posix", "extra": ""}
#: Python packages of the GPU machine's image ('cuda', read on such a machine on 2026-11-17; the device tool's
#: KINDS.md), normalised names. torch 2.11.0, numpy 2.5.2, torchvision 0.26.0 among them.
IMAGE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp
""".split())
#: Requirements the device check never imports, left out of the wheel set (they would make it ~97 MiB): fedshift
#: solves its QPs with cvxpy's CLARABEL only (``fedshift.algorithms.fedpals``), and POT serves only WAFL's report.
NOT_CARRIED = {
    "pot": "only fedshift.papers.wafl.wasserstein (eq. 9, an output); the check trains, it makes no report",
    "scs": "a cvxpy solver (43 MiB); fedshift calls cvxpy with solver=CLARABEL only",
    "highspy": "a cvxpy LP/MILP solver; unused by fedshift",
    "sparsediffpy": "cvxpy's optional differentiation back end; cvxpy imports and solves with CLARABEL without it",
}
DATASETS = {"mnist": "mnist", "fashion-mnist": "fashion-mnist"}  # bundle folder -> mirror folder
IDX_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
             "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def normalise(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """Fedshift's runtime requirements (``[project] dependencies``)."""
    return [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]


def requirements_of(metadata: str, env: dict[str, str] = TARGET_ENV) -> list[Requirement]:
    """The ``Requires-Dist`` of a wheel's METADATA that apply on the target (markers evaluated, extras dropped)."""
    msg = email.parser.Parser().parsestr(metadata)
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(dict(env)):
            out.append(req)
    return out


def wheel_metadata(wheel: Path) -> str:
    """The METADATA file of a wheel."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return z.read(name).decode()


def select_wheels(roots: list[Requirement], present: frozenset[str],
                  fetch: Callable[[Requirement], Path]) -> dict[str, Path]:
    """The wheels the target lacks: ``roots`` and their requirements, recursively, minus ``present``.

    Parameters
    ----------
    roots : list of Requirement
        What must be importable on the target.
    present : frozenset of str
        Normalised names already installed there (never fetched, their requirements not followed).
    fetch : callable
        ``fetch(requirement) -> wheel path`` (one wheel, no dependencies).

    Returns
    -------
    dict
        Normalised name → wheel, one per project (the first requirement of a name decides its version).
    """
    chosen: dict[str, Path] = {}
    queue = [r for r in roots if r.marker is None or r.marker.evaluate(dict(TARGET_ENV))]
    while queue:
        req = queue.pop(0)
        name = normalise(req.name)
        if name in present or name in chosen:
            continue
        wheel = fetch(req)
        chosen[name] = wheel
        queue += requirements_of(wheel_metadata(wheel))
    return chosen


def pinned(req: Requirement) -> str:
    """``name==version`` of this environment's install when it satisfies ``req`` (the tested version), else ``req``."""
    try:
        version = im.version(req.name)
    except im.PackageNotFoundError:
        return str(Requirement(f"{req.name}{req.specifier}"))
    return f"{req.name}=={version}" if req.specifier.contains(version, prereleases=True) else str(req)


def pip_fetch(dest: Path) -> Callable[[Requirement], Path]:
    """A ``fetch`` for :func:`select_wheels` that runs ``pip download`` for cp312 manylinux x86-64 into ``dest``."""

    def fetch(req: Requirement) -> Path:
        before = set(dest.glob("*.whl"))
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none", "-d", str(dest)]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        subprocess.run([*cmd, pinned(req)], check=True)
        new = set(dest.glob("*.whl")) - before
        if not new:  # already there from an earlier run
            name = normalise(req.name).replace("-", "_")
            new = {w for w in dest.glob("*.whl") if normalise(w.name.split("-")[0]).replace("-", "_") == name}
        (wheel,) = new
        return wheel

    return fetch


def make_wheels(out: Path, max_mib: float) -> dict:
    """Download the wheel set into ``out`` (emptied first); fail above ``max_mib``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    skip = IMAGE_PACKAGES | frozenset(NOT_CARRIED)
    roots = [r for r in project_requirements() if normalise(r.name) not in IMAGE_PACKAGES]
    chosen = select_wheels(roots, skip, pip_fetch(out))
    for w in set(out.glob("*.whl")) - set(chosen.values()):
        w.unlink()
    wheels = {n: {"file": w.name, "bytes": w.stat().st_size} for n, w in sorted(chosen.items())}
    total = sum(v["bytes"] for v in wheels.values())
    manifest = {"roots": [str(r) for r in roots], "wheels": wheels, "total_mib": round(total / 2**20, 2),
                "not_carried": NOT_CARRIED,
                "target": "cp312 manylinux x86-64", "image_packages": "IMAGE_PACKAGES of benchmarks/device_bundle.py"}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    if total > max_mib * 2**20:
        raise SystemExit(f"wheel set is {total / 2**20:.1f} MiB > {max_mib} MiB: {wheels}")
    return manifest


def write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as a gzip IDX file (magic 0x00000800 + ndim, big-endian dimensions, payload)."""
    a = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, a.ndim]) + np.asarray(a.shape, dtype=">u4").tobytes()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as fh:
        fh.write(header + a.tobytes())  # mtime 0: the same rows give the same bytes


def make_data(mirror: Path, out: Path, train: int, test: int) -> dict:
    """Write the first ``train`` / ``test`` rows of MNIST and Fashion-MNIST from ``mirror`` under ``out``."""
    sys.path.insert(0, str(ROOT / "src"))
    from fedshift.data.fashion_mnist import read_idx

    if out.exists():
        shutil.rmtree(out)
    manifest = {}
    for name, src in DATASETS.items():
        (out / name).mkdir(parents=True)
        entry = {}
        for split, rows in (("train", train), ("test", test)):
            for fname in IDX_FILES[split]:
                full = read_idx(mirror / src / fname)
                if len(full) < rows:
                    raise SystemExit(f"{mirror / src / fname} has {len(full)} rows, fewer than {rows}")
                write_idx(out / name / fname, full[:rows])
                entry[fname] = {"rows": rows, "of": len(full),
                                "source_sha256": hashlib.sha256(full.tobytes()).hexdigest(),
                                "subset_sha256": hashlib.sha256(full[:rows].tobytes()).hexdigest()}
        manifest[name] = entry
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def folder_mib(path: Path) -> float:
    """Size of the files under ``path`` in MiB."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main(argv: list[str] | None = None) -> None:
    """Make the bundle; print its sizes."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".devbundle")
    ap.add_argument("--mirror", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--train", type=int, default=30000, help="training rows of each data set")
    ap.add_argument("--test", type=int, default=5000, help="test rows of each data set")
    ap.add_argument("--max-wheel-mib", type=float, default=40.0)
    ap.add_argument("--max-total-mib", type=float, default=60.0, help="bundle limit (the tree adds ~2 MiB to 64)")
    ap.add_argument("--skip-wheels", action="store_true")
    ap.add_argument("--skip-data", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_wheels:
        m = make_wheels(args.out / "wheels", args.max_wheel_mib)
        print(f"wheels: {len(m['wheels'])} ({', '.join(m['wheels'])}), {m['total_mib']} MiB")
    if not args.skip_data:
        make_data(args.mirror, args.out / "data", args.train, args.test)
        print(f"data: {folder_mib(args.out / 'data'):.1f} MiB")
    total = folder_mib(args.out)
    print(f"bundle {args.out}: {total:.1f} MiB")
    if total > args.max_total_mib:
        raise SystemExit(f"bundle is {total:.1f} MiB > {args.max_total_mib} MiB")


if __name__ == "__main__":
    main()
