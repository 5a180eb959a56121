"""PACS and iWildCam in the WILDS on-disk layout, as the Bai et al. (2024) benchmark ships them.

Both archives unpack to a folder holding ``metadata.csv`` (one row per image) and the image files,
the layout of the WILDS package (Koh et al. 2021, ``wilds/datasets/iwildcam_dataset.py``) that Bai,
Bagchi and Inouye's federated domain-generalisation benchmark (``inouye-lab/FedDG_Benchmark``,
``src/datasets.py``) also uses for PACS:

* **PACS** v1.0 (Li et al. 2017): columns ``path`` (relative to the folder), ``split``, ``y``
  (7 classes: dog, elephant, giraffe, guitar, horse, house, person) and ``domain`` (art_painting,
  cartoon, photo, sketch); the official split trains on cartoon + sketch, validates in-domain on
  ``id_val`` and tests out-of-domain on photo (``test``; spec §5.6).
* **iWildCam** v2.0 (Beery et al. 2020, WILDS): columns ``filename`` (under ``train/``), ``split``,
  ``y`` (182 classes) and ``location_remapped`` (the camera trap, the domain).

Splits are ``train``, ``val``, ``test``, ``id_val``, ``id_test`` (those present are kept).

Images stay files: :func:`prepare_wilds` unpacks the archive once into an image folder beside the
prepared index and stores labels, domains and relative paths per split; training decodes them on the
fly (:class:`ImageFiles`), because iWildCam's 203k images at 448×448 do not fit in memory.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from PIL import Image

__all__ = ["SPLITS", "PACS_CLASSES", "images_dir_of", "extract_archive", "load_pacs", "load_iwildcam", "ImageFiles",
           "image_transform"]

SPLITS = ("train", "val", "test", "id_val", "id_test")
PACS_CLASSES = ["dog", "elephant", "giraffe", "guitar", "horse", "house", "person"]
PACS_ARCHIVE = "pacs_v1.0.tar.gz"
IWILDCAM_ARCHIVE = "iwildcam_v2.0.tar.gz"


def images_dir_of(prepared_path: str | os.PathLike) -> Path:
    """Folder of the unpacked images of a prepared image-file dataset: ``<prepared>.images/``."""
    p = Path(prepared_path)
    return p.with_name(p.stem + ".images")


def extract_archive(archive: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Unpack a ``.tar``/``.tar.gz`` archive and return the folder holding its ``metadata.csv``.

    Extraction uses tarfile's ``data`` filter (no absolute paths, links out of ``dest`` or device
    files). The metadata may sit at the top of the archive (CodaLab bundles) or in one folder below.

    Raises
    ------
    FileNotFoundError
        The archive is missing, or holds no ``metadata.csv`` at depth 0 or 1.
    """
    archive, dest = Path(archive), Path(dest)
    if not archive.is_file():
        raise FileNotFoundError(f"archive not found: {archive}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    for cand in [dest, *sorted(d for d in dest.iterdir() if d.is_dir())]:
        if (cand / "metadata.csv").is_file():
            return cand
    raise FileNotFoundError(f"{archive}: no metadata.csv at the top or one folder down")


def _by_split(df: pd.DataFrame, path_col: str, prefix: str, domain_col: str, root: Path, image_dir: Path
              ) -> dict[str, Any]:
    unknown = sorted(set(df["split"]) - set(SPLITS))
    if unknown:
        raise ValueError(f"metadata.csv: unknown split names {unknown} (known: {SPLITS})")
    rel = root.relative_to(image_dir)
    out: dict[str, Any] = {}
    for split in SPLITS:
        part = df[df["split"] == split]
        if part.empty:
            continue
        out[f"y_{split}"] = np.array(part["y"], dtype=np.int64)
        out[f"domain_{split}"] = np.array(part[domain_col], dtype=np.int64)
        out[f"path_{split}"] = [str(rel / prefix / p) for p in part[path_col]]
    return out


def load_pacs(raw_dir: str | os.PathLike, image_dir: str | os.PathLike) -> dict[str, Any]:
    """Unpack PACS v1.0 into ``image_dir`` and index it by split.

    Parameters
    ----------
    raw_dir : path
        Folder with ``pacs_v1.0.tar.gz`` (the WILDS-layout bundle of Bai et al. 2024).
    image_dir : path
        Where the images are unpacked (:func:`images_dir_of` of the prepared file).

    Returns
    -------
    dict
        Per split s present: ``y_s`` (n,) int64 in 0..6, ``domain_s`` (n,) int64 (index into
        ``domain_names``), ``path_s`` (list of n paths relative to ``image_dir``); ``class_names``,
        ``domain_names``.

    Raises
    ------
    FileNotFoundError, ValueError
        Missing archive or metadata, missing columns, labels outside 0..6, unknown splits.
    """
    root = extract_archive(Path(raw_dir) / PACS_ARCHIVE, image_dir)
    df = pd.read_csv(root / "metadata.csv")
    missing = {"path", "split", "y", "domain"} - set(df.columns)
    if missing:
        raise ValueError(f"PACS metadata.csv lacks columns {sorted(missing)}")
    if df["y"].min() < 0 or df["y"].max() >= len(PACS_CLASSES):
        raise ValueError(f"PACS labels must lie in 0..{len(PACS_CLASSES) - 1}")
    domains = sorted(df["domain"].astype(str).unique())
    df["domain_index"] = df["domain"].astype(str).map({d: i for i, d in enumerate(domains)})
    out = _by_split(df, "path", "", "domain_index", root, Path(image_dir))
    return {**out, "class_names": list(PACS_CLASSES), "domain_names": domains}


def load_iwildcam(raw_dir: str | os.PathLike, image_dir: str | os.PathLike) -> dict[str, Any]:
    """Unpack WILDS iWildCam v2.0 into ``image_dir`` and index it by split (domain = camera location).

    Parameters
    ----------
    raw_dir : path
        Folder with ``iwildcam_v2.0.tar.gz`` (the WILDS bundle).
    image_dir : path
        Where the images are unpacked.

    Returns
    -------
    dict
        As :func:`load_pacs`, with ``domain_s`` the ``location_remapped`` ids and ``class_names`` from
        ``categories.csv`` (column ``name`` by ``y``) when the archive has it, else the label ids.

    Raises
    ------
    FileNotFoundError, ValueError
        Missing archive or metadata, missing columns, unknown splits.
    """
    root = extract_archive(Path(raw_dir) / IWILDCAM_ARCHIVE, image_dir)
    df = pd.read_csv(root / "metadata.csv")
    missing = {"filename", "split", "y", "location_remapped"} - set(df.columns)
    if missing:
        raise ValueError(f"iWildCam metadata.csv lacks columns {sorted(missing)}")
    k = int(df["y"].max()) + 1
    names = [str(i) for i in range(k)]
    cats = root / "categories.csv"
    if cats.is_file():
        c = pd.read_csv(cats)
        if {"y", "name"} <= set(c.columns):
            for y, name in zip(c["y"], c["name"], strict=True):
                if 0 <= int(y) < k:
                    names[int(y)] = str(name)
    out = _by_split(df, "filename", "train", "location_remapped", root, Path(image_dir))
    locations = int(df["location_remapped"].max()) + 1
    return {**out, "class_names": names, "domain_names": [f"location {i}" for i in range(locations)]}


def image_transform(size: int, train: bool) -> Callable[[Image.Image], torch.Tensor]:
    """The benchmark's image pipeline (Bai et al. 2024, ``src/dataset_bundle.py``; spec §5.6).

    Training: resize to ``size`` × ``size``, RandomResizedCrop(size, scale 0.7–1), horizontal flip,
    ColorJitter(0.3, 0.3, 0.3, 0.3), RandomGrayscale, ImageNet normalisation. Evaluation: resize and
    normalise. Output: float32 tensor (3, size, size).
    """
    from torchvision.transforms import v2

    steps: list[Any] = [v2.ToImage(), v2.Resize((size, size), antialias=True)]
    if train:
        steps += [v2.RandomResizedCrop(size, scale=(0.7, 1.0), antialias=True), v2.RandomHorizontalFlip(),
                  v2.ColorJitter(0.3, 0.3, 0.3, 0.3), v2.RandomGrayscale()]
    steps += [v2.ToDtype(torch.float32, scale=True),
              v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])]
    return v2.Compose(steps)


class ImageFiles(torch.utils.data.Dataset):
    """Image files decoded on demand, with a per-example seed for the random augmentation.

    Item ``(i, seed)`` returns ``(x, y)``: image ``paths[i]`` as RGB through ``transform`` with torch's
    RNG seeded by ``seed`` (so an augmented batch is the same whatever the worker count), and
    ``labels[i]``. An int item uses seed 0.

    Parameters
    ----------
    root : path
        Folder the paths are relative to.
    paths : sequence of str
    labels : sequence of int
    transform : callable
        PIL image → tensor (:func:`image_transform`).
    """

    def __init__(self, root: str | os.PathLike, paths: Sequence[str], labels: Sequence[int],
                 transform: Callable[[Image.Image], torch.Tensor]) -> None:
        if len(paths) != len(labels):
            raise ValueError(f"{len(paths)} paths but {len(labels)} labels")
        self.root, self.paths, self.transform = Path(root), list(paths), transform
        self.labels = torch.as_tensor(np.asarray(labels, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, item: int | tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        i, seed = item if isinstance(item, tuple) else (item, 0)
        with Image.open(self.root / self.paths[i]) as img:
            rgb = img.convert("RGB")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            x = self.transform(rgb)
        return x, self.labels[i]
