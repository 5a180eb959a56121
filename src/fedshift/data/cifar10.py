"""CIFAR-10 (Krizhevsky 2009) from the canonical ``cifar-10-python.tar.gz``.

The archive holds ``cifar-10-batches-py/data_batch_1`` … ``data_batch_5``, ``test_batch`` and
``batches.meta``: Python pickles of dicts with ``b"data"`` (uint8, (n, 3072), each row the 1024 red, then
green, then blue values of a 32 x 32 image, row-major), ``b"labels"`` (list of int) and, in the meta file,
``b"label_names"``. Pickles are unpickled with a restricted unpickler that only builds the built-in
containers and numpy arrays.
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ARCHIVE", "CLASS_NAMES", "load_cifar10"]

ARCHIVE = "cifar-10-python.tar.gz"
#: The official class names (batches.meta), index = label.
CLASS_NAMES: list[str] = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that builds only numpy arrays and built-in containers.

    Allowed: numpy's array reconstruction helpers, and ``_codecs.encode``, which protocol-2 pickles written by
    Python 3 use for raw bytes.
    """

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a CIFAR-10 batch")


def _unpickle(data: bytes) -> dict:
    return _SafeUnpickler(io.BytesIO(data), encoding="bytes").load()


def _batch(d: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(d[b"data"], dtype=np.uint8)
    y = np.asarray(d[b"labels"], dtype=np.int64)
    if x.ndim != 2 or x.shape[1] != 3072 or len(y) != len(x):
        raise ValueError(f"{name}: data of shape {x.shape} with {len(y)} labels, expected (n, 3072) and n labels")
    if y.min() < 0 or y.max() > 9:
        raise ValueError(f"{name}: labels outside 0-9")
    return x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy(), y


def load_cifar10(raw_dir: str | os.PathLike) -> dict[str, Any]:
    """Load CIFAR-10's train and test splits from ``cifar-10-python.tar.gz``.

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder holding ``cifar-10-python.tar.gz``.

    Returns
    -------
    dict
        ``x_train`` uint8 (50000, 32, 32, 3) (N, H, W, C, RGB), ``y_train`` int64 (50000,), ``x_test`` uint8
        (10000, 32, 32, 3), ``y_test`` int64 (10000,), ``class_names`` (from ``batches.meta``).

    Raises
    ------
    FileNotFoundError
        The archive is missing.
    ValueError
        A batch is missing or malformed, or the archive's class names differ from the official ones.
    """
    path = Path(raw_dir) / ARCHIVE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    found: dict[str, bytes] = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            base = Path(member.name).name
            if member.isfile() and base in {*_TRAIN, "test_batch", "batches.meta"}:
                found[base] = tar.extractfile(member).read()
    missing = [n for n in [*_TRAIN, "test_batch", "batches.meta"] if n not in found]
    if missing:
        raise ValueError(f"{ARCHIVE}: missing {missing}")
    xs, ys = zip(*(_batch(_unpickle(found[n]), n) for n in _TRAIN), strict=True)
    x_test, y_test = _batch(_unpickle(found["test_batch"]), "test_batch")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in _unpickle(found["batches.meta"])[b"label_names"]]
    if names != CLASS_NAMES:
        raise ValueError(f"batches.meta: class names {names} differ from {CLASS_NAMES}")
    return {"x_train": np.concatenate(xs), "y_train": np.concatenate(ys), "x_test": x_test, "y_test": y_test,
            "class_names": names}
