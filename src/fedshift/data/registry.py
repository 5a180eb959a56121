"""Dataset facts: what a config, a partition or a model needs to know about a dataset before loading it.

One entry per labelled dataset: the number of classes K (labels are 0 … K − 1), the shape of one prepared
image (channels, height, width) where the dataset is one of images, and the names of its domains where it has
several. Where a raw file comes from and what it hashes to stays in ``config/datasets.yaml`` (the download
registry); these are the facts the library reads, so a new dataset states them once, here or by one
:func:`register_dataset` call beside its loader (``tests/toy_dataset`` is the worked example).

Sources: the datasets' own papers and files (MNIST, Fashion-MNIST, USPS 16 x 16 from the ESL copy, MNIST-M as
32 x 32 RGB PNGs, CIFAR-10, TFF's EMNIST-62, PACS's four domains, iWildCam's 182 WILDS classes, Office-31's
three domains and 31 classes, Adult's two income classes).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fedshift import plugins

__all__ = ["DatasetFacts", "FACTS", "register_dataset", "facts", "num_classes", "load_plugins", "GENERATED",
           "DECODED", "raw_datasets_of"]


@dataclass(frozen=True)
class DatasetFacts:
    """What the library knows about one labelled dataset.

    Attributes
    ----------
    name : str
        The dataset's registry name (``config/datasets.yaml`` or a generated dataset such as ``mnist_m_bsds``).
    num_classes : int
        K: labels are 0 … K − 1.
    image_shape : tuple of int, optional
        (channels, height, width) of one prepared image; None for tabular data.
    domains : tuple of str
        Domain names, for a dataset made of several domains (empty otherwise).
    splits : tuple of (str, int)
        Rows per split (``(("train", 60000), ("test", 10000))``), where known: what a shift's protocol check
        (:meth:`fedshift.shifts.Shift.protocol`) holds its sizes to before any job; empty: unknown.
    loader : callable, optional
        ``loader(raw_dir) -> dict`` of numpy arrays (``x_train``, ``y_train``, ``x_test``, ``y_test``, ...) and
        name lists: how :func:`fedshift.data.prepare.prepare_dataset` decodes the verified raw files of a dataset
        that :data:`fedshift.data.prepare.PREPARERS` does not list (a dataset plug-in's own decoder).
    """

    name: str
    num_classes: int
    image_shape: tuple[int, int, int] | None = None
    domains: tuple[str, ...] = ()
    splits: tuple[tuple[str, int], ...] = ()
    loader: Callable[[str | os.PathLike], dict[str, Any]] | None = field(default=None, compare=False, repr=False)


#: Every registered dataset's facts, by name.
FACTS: dict[str, DatasetFacts] = {}


def register_dataset(entry: DatasetFacts) -> DatasetFacts:
    """Register one dataset's facts (a dataset module's one registration line).

    Raises
    ------
    ValueError
        If the name is taken by other facts, or K < 2.
    """
    if entry.num_classes < 2:
        raise ValueError(f"dataset {entry.name!r}: num_classes must be >= 2, got {entry.num_classes}")
    if entry.name in FACTS and FACTS[entry.name] != entry:
        raise ValueError(f"dataset {entry.name!r} is already registered with other facts: {FACTS[entry.name]}")
    FACTS[entry.name] = entry
    return entry


def facts(name: str) -> DatasetFacts:
    """The facts of dataset ``name``.

    Raises
    ------
    KeyError
        For an unregistered name (the message lists the registered ones).
    """
    try:
        return FACTS[name]
    except KeyError:
        raise KeyError(f"no dataset facts for {name!r}; registered: {sorted(FACTS)}") from None


def load_plugins(targets: Any, *, where: str = "dataset_plugins") -> dict[str, tuple[str, ...]]:
    """Import dataset plug-ins (config ``dataset_plugins``) whose :func:`register_dataset` lines add datasets.

    A plug-in's raw files are described by its own ``datasets:`` entry in the config (the download registry
    format of ``config/datasets.yaml``); ``tests/toy_dataset`` is the worked example.

    Raises
    ------
    fedshift.errors.ConfigError
        ``dataset_plugins[i]``: a missing file, an import that fails, or a target that registers no dataset.
    """
    return plugins.load_plugins(targets, where=where, table=FACTS, what="dataset", replaceable=False)


def num_classes(name: str) -> int:
    """K of dataset ``name`` (:func:`facts`)."""
    return facts(name).num_classes


for _entry in (
    DatasetFacts("adult", 2),
    # splits: the decoders' documented shapes (fedshift.data.mnist, fashion_mnist, usps, mnist_m)
    DatasetFacts("mnist", 10, (1, 28, 28), splits=(("train", 60000), ("test", 10000))),
    DatasetFacts("fashion_mnist", 10, (1, 28, 28), splits=(("train", 60000), ("test", 10000))),
    DatasetFacts("usps", 10, (1, 16, 16), splits=(("train", 7291), ("test", 2007))),
    DatasetFacts("mnist_m", 10, (3, 32, 32), splits=(("train", 59001), ("test", 9001))),
    DatasetFacts("mnist_m_full", 10, (3, 32, 32)),
    DatasetFacts("mnist_m_bsds", 10, (3, 32, 32)),
    DatasetFacts("cifar10", 10, (3, 32, 32)),
    DatasetFacts("emnist_tff", 62, (1, 28, 28)),
    DatasetFacts("pacs", 7, domains=("photo", "art_painting", "cartoon", "sketch")),
    DatasetFacts("iwildcam", 182),
    DatasetFacts("office31", 31, domains=("amazon", "dslr", "webcam")),
):
    register_dataset(_entry)


# What the workflow's plan needs of fedshift.data.prepare, without importing its decoders (torch, PIL), so a plan starts
# without them.
#: Generated dataset -> the registry datasets it is made from, in the order
#: :func:`fedshift.data.prepare.prepare_generated` takes them. ``mnist_m_bsds``: MNIST-M as the official
#: ``create_mnistm.py`` builds it (FedMM code; WAFL's Table 1 counts 70,000 MNIST-M images, MNIST's train and test
#: splits blended).
GENERATED: dict[str, tuple[str, ...]] = {"mnist_m_bsds": ("mnist", "bsds500")}
#: The registry datasets :mod:`fedshift.data.prepare` decodes itself, by name (the keys of its ``PREPARERS`` and
#: ``IMAGE_FILE_PREPARERS``; ``tests/unit/test_plan_imports.py`` holds them equal).
DECODED: tuple[str, ...] = ("adult", "fashion_mnist", "mnist", "usps", "mnist_m", "mnist_m_full", "cifar10",
                            "office31", "pacs", "iwildcam")


def raw_datasets_of(name: str) -> tuple[str, ...]:
    """Registry datasets whose raw files prepared dataset ``name`` needs: itself, or :data:`GENERATED`'s sources."""
    return GENERATED.get(name, (name,))
