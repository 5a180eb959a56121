"""Office-31 (Saenko, Kulis, Fritz and Darrell 2010): 4,110 images of 31 office objects in three domains.

Paper: "Adapting Visual Category Models to New Domains", ECCV 2010. Domains: ``amazon`` (2,817 product
images), ``dslr`` (498) and ``webcam`` (795). The archive ``domain_adaptation_images.tar.gz`` holds
``<domain>/images/<class>/<file>.jpg``, in some copies under a top folder ``domain_adaptation_images/``; both
are read. Classes are numbered in alphabetical order of their folder names (``back_pack`` = 0 …
``trash_can`` = 30).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import PurePosixPath
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["DOMAINS", "ARCHIVE", "load_office31", "TASKS"]

DOMAINS = ("amazon", "dslr", "webcam")
ARCHIVE = "domain_adaptation_images.tar.gz"
#: The six transfer tasks of FedMM's Table 1: (source, target).
TASKS = {"A_W": ("amazon", "webcam"), "D_W": ("dslr", "webcam"), "W_D": ("webcam", "dslr"),
         "A_D": ("amazon", "dslr"), "D_A": ("dslr", "amazon"), "W_A": ("webcam", "amazon")}


def _square(img: Image.Image, size: int) -> np.ndarray:
    return np.asarray(img.convert("RGB").resize((size, size), Image.BILINEAR))


def load_office31(raw_dir: str | os.PathLike, size: int = 224) -> dict[str, Any]:
    """Decode Office-31 and resize every image to ``size`` x ``size`` (bilinear; the official MobileNetV2 input).

    Parameters
    ----------
    raw_dir : path
        Folder with ``domain_adaptation_images.tar.gz``.
    size : int
        Output side in pixels.

    Returns
    -------
    dict
        ``x_<domain>`` uint8 (n_d, size, size, 3) and ``y_<domain>`` int64 (n_d,) for the three domains, images
        in (class, file name) order; ``class_names`` (31, alphabetical).

    Raises
    ------
    FileNotFoundError
        The archive is missing.
    ValueError
        A domain has no images, or the domains do not share one set of classes.
    """
    path = os.path.join(raw_dir, ARCHIVE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found")
    found: dict[str, dict[tuple[str, str], np.ndarray]] = {d: {} for d in DOMAINS}
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not member.isfile() or not parts[-1].lower().endswith((".jpg", ".jpeg", ".png")):
                continue
            idx = [i for i, p in enumerate(parts[:-3]) if p in DOMAINS and parts[i + 1] == "images"]
            if not idx:
                continue
            domain, cls = parts[idx[-1]], parts[idx[-1] + 2]
            img = Image.open(io.BytesIO(tar.extractfile(member).read()))
            found[domain][(cls, parts[-1])] = _square(img, size)
    classes = sorted({c for d in DOMAINS for c, _ in found[d]})
    out: dict[str, Any] = {"class_names": classes}
    for d in DOMAINS:
        if not found[d]:
            raise ValueError(f"{path}: domain {d!r} has no images")
        have = sorted({c for c, _ in found[d]})
        if have != classes:
            raise ValueError(f"{path}: domain {d!r} has classes {len(have)} of {len(classes)}: missing "
                             f"{sorted(set(classes) - set(have))[:5]}")
        keys = sorted(found[d])
        out[f"x_{d}"] = np.stack([found[d][k] for k in keys])
        out[f"y_{d}"] = np.array([classes.index(c) for c, _ in keys], dtype=np.int64)
    return out
