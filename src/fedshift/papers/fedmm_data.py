"""Prepared datasets of the FedMM rules: MNIST-M generated from BSDS500, the full MNIST-M archive, Office-31.

Each is written like :func:`fedshift.data.prepare.prepare_dataset` output (a ``torch.save`` dict of CPU
tensors and name lists that loads with ``weights_only=True``), so :func:`fedshift.data.prepare.load_prepared`
reads it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from fedshift.data.mnist import load_mnist
from fedshift.data.mnist_m import generate_mnist_m, load_mnist_m
from fedshift.data.office31 import load_office31
from fedshift.io import torch_save_atomic

__all__ = ["KINDS", "prepare"]

log = logging.getLogger(__name__)

#: What :func:`prepare` builds.
KINDS = ("mnist_m_bsds", "mnist_m_full", "office31")


def prepare(kind: str, inputs: Sequence[str | os.PathLike], out_path: str | os.PathLike, seed: int = 42) -> None:
    """Decode (or generate) one FedMM dataset and write it atomically.

    Parameters
    ----------
    kind : {"mnist_m_bsds", "mnist_m_full", "office31"}
        ``mnist_m_bsds``: MNIST's four IDX files then ``BSR_bsds500.tgz`` in ``inputs``
        (:func:`fedshift.data.mnist_m.generate_mnist_m` with ``seed``); ``mnist_m_full``: ``mnist_m.tar.gz``;
        ``office31``: ``domain_adaptation_images.tar.gz`` (224 x 224 images).
    inputs : sequence of path
        The raw files (their folder is read).
    out_path : path

    Raises
    ------
    ValueError
        For an unknown kind; the loaders' errors for malformed raw files.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown FedMM dataset {kind!r}; known: {KINDS}")
    first = Path(inputs[0]).parent
    if kind == "mnist_m_full":
        data = load_mnist_m(first)
        if "x_train" not in data:
            raise ValueError(f"{first}: the full MNIST-M needs mnist_m.tar.gz (train and test splits)")
    elif kind == "office31":
        data = load_office31(first)
    else:
        data = generate_mnist_m(load_mnist(first), inputs[-1], seed)
    stored = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
              for k, v in data.items()}
    torch_save_atomic(stored, out_path)
    log.info("%s: wrote %s %s", kind, out_path,
             {k: tuple(v.shape) for k, v in stored.items() if isinstance(v, torch.Tensor)})
