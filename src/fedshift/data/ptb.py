"""Penn Treebank (Mikolov's split): the *document* domain of Mohri et al. (2019) §5.3, Table 3.

Files ``ptb.{train,valid,test}.txt``.

One sentence per line, lower-case, numbers as ``N``, rare words as ``<unk>`` (mirror ``ptb/SOURCE.md``:
929,589 / 73,760 / 82,430 tokens with one ``<eos>`` per line, 10,000 types).
"""

from __future__ import annotations

import os
from pathlib import Path

from fedshift.data.text import normalize

__all__ = ["SPLITS", "load_ptb"]

SPLITS = ("train", "valid", "test")


def load_ptb(raw_dir: str | os.PathLike) -> dict[str, list[list[str]]]:
    """Read the three splits as normalised sentences (:func:`fedshift.data.text.normalize`).

    Returns
    -------
    dict
        ``{"train": [[word, ...], ...], "valid": ..., "test": ...}``; empty lines are dropped.

    Raises
    ------
    FileNotFoundError
        A split file is missing (names the file).
    """
    out = {}
    for split in SPLITS:
        path = Path(raw_dir) / f"ptb.{split}.txt"
        if not path.is_file():
            raise FileNotFoundError(f"PTB split file not found: {path}")
        with open(path, encoding="utf-8") as fh:
            out[split] = [s for s in (normalize(line) for line in fh) if s]
    return out
