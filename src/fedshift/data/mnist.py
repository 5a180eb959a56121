"""MNIST from its four canonical IDX ``.gz`` files (LeCun, Bottou, Bengio and Haffner 1998).

The files have the IDX layout of Fashion-MNIST, which was designed as its drop-in replacement, so the
decoding and checks are :func:`fedshift.data.fashion_mnist.load_idx_splits`; only the class names differ.
"""

from __future__ import annotations

import os
from typing import Any

from fedshift.data.fashion_mnist import load_idx_splits

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
    return load_idx_splits(raw_dir, DIGITS)
