"""MNIST from its four canonical IDX ``.gz`` files (LeCun, Bottou, Bengio and Haffner 1998).

The files have the IDX layout of Fashion-MNIST, which was designed as its drop-in replacement, so the
decoding is :func:`fedshift.data.fashion_mnist.read_idx`; only the class names differ.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from fedshift.data.fashion_mnist import FILES, read_idx

__all__ = ["DIGITS", "load_mnist"]

#: Class names of the digit datasets (MNIST, USPS, MNIST-M): label k is the digit k.
DIGITS: list[str] = [str(d) for d in range(10)]


def load_mnist(raw_dir: str | os.PathLike) -> dict[str, Any]:
    """Load MNIST's train and test splits.

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder with ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
        ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz``.

    Returns
    -------
    dict
        ``x_train`` uint8 (60000, 28, 28), ``y_train`` int64 (60000,), ``x_test`` uint8 (10000, 28, 28),
        ``y_test`` int64 (10000,); pixels 0-255 (0 = background); ``class_names`` the digits "0".."9".

    Raises
    ------
    FileNotFoundError
        A file is missing.
    ValueError
        A file is not valid IDX, images are not N x 28 x 28, counts differ or a label is outside 0-9.
    """
    raw = Path(raw_dir)
    out: dict[str, Any] = {key: read_idx(raw / name) for key, name in FILES.items()}
    for split in ("train", "test"):
        x, y = out[f"x_{split}"], out[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise ValueError(f"{FILES['x_' + split]}: image shape {x.shape}, expected (n, 28, 28)")
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(f"{split}: {len(x)} images but labels of shape {y.shape}")
        if y.max() > 9:
            raise ValueError(f"{FILES['y_' + split]}: label {int(y.max())} outside 0-9")
        out[f"y_{split}"] = y.astype(np.int64)
    out["class_names"] = list(DIGITS)
    return out
