"""MNIST-M (Ganin and Lempitsky 2015): MNIST digits blended over BSDS500 colour patches, 32 x 32 RGB PNGs.

Paper: "Unsupervised Domain Adaptation by Backpropagation", ICML 2015.

Two on-disk layouts are read:

* the canonical archive ``mnist_m.tar.gz`` (``mnist_m/mnist_m_train/*.png``, ``mnist_m/mnist_m_test/*.png``,
  ``mnist_m/mnist_m_train_labels.txt``, ``mnist_m/mnist_m_test_labels.txt``; 59,001 + 9,001 images);
* the project mirror's test split only: ``mnist_m_test.tar.gz`` (``mnist_m_test/*.png``) beside
  ``mnist_m_test_labels.txt``.

A labels file has one line ``<file name> <digit>`` per image.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from PIL import Image

from fedshift.data.mnist import DIGITS

__all__ = ["load_mnist_m", "read_png_tar", "parse_labels"]


def parse_labels(text: str, source: str) -> dict[str, int]:
    """Parse a labels file into {file name: digit}.

    Raises
    ------
    ValueError
        A line that is not ``<name> <digit 0-9>``, or a name listed twice.
    """
    out: dict[str, int] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) > 9:
            raise ValueError(f"{source}:{i}: expected '<file> <digit>', got {line!r}")
        if parts[0] in out:
            raise ValueError(f"{source}:{i}: {parts[0]} listed twice")
        out[parts[0]] = int(parts[1])
    return out


def read_png_tar(path: str | os.PathLike) -> dict[str, dict[str, np.ndarray]]:
    """Decode every PNG of a tar archive, grouped by folder.

    Returns
    -------
    dict
        folder name (e.g. ``mnist_m_test``) -> {file name: uint8 (32, 32, 3) array}; also the text files
        under the key ``"<text>"`` (file name -> content).

    Raises
    ------
    ValueError
        A PNG that is not 32 x 32 RGB.
    """
    folders: dict[str, dict[str, Any]] = {"<text>": {}}
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            if not member.isfile():
                continue
            p = PurePosixPath(member.name)
            data = tar.extractfile(member).read()
            if p.suffix == ".txt":
                folders["<text>"][p.name] = data.decode("utf-8")
            elif p.suffix == ".png":
                img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
                if img.shape != (32, 32, 3):
                    raise ValueError(f"{member.name}: image of shape {img.shape}, expected (32, 32, 3)")
                folders.setdefault(p.parent.name, {})[p.name] = img
    return folders


def _split(images: dict[str, np.ndarray], labels: dict[str, int], split: str) -> tuple[np.ndarray, np.ndarray]:
    missing = sorted(set(labels) - set(images))
    extra = sorted(set(images) - set(labels))
    if missing or extra:
        raise ValueError(f"MNIST-M {split}: {len(missing)} labelled images missing (e.g. {missing[:3]}), "
                         f"{len(extra)} images without label (e.g. {extra[:3]})")
    names = sorted(labels)
    return np.stack([images[n] for n in names]), np.array([labels[n] for n in names], dtype=np.int64)


def load_mnist_m(raw_dir: str | os.PathLike) -> dict[str, Any]:
    """Load MNIST-M from either layout (module docstring).

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder with ``mnist_m.tar.gz``, or with ``mnist_m_test.tar.gz`` and ``mnist_m_test_labels.txt``.

    Returns
    -------
    dict
        ``x_test`` uint8 (n, 32, 32, 3) and ``y_test`` int64 (n,) (9,001 images), plus ``x_train`` and
        ``y_train`` (59,001) when the full archive is given; images in file-name order; ``class_names``.

    Raises
    ------
    FileNotFoundError
        Neither layout is present.
    ValueError
        Images and labels do not match one to one, or an image is not 32 x 32 RGB.
    """
    raw = Path(raw_dir)
    out: dict[str, Any] = {"class_names": list(DIGITS)}
    if (raw / "mnist_m.tar.gz").is_file():
        folders = read_png_tar(raw / "mnist_m.tar.gz")
        for split in ("train", "test"):
            name = f"mnist_m_{split}_labels.txt"
            if name not in folders["<text>"]:
                raise ValueError(f"mnist_m.tar.gz lacks {name}")
            labels = parse_labels(folders["<text>"][name], name)
            out[f"x_{split}"], out[f"y_{split}"] = _split(folders.get(f"mnist_m_{split}", {}), labels, split)
        return out
    tar, lab = raw / "mnist_m_test.tar.gz", raw / "mnist_m_test_labels.txt"
    if not (tar.is_file() and lab.is_file()):
        raise FileNotFoundError(f"{raw}: neither mnist_m.tar.gz nor mnist_m_test.tar.gz + mnist_m_test_labels.txt")
    labels = parse_labels(lab.read_text(encoding="utf-8"), lab.name)
    out["x_test"], out["y_test"] = _split(read_png_tar(tar).get("mnist_m_test", {}), labels, "test")
    return out
