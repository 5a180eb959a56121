"""Decode a raw dataset once and store it as a ``torch.save`` dict that loads with weights_only.

Registry datasets (``config/datasets.yaml``) are decoded by :func:`prepare_dataset`; datasets generated from
several registry datasets (:data:`GENERATED`, e.g. MNIST-M blended from MNIST and BSDS500) by
:func:`prepare_generated`. Both write ``data/prepared/<name>.pt`` in the workflow, for every paper.

The stored dict holds ``x_*``, ``y_*`` and ``domain_*`` (where the dataset has domains) as CPU
tensors, and the name lists (``feature_names``, ``domain_names``, ``class_names``) as lists of
str: only types that ``torch.load(..., weights_only=True)`` accepts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fedshift.data.adult import load_adult
from fedshift.data.cifar10 import load_cifar10
from fedshift.data.fashion_mnist import load_fashion_mnist
from fedshift.data.mnist import load_mnist
from fedshift.data.mnist_m import generate_mnist_m, load_mnist_m, load_mnist_m_full
from fedshift.data.office31 import load_office31
from fedshift.data.registry import FACTS, GENERATED, raw_datasets_of  # noqa: F401 (part of this module's API)
from fedshift.data.usps import load_usps
from fedshift.data.wilds import images_dir_of, load_iwildcam, load_pacs
from fedshift.io import torch_save_atomic

__all__ = ["PREPARERS", "IMAGE_FILE_PREPARERS", "GENERATED", "raw_datasets_of", "prepare_dataset", "prepare_generated",
           "load_prepared", "check_prepared", "PreparedDataError"]

log = logging.getLogger(__name__)

#: Registry name -> loader ``f(raw_dir) -> dict`` of numpy arrays and name lists.
PREPARERS: dict[str, Callable[[str | os.PathLike], dict[str, Any]]] = {
    "adult": load_adult,
    "fashion_mnist": load_fashion_mnist,
    "mnist": load_mnist,
    "usps": load_usps,
    "mnist_m": load_mnist_m,
    "mnist_m_full": load_mnist_m_full,
    "cifar10": load_cifar10,
    "office31": load_office31,
}
#: Datasets whose images stay files: loader ``f(raw_dir, image_dir) -> dict`` unpacks them into
#: :func:`fedshift.data.wilds.images_dir_of` of the prepared file and returns labels and relative paths.
IMAGE_FILE_PREPARERS: dict[str, Callable[[str | os.PathLike, str | os.PathLike], dict[str, Any]]] = {
    "pacs": load_pacs,
    "iwildcam": load_iwildcam,
}


def _to_storable(key: str, value: Any) -> torch.Tensor | list[str] | int:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"{key}: cannot store a {type(value).__name__} with weights_only loading")


def prepare_dataset(name: str, raw_dir: str | os.PathLike, out_path: str | os.PathLike) -> None:
    """Decode dataset ``name`` from ``raw_dir`` and write it to ``out_path`` atomically.

    Parameters
    ----------
    name : str
        A key of :data:`PREPARERS` (``"adult"``, ``"fashion_mnist"``), a registered dataset with a ``loader``
        (:class:`fedshift.data.registry.DatasetFacts`: a dataset plug-in) or a key of
        :data:`IMAGE_FILE_PREPARERS` (``"pacs"``, ``"iwildcam"``: the images are unpacked into
        ``images_dir_of(out_path)`` and the ``.pt`` holds labels, domains and relative paths).
    raw_dir : str or os.PathLike
        Folder with the verified raw files (as written by
        :func:`fedshift.data.download.fetch_dataset`).
    out_path : str or os.PathLike
        Output ``.pt`` file: a dict of CPU tensors (same dtypes and shapes as the loader's numpy
        arrays, e.g. Adult ``x_train`` float32 (32561, 99), Fashion-MNIST ``x_train`` uint8
        (60000, 28, 28)) and lists of str, written via :func:`fedshift.io.torch_save_atomic`.

    Raises
    ------
    ValueError
        ``name`` is unknown; the message lists the known names.
    FileNotFoundError, ValueError
        From the loader, for missing or malformed raw files.
    """
    if name in IMAGE_FILE_PREPARERS:
        data = IMAGE_FILE_PREPARERS[name](raw_dir, images_dir_of(out_path))
    elif name in PREPARERS:
        data = PREPARERS[name](raw_dir)
    elif name in FACTS and FACTS[name].loader is not None:  # a dataset plug-in's own decoder
        data = FACTS[name].loader(raw_dir)
    else:
        known = sorted([*PREPARERS, *IMAGE_FILE_PREPARERS, *(n for n, f in FACTS.items() if f.loader is not None)])
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(known)}")
    _store(name, data, out_path)


class PreparedDataError(ValueError):
    """A prepared dataset holds values no training may see.

    Non-finite features, labels out of range, or splits whose arrays disagree in length; the message names the
    file and the array.
    """


def _length(value: Any) -> int | None:
    if isinstance(value, torch.Tensor):
        return int(value.shape[0]) if value.ndim else None
    return len(value) if isinstance(value, list) else None


def check_prepared(data: dict[str, Any], where: str | os.PathLike, num_classes: int | None = None) -> None:
    """Refuse a prepared dataset with non-finite features, labels out of range or mismatched splits.

    Checks, per split ``s`` (the ``x_s`` / ``y_s`` / ``domain_s`` arrays):

    * every floating-point ``x_s`` holds only finite values (a NaN or inf in the data would surface later as a
      "diverged" run, blamed on the optimisation);
    * every ``y_s`` is an integer array with labels in [0, C), C = ``num_classes``, else the length of
      ``class_names`` when the file has one, else ``num_classes`` stored in the file (lower bound 0 regardless);
    * ``x_s``, ``y_s``, ``domain_s`` and ``path_s`` (image files) have one entry per example.

    Parameters
    ----------
    data : dict
        The stored dict (:func:`load_prepared`) or a loader's dict of tensors.
    where : path
        Named in the error (the prepared file).
    num_classes : int, optional
        The registry's class count of the dataset, when the caller knows it.

    Raises
    ------
    PreparedDataError
        ``<where>: x_train holds 3 non-finite values (first at example 17)``, ``<where>: y_test has label 10
        outside [0, 10)``, ``<where>: y_train has 99 entries but x_train 100``.
    """
    n = num_classes
    if n is None and isinstance(data.get("class_names"), list) and data["class_names"]:
        n = len(data["class_names"])
    if n is None and isinstance(data.get("num_classes"), int):
        n = data["num_classes"]
    splits = sorted({k.split("_", 1)[1] for k in data if k.startswith(("x_", "y_")) and "_" in k})
    for split in splits:
        x, y, dom = data.get(f"x_{split}"), data.get(f"y_{split}"), data.get(f"domain_{split}")
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
            bad = ~torch.isfinite(x)
            if bool(bad.any()):
                first = int(bad.reshape(x.shape[0], -1).any(1).nonzero()[0, 0]) if x.ndim else 0
                raise PreparedDataError(f"{where}: x_{split} holds {int(bad.sum())} non-finite values (first at "
                                        f"example {first}); re-prepare it from verified raw files")
        if isinstance(y, torch.Tensor) and y.numel():
            if y.is_floating_point() or y.dtype == torch.bool:
                raise PreparedDataError(f"{where}: y_{split} has dtype {y.dtype}, not integer labels")
            lo, hi = int(y.min()), int(y.max())
            if lo < 0 or (n is not None and hi >= n):
                bad_label = lo if lo < 0 else hi
                raise PreparedDataError(f"{where}: y_{split} has label {bad_label} outside [0, "
                                        f"{n if n is not None else '∞'})")
        arrays = ((f"x_{split}", x), (f"y_{split}", y), (f"domain_{split}", dom),
                  (f"path_{split}", data.get(f"path_{split}")))
        sizes = {k: _length(v) for k, v in arrays if v is not None}
        sizes = {k: v for k, v in sizes.items() if v is not None}
        if len(set(sizes.values())) > 1:
            raise PreparedDataError(f"{where}: split {split!r} arrays disagree in length: {sizes}")


def _store(name: str, data: dict[str, Any], out_path: str | os.PathLike) -> None:
    """Write a loader's dict as weights_only-loadable tensors and name lists, atomically, and log the shapes.

    The data are checked first (:func:`check_prepared`): a dataset with non-finite values or labels out of range
    is refused, and no file is written.
    """
    stored = {key: _to_storable(key, value) for key, value in data.items()}
    check_prepared(stored, f"{out_path} (dataset {name})")
    torch_save_atomic(stored, out_path)
    shapes = {k: tuple(v.shape) for k, v in stored.items() if isinstance(v, torch.Tensor)}
    log.info("%s: wrote %s %s", name, out_path, shapes)


def prepare_generated(name: str, raw_dirs: list[str | os.PathLike], out_path: str | os.PathLike,
                      seed: int = 42) -> None:
    """Generate dataset ``name`` of :data:`GENERATED` from its sources' raw files and write it atomically.

    Parameters
    ----------
    name : {"mnist_m_bsds"}
        ``mnist_m_bsds``: :func:`fedshift.data.mnist_m.generate_mnist_m` (MNIST's 60,000 + 10,000 digits blended
        over BSDS500 crops; train split with ``seed``, test split with ``seed + 1``), 28 x 28 x 3 uint8.
    raw_dirs : list of path
        One folder of verified raw files per source, in :data:`GENERATED` order (``data/raw/mnist``,
        ``data/raw/bsds500``).
    out_path : path
        Output ``.pt`` file, as :func:`prepare_dataset` writes.
    seed : int
        Seed of the generator (42: the official ``create_mnistm.py``).

    Raises
    ------
    ValueError
        ``name`` is not in :data:`GENERATED`, or ``raw_dirs`` has the wrong length.
    FileNotFoundError
        From the loaders, for missing raw files.
    """
    if name not in GENERATED:
        raise ValueError(f"unknown generated dataset {name!r}; known: {', '.join(sorted(GENERATED))}")
    if len(raw_dirs) != len(GENERATED[name]):
        raise ValueError(f"{name}: needs the raw folders of {GENERATED[name]}, got {len(raw_dirs)}")
    mnist_dir, bsds_dir = (os.fspath(d) for d in raw_dirs)
    _store(name, generate_mnist_m(load_mnist(mnist_dir), os.path.join(bsds_dir, "BSR_bsds500.tgz"), seed), out_path)


def load_prepared(path: str | os.PathLike) -> dict[str, Any]:
    """Load a file written by :func:`prepare_dataset`.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.pt`` file.

    Returns
    -------
    dict
        Tensors (on CPU) and lists of str, as stored.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    pickle.UnpicklingError
        The file holds objects that ``weights_only=True`` loading refuses.
    PreparedDataError
        Non-finite features, labels out of range or mismatched split lengths (:func:`check_prepared`), naming the
        file: a file edited or corrupted after it was prepared is caught where it enters a job.
    """
    data = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(data, dict):
        check_prepared(data, path)
    return data
