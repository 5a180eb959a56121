"""A toy dataset from a test folder, the proof that a dataset is one registration (docs "Add a dataset").

Toy shapes: 12 x 12 grey images of four classes (0 horizontal bar, 1 vertical bar, 2 diagonal, 3 hollow square), at
random positions over uniform noise; 400 training and 200 test images in ``raw/`` as four ``.npy`` files
(:func:`make_raw` wrote them, seed 0; np.save's bytes are deterministic, so ``toy_dataset.yaml`` pins their
sha256). ``dataset_plugins: [tests/toy_dataset/dataset.py]`` loads it; its raw files are the ``datasets:`` entry
of ``toy_dataset.yaml`` (the download registry's format); the shift matrix can then name ``toy_shapes`` in a shift.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedshift.data.registry import DatasetFacts, register_dataset

SIDE = 12
FILES = ("x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy")


def load_toy_shapes(raw_dir: str | os.PathLike) -> dict:
    """Decode the verified raw files: ``x_*`` uint8 (n, 12, 12), ``y_*`` int64 (n,), ``class_names``.

    Raises
    ------
    ValueError
        For images that are not (n, 12, 12) uint8 or labels outside 0..3.
    """
    out = {f.removesuffix(".npy"): np.load(Path(raw_dir) / f, allow_pickle=False) for f in FILES}
    for split in ("train", "test"):
        x, y = out[f"x_{split}"], out[f"y_{split}"]
        if x.dtype != np.uint8 or x.shape[1:] != (SIDE, SIDE) or len(x) != len(y) or not np.isin(y, range(4)).all():
            raise ValueError(f"toy_shapes {split}: expected uint8 (n, {SIDE}, {SIDE}) images with labels 0..3")
        out[f"y_{split}"] = y.astype(np.int64)
    return {**out, "class_names": ["horizontal", "vertical", "diagonal", "square"]}


register_dataset(DatasetFacts("toy_shapes", 4, (1, SIDE, SIDE), loader=load_toy_shapes))  # the registration line


def make_raw(out_dir: str | os.PathLike, seed: int = 0) -> None:
    """Write the four raw files (what ``raw/`` holds): 400 training and 200 test images."""
    rng = np.random.default_rng(seed)
    for split, n in (("train", 400), ("test", 200)):
        y = np.arange(n) % 4
        x = rng.integers(0, 80, size=(n, SIDE, SIDE))
        for i, c in enumerate(y):
            r, s = rng.integers(2, SIDE - 2, size=2)
            if c == 0:
                x[i, r, 1:-1] = 255
            elif c == 1:
                x[i, 1:-1, s] = 255
            elif c == 2:
                x[i, np.arange(SIDE), np.arange(SIDE)] = 255
            else:
                x[i, 2, 2:-2] = x[i, -3, 2:-2] = x[i, 2:-2, 2] = x[i, 2:-2, -3] = 255
        np.save(Path(out_dir) / f"x_{split}.npy", x.astype(np.uint8), allow_pickle=False)
        np.save(Path(out_dir) / f"y_{split}.npy", y.astype(np.int64), allow_pickle=False)
