"""Fashion-MNIST from its four IDX files (Xiao, Rasul and Vollgraf 2017, arXiv:1708.07747).

The IDX format (LeCun et al., "THE MNIST DATABASE of handwritten digits", file-format section):
a 4-byte magic number — two zero bytes, a dtype code (0x08 = unsigned byte) and the number of
dimensions — then one big-endian uint32 per dimension, then the data in C order.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["CLASS_NAMES", "FILES", "load_fashion_mnist", "load_idx_splits", "read_idx"]

#: The official class names, index = label (zalandoresearch/fashion-mnist README).
CLASS_NAMES: list[str] = [
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
]  # fmt: skip

#: Output key -> raw file name.
FILES: dict[str, str] = {
    "x_train": "train-images-idx3-ubyte.gz",
    "y_train": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
}
_UBYTE = 0x08


def _read_exact(fh: IO[bytes], view: memoryview) -> int:
    filled = 0
    while filled < len(view):
        n = fh.readinto(view[filled:])
        if not n:
            break
        filled += n
    return filled


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an unsigned-byte IDX file, gzip-compressed if its name ends in ``.gz``.

    Parameters
    ----------
    path : str or os.PathLike
        The IDX file (``*.gz`` is decompressed on the fly).

    Returns
    -------
    numpy.ndarray
        uint8 array with the shape the header gives (e.g. (60000, 28, 28) for images,
        (60000,) for labels); writable, C-contiguous.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        Bad magic (non-zero first bytes, dtype code other than 0x08, zero dimensions), a zero
        dimension, a payload shorter or longer than the product of the dimensions, or a corrupt
        gzip stream; the message names the file.

    Notes
    -----
    IDX format as specified on the MNIST database page (LeCun, Cortes and Burges).
    """
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    try:
        with opener(p, "rb") as fh:
            magic = fh.read(4)
            if len(magic) != 4 or magic[0] != 0 or magic[1] != 0:
                raise ValueError(f"{p.name}: not an IDX file (magic {magic.hex()})")
            if magic[2] != _UBYTE:
                raise ValueError(f"{p.name}: IDX dtype code 0x{magic[2]:02x}, expected 0x08")
            ndim = magic[3]
            header = fh.read(4 * ndim)
            if ndim == 0 or len(header) != 4 * ndim:
                raise ValueError(f"{p.name}: IDX header truncated or has no dimensions")
            shape = tuple(int(d) for d in np.frombuffer(header, dtype=">u4"))
            if 0 in shape:
                raise ValueError(f"{p.name}: IDX shape {shape} has a zero dimension")
            out = np.empty(shape, dtype=np.uint8)
            got = _read_exact(fh, memoryview(out).cast("B"))
            if got != out.size:
                raise ValueError(
                    f"{p.name}: IDX payload has {got} bytes, shape {shape} needs {out.size}"
                )
            if fh.read(1):
                raise ValueError(f"{p.name}: IDX payload longer than shape {shape} allows")
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValueError(f"{p.name}: corrupt gzip stream ({exc})") from exc
    return out


def load_fashion_mnist(raw_dir: str | os.PathLike) -> dict[str, Any]:
    """Load Fashion-MNIST's train and test splits from the four IDX ``.gz`` files.

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder with ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
        ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz``.

    Returns
    -------
    dict
        ``x_train`` uint8 (60000, 28, 28), ``y_train`` int64 (60000,), ``x_test`` uint8
        (10000, 28, 28), ``y_test`` int64 (10000,); pixel values 0-255 (0 = background),
        labels 0-9 indexing ``class_names`` (the 10 official names).

    Raises
    ------
    FileNotFoundError
        A file is missing.
    ValueError
        A file is not valid IDX (see :func:`read_idx`), images are not N x 28 x 28, image and
        label counts differ, or a label is outside 0-9.
    """
    return load_idx_splits(raw_dir, CLASS_NAMES)


def load_idx_splits(raw_dir: str | os.PathLike, class_names: list[str]) -> dict[str, Any]:
    """Load the four IDX files of an MNIST-format dataset (Fashion-MNIST, MNIST) and check them.

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder with the files of :data:`FILES`.
    class_names : list of str
        Names of the labels 0 … len − 1 (stored as ``class_names``).

    Returns
    -------
    dict
        ``x_train``, ``x_test`` uint8 (n, 28, 28); ``y_train``, ``y_test`` int64 (n,); ``class_names``.

    Raises
    ------
    FileNotFoundError
        A file is missing.
    ValueError
        A file is not valid IDX, images are not N x 28 x 28, counts differ, or a label has no class name.
    """
    raw = Path(raw_dir)
    out: dict[str, Any] = {key: read_idx(raw / name) for key, name in FILES.items()}
    for split in ("train", "test"):
        x, y = out[f"x_{split}"], out[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            raise ValueError(f"{FILES['x_' + split]}: image shape {x.shape}, expected (n, 28, 28)")
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(f"{split}: {len(x)} images but labels of shape {y.shape}")
        if y.max() >= len(class_names):
            raise ValueError(f"{FILES['y_' + split]}: label {int(y.max())} outside 0-{len(class_names) - 1}")
        out[f"y_{split}"] = y.astype(np.int64)
    out["class_names"] = list(class_names)
    return out
