"""MNIST-M (Ganin and Lempitsky 2015): MNIST digits blended over BSDS500 colour patches, 32 x 32 RGB PNGs.

Paper: "Unsupervised Domain Adaptation by Backpropagation", ICML 2015.

Two on-disk layouts are read:

* the canonical archive ``mnist_m.tar.gz`` (``mnist_m/mnist_m_train/*.png``, ``mnist_m/mnist_m_test/*.png``,
  ``mnist_m/mnist_m_train_labels.txt``, ``mnist_m/mnist_m_test_labels.txt``; 59,001 + 9,001 images);
* the project mirror's test split only: ``mnist_m_test.tar.gz`` (``mnist_m_test/*.png``) beside
  ``mnist_m_test_labels.txt``.

A labels file has one line ``<file name> <digit>`` per image. :func:`generate_mnist_m` builds MNIST-M anew from
MNIST and the BSDS500 archive (``BSR_bsds500.tgz``), as the FedMM code does.
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

__all__ = ["load_mnist_m", "load_mnist_m_full", "read_png_tar", "parse_labels", "read_bsds500_train", "blend_mnist_m",
           "generate_mnist_m"]


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
        Folder with ``mnist_m.tar.gz``, or with ``mnist_m_test.tar.gz`` and ``mnist_m_test_labels.txt`` (and
        optionally ``mnist_m_train.tar.gz`` and ``mnist_m_train_labels.txt``: the mirror's split archives).

    Returns
    -------
    dict
        ``x_test`` uint8 (n, 32, 32, 3) and ``y_test`` int64 (n,) (9,001 images), plus ``x_train`` and
        ``y_train`` (59,001) when the full archive or the train split's archive is
        given; images in file-name order; ``class_names``.

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
    tar, lab = raw / "mnist_m_train.tar.gz", raw / "mnist_m_train_labels.txt"
    if tar.is_file() and lab.is_file():  # the mirror's train split beside it (registry mnist_m_split)
        labels = parse_labels(lab.read_text(encoding="utf-8"), lab.name)
        out["x_train"], out["y_train"] = _split(read_png_tar(tar).get("mnist_m_train", {}), labels, "train")
    return out


def load_mnist_m_full(raw_dir: str | os.PathLike) -> dict[str, Any]:
    """Load the canonical archive only (registry ``mnist_m_full``): both splits, 59,001 + 9,001 images.

    Parameters
    ----------
    raw_dir : str or os.PathLike
        Folder with ``mnist_m.tar.gz``.

    Returns
    -------
    dict
        As :func:`load_mnist_m` with the full archive: ``x_train`` uint8 (59001, 32, 32, 3), ``y_train``,
        ``x_test`` (9001, 32, 32, 3), ``y_test``, ``class_names``.

    Raises
    ------
    FileNotFoundError
        ``raw_dir`` has no ``mnist_m.tar.gz`` (the mirror's test split alone is the registry entry ``mnist_m``).
    ValueError
        As :func:`load_mnist_m`.
    """
    if not (Path(raw_dir) / "mnist_m.tar.gz").is_file():
        raise FileNotFoundError(f"{raw_dir}: no mnist_m.tar.gz (the full MNIST-M archive)")
    return load_mnist_m(raw_dir)


# ---------------------------------------------------------------------------------------------- generation

#: Folder of the 200 BSDS500 training photographs inside ``BSR_bsds500.tgz``.
BSDS_TRAIN = "BSR/BSDS500/data/images/train"


def read_bsds500_train(path: str | os.PathLike) -> list[np.ndarray]:
    """The BSDS500 training photographs (Arbeláez et al. 2011) from ``BSR_bsds500.tgz``, in file-name order.

    Returns
    -------
    list of ndarray
        uint8 (H, W, 3) images (481 x 321 or 321 x 481; 200 in the canonical archive).

    Raises
    ------
    ValueError
        The archive holds no JPEG under ``BSR/BSDS500/data/images/train``.
    """
    images = {}
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            p = PurePosixPath(member.name)
            if member.isfile() and p.suffix.lower() == ".jpg" and str(p.parent).endswith(BSDS_TRAIN):
                images[p.name] = np.asarray(Image.open(io.BytesIO(tar.extractfile(member).read())).convert("RGB"))
    if not images:
        raise ValueError(f"{path}: no JPEG under {BSDS_TRAIN}")
    return [images[k] for k in sorted(images)]


def blend_mnist_m(digits: np.ndarray, backgrounds: list[np.ndarray], seed: int = 42, size: int = 28) -> np.ndarray:
    """MNIST-M by the recipe of Ganin and Lempitsky (2015, §5): |patch − digit| per channel.

    Every digit gets a random BSDS500 photograph and a random ``size`` x ``size`` crop of it (official
    ``create_mnistm.py`` of fedmm/FedMM: ``RandomState(42)`` for the photograph; here one seeded generator
    draws both, so the result is reproducible), and the output is the absolute difference of the crop and
    the grey digit repeated over the three channels.

    Parameters
    ----------
    digits : ndarray, uint8, shape (n, size, size)
    backgrounds : list of ndarray, uint8 (H, W, 3), H, W >= size
    seed : int

    Returns
    -------
    ndarray, uint8, shape (n, size, size, 3)

    Raises
    ------
    ValueError
        If a background is smaller than the digits or none is given.
    """
    if not backgrounds or any(min(b.shape[:2]) < size for b in backgrounds):
        raise ValueError(f"need backgrounds of at least {size} x {size} pixels")
    rng = np.random.default_rng(seed)
    out = np.empty((len(digits), size, size, 3), dtype=np.uint8)
    for i, d in enumerate(digits):
        bg = backgrounds[rng.integers(len(backgrounds))]
        y0 = rng.integers(bg.shape[0] - size + 1)
        x0 = rng.integers(bg.shape[1] - size + 1)
        patch = bg[y0: y0 + size, x0: x0 + size].astype(np.int16)
        out[i] = np.abs(patch - d.astype(np.int16)[:, :, None]).astype(np.uint8)
    return out


def generate_mnist_m(mnist: dict[str, Any], bsds_tar: str | os.PathLike, seed: int = 42) -> dict[str, Any]:
    """MNIST-M from MNIST's train and test splits and BSDS500 (:func:`blend_mnist_m`; official FedMM pipeline).

    Parameters
    ----------
    mnist : dict
        :func:`fedshift.data.mnist.load_mnist` output.
    bsds_tar : path
        ``BSR_bsds500.tgz``.
    seed : int
        Train split uses ``seed``, test split ``seed + 1``.

    Returns
    -------
    dict
        ``x_train`` uint8 (60000, 28, 28, 3), ``y_train``, ``x_test`` (10000, 28, 28, 3), ``y_test`` (MNIST's
        labels), ``class_names``.
    """
    bgs = read_bsds500_train(bsds_tar)
    return {"x_train": blend_mnist_m(mnist["x_train"], bgs, seed), "y_train": mnist["y_train"],
            "x_test": blend_mnist_m(mnist["x_test"], bgs, seed + 1), "y_test": mnist["y_test"],
            "class_names": list(DIGITS)}
