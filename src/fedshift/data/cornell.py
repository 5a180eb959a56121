"""Cornell movie-dialogs corpus: the *conversation* domain of Mohri et al. (2019) §5.3, Table 3.

Danescu-Niculescu-Mizil & Lee (2011).

Canonical archive ``cornell_movie_dialogs_corpus.zip`` (www.cs.cornell.edu/~cristian); its member
``cornell movie-dialogs corpus/movie_lines.txt`` holds one utterance per line, ISO-8859-1, fields
``lineID +++$+++ characterID +++$+++ movieID +++$+++ character name +++$+++ text``. The paper gives no
split; we split by movie (so no film is in two splits): movies in sorted id order, every 10th from the
9th to validation, from the 10th to test, the rest to training [ours].
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from fedshift.data.text import normalize

__all__ = ["ARCHIVE", "SEPARATOR", "parse_movie_lines", "load_cornell"]

ARCHIVE = "cornell_movie_dialogs_corpus.zip"
SEPARATOR = " +++$+++ "


def parse_movie_lines(text: str) -> list[tuple[str, str]]:
    """(movie id, utterance) of every line of ``movie_lines.txt``.

    Raises
    ------
    ValueError
        A non-empty line without the five ``+++$+++``-separated fields (names the line number).
    """
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(SEPARATOR)
        if len(fields) != 5:
            raise ValueError(f"movie_lines.txt line {no}: expected 5 fields separated by {SEPARATOR.strip()!r}, "
                             f"got {len(fields)}")
        out.append((fields[2].strip(), fields[4]))
    return out


def load_cornell(raw_dir: str | os.PathLike) -> dict[str, list[list[str]]]:
    """Normalised utterances (:func:`fedshift.data.text.normalize`) split by movie into train / valid / test.

    Raises
    ------
    FileNotFoundError
        The archive is missing.
    ValueError
        The archive has no ``movie_lines.txt`` member, or a malformed line.
    """
    path = Path(raw_dir) / ARCHIVE
    if not path.is_file():
        raise FileNotFoundError(f"Cornell movie-dialogs archive not found: {path}")
    with zipfile.ZipFile(path) as zf:
        members = [n for n in zf.namelist() if n.endswith("movie_lines.txt") and "__MACOSX" not in n]
        if not members:
            raise ValueError(f"{path}: no movie_lines.txt member")
        text = zf.read(members[0]).decode("iso-8859-1")
    lines = parse_movie_lines(text)
    movies = sorted({m for m, _ in lines}, key=lambda m: (len(m), m))
    split_of = {m: ("valid" if i % 10 == 8 else "test" if i % 10 == 9 else "train") for i, m in enumerate(movies)}
    out: dict[str, list[list[str]]] = {"train": [], "valid": [], "test": []}
    for movie, utterance in lines:
        words = normalize(utterance, unk_markers=())
        if words:
            out[split_of[movie]].append(words)
    return out
