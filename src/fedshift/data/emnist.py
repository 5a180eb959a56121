"""Federated EMNIST-62 (TFF): writers as clients, high-school vs census writers as the two domains.

Ro et al. (2021), App. B: the NIST writers come from two sources (NIST SD19 user's guide): high school
(writer ids 2100–2599) and census field (all others), a *client partition*. Domain ids as FedJAX
``fedjax/datasets/emnist.py`` (spec §2.6): 0 = high school, 1 = census; the writer id is the number in the
client id ``f<writer>_<nn>``. Inputs are 1 − pixels (FedJAX), so that strokes are 1 and background 0.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from fedshift.data.tff_h5 import extract_member, iter_clients

__all__ = ["ARCHIVE", "DOMAIN_NAMES", "writer_domain", "load_emnist_split", "load_emnist"]

ARCHIVE = "fed_emnist.tar.bz2"
DOMAIN_NAMES = ["high_school", "census"]
_ID = re.compile(r"^f(\d{4})_\d+$")


def writer_domain(client_id: str) -> int:
    """0 (high school: NIST writer 2100–2599) or 1 (census) of a TFF EMNIST client id ``f2143_07``.

    Raises
    ------
    ValueError
        A client id that is not ``f<4 digits>_<digits>``.
    """
    m = _ID.match(client_id)
    if m is None:
        raise ValueError(f"not a federated-EMNIST client id: {client_id!r} (expected f<writer>_<nn>)")
    return 0 if 2100 <= int(m.group(1)) <= 2599 else 1


def load_emnist_split(h5_path: str | os.PathLike, max_clients: int | None = None) -> dict[str, Any]:
    """One split of federated EMNIST as contiguous arrays.

    Parameters
    ----------
    h5_path : path
        ``fed_emnist_train.h5`` or ``fed_emnist_test.h5``.
    max_clients : int, optional
        Keep only the first clients in sorted id order (for small runs).

    Returns
    -------
    dict
        ``x`` float32 (N, 28, 28) = 1 − pixels, ``y`` int64 (N,) in 0..61, ``domain`` int64 (N,),
        ``offsets`` int64 (M + 1,), ``client_ids`` list of str.

    Raises
    ------
    ValueError
        A label outside 0..61, pixels not of shape (n, 28, 28), or a malformed client id.
    """
    xs, ys, doms, ids, sizes = [], [], [], [], []
    for k, (cid, f) in enumerate(iter_clients(h5_path, ("pixels", "label"))):
        if max_clients is not None and k >= max_clients:
            break
        px, lab = f["pixels"].astype(np.float32), f["label"].astype(np.int64)
        if px.ndim != 3 or px.shape[1:] != (28, 28) or len(lab) != len(px):
            raise ValueError(f"{h5_path}: client {cid}: pixels {px.shape} / labels {lab.shape}")
        if len(lab) and (lab.min() < 0 or lab.max() > 61):
            raise ValueError(f"{h5_path}: client {cid}: labels outside 0..61")
        xs.append(1.0 - px)
        ys.append(lab)
        doms.append(np.full(len(lab), writer_domain(cid), dtype=np.int64))
        ids.append(cid)
        sizes.append(len(lab))
    return {"x": np.concatenate(xs), "y": np.concatenate(ys), "domain": np.concatenate(doms),
            "offsets": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), "client_ids": ids}


def load_emnist(raw_dir: str | os.PathLike, work_dir: str | os.PathLike,
                max_clients: int | None = None) -> dict[str, dict[str, Any]]:
    """Both splits from the TFF archive ``raw_dir/fed_emnist.tar.bz2`` (h5 members extracted to ``work_dir``).

    Returns
    -------
    dict
        ``{"train": load_emnist_split(...), "test": ...}``; TFF splits every writer's examples between train
        and test, so the clients (and their domains) are the same in both.
    """
    archive = Path(raw_dir) / ARCHIVE
    return {split: load_emnist_split(extract_member(archive, f"fed_emnist_{split}.h5", work_dir), max_clients)
            for split in ("train", "test")}
