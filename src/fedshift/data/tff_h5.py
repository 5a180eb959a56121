"""TensorFlow Federated's HDF5 client data (``tff.simulation.datasets``' ``.tar.bz2`` archives).

Layout (TFF ``HDF5ClientData``): group ``examples``, one sub-group per client id, one dataset per feature,
all of the client's examples along axis 0. Federated EMNIST (``fed_emnist.tar.bz2``): ``fed_emnist_train.h5``
and ``fed_emnist_test.h5`` with ``pixels`` float32 (n, 28, 28), 1.0 = background, and ``label`` int32 (n,).
Stack Overflow (``stackoverflow.tar.bz2``): ``stackoverflow_{train,held_out,test}.h5`` with byte-string
features ``tokens`` (space-separated, already lower-cased and tokenised), ``type`` (``question`` /
``answer``), ``title``, ``tags``, ``creation_date`` and int ``score``.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fedshift.io import atomic_write

__all__ = ["extract_member", "iter_clients", "client_ids"]


def extract_member(archive: str | os.PathLike, name: str, dest_dir: str | os.PathLike) -> Path:
    """Extract the archive member whose base name is ``name`` into ``dest_dir`` (streamed; no path traversal).

    Returns
    -------
    Path
        ``dest_dir / name`` (kept if already there with the member's size).

    Raises
    ------
    FileNotFoundError
        The archive is missing.
    ValueError
        The archive has no such member.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise FileNotFoundError(f"archive not found: {archive}")
    target = Path(dest_dir) / name
    with tarfile.open(archive, "r:*") as tf:
        for member in tf:
            if member.isfile() and Path(member.name).name == name:
                if target.is_file() and target.stat().st_size == member.size:
                    return target
                with tf.extractfile(member) as src, atomic_write(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                return target
    raise ValueError(f"{archive}: no member named {name!r}")


def client_ids(h5_path: str | os.PathLike) -> list[str]:
    """Sorted client ids of a TFF HDF5 file.

    Raises
    ------
    ValueError
        The file has no ``examples`` group.
    """
    import h5py

    with h5py.File(h5_path, "r") as f:
        if "examples" not in f:
            raise ValueError(f"{h5_path}: no 'examples' group (not a TFF client-data file)")
        return sorted(f["examples"].keys())


def iter_clients(h5_path: str | os.PathLike, features: tuple[str, ...],
                 ids: list[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(client id, {feature: ndarray}) for every client (or ``ids``), in sorted id order.

    Raises
    ------
    ValueError
        A client lacks one of ``features`` (names the client and the features it has).
    """
    import h5py

    with h5py.File(h5_path, "r") as f:
        ex = f["examples"]
        for cid in ids if ids is not None else sorted(ex.keys()):
            g = ex[cid]
            missing = [k for k in features if k not in g]
            if missing:
                raise ValueError(f"{h5_path}: client {cid!r} lacks {missing}; has {sorted(g.keys())}")
            yield cid, {k: np.asarray(g[k][()]) for k in features}
