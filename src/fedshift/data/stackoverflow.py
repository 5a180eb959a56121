"""TFF Stack Overflow: users as clients, questions and answers as two domains (*data partition*).

Ro et al. (2021) §5.1 and Table 3 (statistics per split). Domain ids as FedJAX
``fedjax/datasets/stackoverflow.py`` (spec §2.6): 0 = question, 1 = answer, from the ``type`` feature.
Vocabulary: the 10,000 most frequent words of TFF's word-count file (``stackoverflow.word_count.tar.bz2``,
member ``stackoverflow.word_count``, one ``word count`` pair a line, most frequent first).
The archives are large (the h5 files hold 342K train clients and 135M sentences), so a split is read
client by client and may be capped (``max_clients``, ``max_sentences_per_client``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedshift.data.tff_h5 import client_ids, extract_member, iter_clients
from fedshift.data.text import encode

__all__ = ["ARCHIVE", "WORD_COUNT_ARCHIVE", "DOMAIN_NAMES", "SPLIT_FILES", "read_word_counts", "load_split",
           "split_statistics", "h5_path"]

ARCHIVE = "stackoverflow.tar.bz2"
WORD_COUNT_ARCHIVE = "stackoverflow.word_count.tar.bz2"
DOMAIN_NAMES = ["question", "answer"]
SPLIT_FILES = {"train": "stackoverflow_train.h5", "held_out": "stackoverflow_held_out.h5",
               "test": "stackoverflow_test.h5"}


def _str(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes | np.bytes_) else str(v)


def read_word_counts(path: str | os.PathLike, size: int) -> list[str]:
    """The ``size`` most frequent words of a word-count file (``word count`` per line, any whitespace).

    Raises
    ------
    ValueError
        A malformed line, or fewer than ``size`` words.
    """
    pairs = []
    with open(path, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(f"{path} line {no}: expected 'word count', got {line.strip()!r}")
            pairs.append((parts[0], int(parts[1])))
    if len(pairs) < size:
        raise ValueError(f"{path}: {len(pairs)} words, fewer than the vocabulary size {size}")
    return [w for w, _ in sorted(pairs, key=lambda p: (-p[1], p[0]))[:size]]


def h5_path(raw_dir: str | os.PathLike, work_dir: str | os.PathLike, split: str) -> Path:
    """The extracted h5 file of one split (``train``, ``held_out``, ``test``).

    Raises
    ------
    ValueError
        An unknown split.
    """
    if split not in SPLIT_FILES:
        raise ValueError(f"unknown Stack Overflow split {split!r}; known: {sorted(SPLIT_FILES)}")
    return extract_member(Path(raw_dir) / ARCHIVE, SPLIT_FILES[split], work_dir)


def load_split(path: str | os.PathLike, vocab: Sequence[str], max_len: int, *, max_clients: int | None = None,
               max_sentences_per_client: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Encode one split's sentences per client (:func:`fedshift.data.text.encode`).

    Parameters
    ----------
    path : path
        A ``stackoverflow_*.h5`` file.
    vocab : sequence of str
        The words (ids from 4 on).
    max_len : int
        Words per sentence kept (FedJAX: 20 for training, 30 for evaluation).
    max_clients : int, optional
        A uniform sample (without replacement, ``default_rng(seed)``) of this many clients.
    max_sentences_per_client : int, optional
        Each client's first sentences only.

    Returns
    -------
    dict
        ``tokens`` int64 (N, max_len + 2), ``domain`` int64 (N,), ``offsets`` (M + 1,), ``client_ids``.

    Raises
    ------
    ValueError
        A ``type`` other than ``question`` / ``answer``.
    """
    ids = client_ids(path)
    if max_clients is not None and max_clients < len(ids):
        pick = np.random.default_rng(seed).choice(len(ids), size=max_clients, replace=False)
        ids = [ids[i] for i in sorted(pick)]
    rows, doms, sizes, kept = [], [], [], []
    for cid, f in iter_clients(path, ("tokens", "type"), ids):
        toks, types = f["tokens"], f["type"]
        if max_sentences_per_client is not None:
            toks, types = toks[:max_sentences_per_client], types[:max_sentences_per_client]
        dom = []
        for t in types:
            name = _str(t)
            if name not in DOMAIN_NAMES:
                raise ValueError(f"{path}: client {cid}: type {name!r} is neither question nor answer")
            dom.append(DOMAIN_NAMES.index(name))
        if not dom:
            continue
        rows.append(encode([_str(s).split() for s in toks], vocab, max_len))
        doms.append(np.asarray(dom, dtype=np.int64))
        sizes.append(len(dom))
        kept.append(cid)
    return {"tokens": np.concatenate(rows), "domain": np.concatenate(doms),
            "offsets": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), "client_ids": kept}


def split_statistics(path: str | os.PathLike) -> dict[str, int]:
    """Clients, sentences, answers and questions of one split (Ro et al. 2021, Table 3)."""
    out = {"clients": 0, "sentences": 0, "answers": 0, "questions": 0}
    for _, f in iter_clients(path, ("type",)):
        types = [_str(t) for t in f["type"]]
        out["clients"] += 1
        out["sentences"] += len(types)
        out["answers"] += types.count("answer")
        out["questions"] += types.count("question")
    return out
