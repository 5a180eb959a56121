"""Text encoding of the language-model tasks: normalisation, vocabulary and token ids.

Token ids: PAD = 0, BOS = 1, EOS = 2, UNK = 3 (out of vocabulary), then the V most frequent words, so a
10k vocabulary gives 10,004 outputs as FedJAX's Stack Overflow tokenizer (PAD, BOS, EOS, one OOV bucket;
papers spec §2.6; FedJAX orders them differently, which changes nothing).

A sentence of at most ``max_len`` words is stored as ``[BOS, w_1..w_k, EOS, PAD...]`` of length
``max_len + 2``; inputs are its first ``max_len + 1`` ids, targets the last ``max_len + 1`` (next word).
The language models and their loss and metrics are :mod:`fedshift.lm` (data imports no model).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["PAD", "BOS", "EOS", "UNK", "SPECIAL", "normalize", "build_vocab", "encode"]

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL = 4
_PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")


def normalize(line: str, unk_markers: Sequence[str] = ("<unk>",)) -> list[str]:
    """Case-fold, remove punctuation, split on whitespace (Mohri et al. 2019, §5.3).

    Tokens in ``unk_markers`` (PTB's ``<unk>``) are kept as ``"<unk>"`` so that :func:`encode` maps them
    to UNK instead of a word "unk".
    """
    out = []
    for tok in line.lower().split():
        if tok in unk_markers:
            out.append("<unk>")
            continue
        tok = _PUNCT.sub("", tok)
        if tok:
            out.append(tok)
    return out


def build_vocab(sentences: Iterable[Sequence[str]], size: int) -> list[str]:
    """The ``size`` most frequent words (ties by word), never ``"<unk>"``.

    Raises
    ------
    ValueError
        If ``size < 1``.
    """
    if size < 1:
        raise ValueError(f"vocabulary size must be >= 1, got {size}")
    counts = Counter(w for s in sentences for w in s)
    counts.pop("<unk>", None)
    return [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]


def encode(sentences: Sequence[Sequence[str]], vocab: Sequence[str], max_len: int) -> np.ndarray:
    """Sentences to ``[BOS, ids.., EOS, PAD..]`` rows, truncated to ``max_len`` words.

    Returns
    -------
    ndarray of int64, shape (n, max_len + 2)

    Raises
    ------
    ValueError
        If ``max_len < 1``.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    index = {w: i + SPECIAL for i, w in enumerate(vocab)}
    out = np.full((len(sentences), max_len + 2), PAD, dtype=np.int64)
    for r, s in enumerate(sentences):
        ids = [index.get(w, UNK) for w in s[:max_len]]
        out[r, 0] = BOS
        out[r, 1:len(ids) + 1] = ids
        out[r, len(ids) + 1] = EOS
    return out
