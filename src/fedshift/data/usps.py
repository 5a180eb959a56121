"""USPS handwritten digits (Hull 1994) as on the *Elements of Statistical Learning* data page.

Files ``zip.train.gz`` (7,291 digits) and ``zip.test.gz`` (2,007), from Hastie, Tibshirani and Friedman.

Each line holds the digit (0-9) and 256 grey values in [-1, 1] of a 16 x 16 image, row by row, -1 being
the background. They are stored as uint8 ``round((v + 1) / 2 · 255)``, so that 0 is the background and
255 the ink, as in MNIST.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import numpy as np

from fedshift.data.mnist import DIGITS

__all__ = ["FILES", "load_usps", "read_zip_digits"]

#: split -> raw file name
FILES: dict[str, str] = {"train": "zip.train.gz", "test": "zip.test.gz"}


def read_zip_digits(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Decode one ESL ``zip.*.gz`` file.

    Parameters
    ----------
    path : str or os.PathLike
        ``zip.train.gz`` or ``zip.test.gz``.

    Returns
    -------
    x : ndarray, uint8, shape (n, 16, 16)
        Pixels 0-255 (0 = background).
    y : ndarray, int64, shape (n,)
        Digits 0-9.

    Raises
    ------
    ValueError
        A line without 257 numbers, a label outside 0-9 or a grey value outside [-1, 1]; the message names
        the file and line.
    """
    p = Path(path)
    rows = []
    with gzip.open(p, "rt") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            vals = line.split()
            if len(vals) != 257:
                raise ValueError(f"{p.name}:{i}: {len(vals)} numbers, expected 257 (label + 16x16 pixels)")
            rows.append([float(v) for v in vals])
    if not rows:
        raise ValueError(f"{p.name}: no digits")
    arr = np.asarray(rows)
    y = arr[:, 0]
    if not np.all((y == np.round(y)) & (y >= 0) & (y <= 9)):
        raise ValueError(f"{p.name}: labels must be the digits 0-9")
    v = arr[:, 1:]
    if v.min() < -1 - 1e-6 or v.max() > 1 + 1e-6:
        raise ValueError(f"{p.name}: grey values outside [-1, 1]")
    x = np.round((v + 1.0) / 2.0 * 255.0).clip(0, 255).astype(np.uint8).reshape(-1, 16, 16)
    return x, y.astype(np.int64)


def load_usps(raw_dir: str | os.PathLike) -> dict[str, Any]:
    """Load USPS (ESL copy).

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder with ``zip.train.gz`` and ``zip.test.gz``.

    Returns
    -------
    dict
        ``x_train`` uint8 (7291, 16, 16), ``y_train`` int64, ``x_test`` uint8 (2007, 16, 16), ``y_test`` int64,
        ``class_names`` the digits.

    Raises
    ------
    FileNotFoundError, ValueError
        A missing or malformed file (see :func:`read_zip_digits`).
    """
    raw = Path(raw_dir)
    out: dict[str, Any] = {}
    for split, name in FILES.items():
        out[f"x_{split}"], out[f"y_{split}"] = read_zip_digits(raw / name)
    out["class_names"] = list(DIGITS)
    return out
