"""The raw files of the data registry and their sha256 digests: what :mod:`fedshift.data.download` fetches and verifies.

The registry (``config/datasets.yaml``, key ``datasets:``) lists every raw file with its
canonical URLs and its sha256. ``hash_of: raw`` hashes the file's bytes; ``hash_of: gunzip``
hashes the gzip-decompressed payload, because some mirrors recompress canonical ``.gz`` files
(the payload is canonical, the gzip container is not).

Some canonical files have no published sha256. Two weaker pins are accepted, each stated in the
registry: a hex *prefix* of at least 8 digits (torch.hub's convention: torchvision's weight files
carry the first 8 hex digits of their sha256 in their names, and ``check_hash`` verifies them), and
``sha256: unpinned`` together with an ``unpinned_reason`` (e.g. a CodaLab bundle that publishes only
its size). An unpinned file is trusted on first use: the sha256 it had is recorded beside it, in
``<file>.sha256`` (``sha256sum`` format, :func:`record_path`, :func:`recorded_sha256`).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = ["HASH_KINDS", "UNPINNED", "RECORD_SUFFIX", "CHUNK", "FileSpec", "DatasetSpec", "stream_sha256",
           "file_sha256", "recorded_sha256", "record_path"]

#: What a registry sha256 may cover: the file's bytes, or its gzip-decompressed content.
HASH_KINDS = ("raw", "gunzip")
#: The registry value of a file fetched without verification (needs ``unpinned_reason``).
UNPINNED = "unpinned"
_MIN_PREFIX = 8
#: Suffix of the trust-on-first-use record written beside an unpinned file.
RECORD_SUFFIX = ".sha256"
#: Bytes per read and write of a raw file.
CHUNK = 1 << 20


@dataclass(frozen=True)
class FileSpec:
    """One raw file of a dataset, as listed in the registry.

    Attributes
    ----------
    name : str
        File name, both in the mirror folder and in the destination folder.
    urls : tuple of str
        Canonical download URLs, tried in order.
    sha256 : str
        Expected lower-case hex sha256: all 64 digits, a prefix of at least 8 (torch.hub's
        convention), or ``"unpinned"`` (not verified; see the module docstring).
    hash_of : {"raw", "gunzip"}
        What ``sha256`` covers: the file's bytes, or its gzip-decompressed content.
    unpinned_reason : str
        Why the file has no sha256 (required when ``sha256 == "unpinned"``).
    """

    name: str
    urls: tuple[str, ...]
    sha256: str
    hash_of: str = "raw"
    unpinned_reason: str = ""

    @property
    def pinned(self) -> bool:
        """Whether fetching verifies the file (a full sha256 or a prefix)."""
        return self.sha256 != UNPINNED

    def accepts(self, digest: str) -> bool:
        """Whether a file with sha256 ``digest`` is this file (always True when unpinned)."""
        return not self.pinned or digest.startswith(self.sha256)


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset's registry entry: provenance metadata and its raw files.

    Attributes
    ----------
    name : str
        Registry key (e.g. ``"adult"``).
    title, homepage, licence, citation : str
        Provenance metadata, as given in the registry.
    mirror_dir : str
        The dataset's folder under the data mirror.
    files : tuple of FileSpec
        The raw files, in registry order.
    """

    name: str
    title: str
    homepage: str
    licence: str
    citation: str
    mirror_dir: str
    files: tuple[FileSpec, ...]

    @classmethod
    def from_registry(cls, name: str, registry: Mapping[str, Any]) -> DatasetSpec:
        """Build the spec of dataset ``name`` from the parsed registry.

        Parameters
        ----------
        name : str
            Dataset key.
        registry : Mapping
            The ``datasets:`` mapping of ``config/datasets.yaml`` (already parsed by YAML).

        Returns
        -------
        DatasetSpec

        Raises
        ------
        KeyError
            ``name`` is not in the registry; the message lists the known names.
        ValueError
            The entry lacks a field, has no files, or a file has an invalid ``sha256`` or
            ``hash_of``.
        """
        if name not in registry:
            raise KeyError(f"unknown dataset {name!r}; known: {', '.join(sorted(registry))}")
        entry = registry[name]
        try:
            files = tuple(
                FileSpec(
                    name=str(f["name"]),
                    urls=tuple(str(u) for u in f.get("urls", ())),
                    sha256=str(f["sha256"]).lower(),
                    hash_of=str(f.get("hash_of", "raw")),
                    unpinned_reason=str(f.get("unpinned_reason", "")),
                )
                for f in entry["files"]
            )
            spec = cls(
                name=name,
                title=str(entry["title"]),
                homepage=str(entry["homepage"]),
                licence=str(entry["licence"]),
                citation=str(entry["citation"]),
                mirror_dir=str(entry["mirror_dir"]),
                files=files,
            )
        except KeyError as exc:
            raise ValueError(f"registry entry {name!r} lacks field {exc.args[0]!r}") from None
        if not files:
            raise ValueError(f"registry entry {name!r} lists no files")
        for f in files:
            if f.hash_of not in HASH_KINDS:
                raise ValueError(
                    f"{name}/{f.name}: hash_of must be one of {HASH_KINDS}, not {f.hash_of!r}"
                )
            if f.sha256 == UNPINNED:
                if not f.unpinned_reason.strip():
                    raise ValueError(f"{name}/{f.name}: sha256 {UNPINNED!r} needs an unpinned_reason")
            elif not _MIN_PREFIX <= len(f.sha256) <= 64 or any(c not in "0123456789abcdef" for c in f.sha256):
                raise ValueError(f"{name}/{f.name}: sha256 must be 64 hex digits, a hex prefix of at least "
                                 f"{_MIN_PREFIX}, or {UNPINNED!r} with an unpinned_reason; got {f.sha256!r}")
        return spec


def stream_sha256(fh: IO[bytes], hash_of: str, label: str) -> str:
    """The hex sha256 of what ``hash_of`` names in ``fh``, read from its current position in chunks of :data:`CHUNK`.

    Parameters
    ----------
    fh : binary file
        Read to its end.
    hash_of : {"raw", "gunzip"}
        The bytes, or their gzip-decompressed payload.
    label : str
        Names the stream in an error.

    Returns
    -------
    str
        The digest, as :func:`file_sha256` gives it for a file.

    Raises
    ------
    ValueError
        For an unknown ``hash_of``, or ``"gunzip"`` on a stream that is not gzip.
    """
    if hash_of not in HASH_KINDS:
        raise ValueError(f"hash_of must be one of {HASH_KINDS}, not {hash_of!r}")
    sha = hashlib.sha256()
    try:
        reader: IO[bytes] = gzip.GzipFile(fileobj=fh, mode="rb") if hash_of == "gunzip" else fh
        while chunk := reader.read(CHUNK):
            sha.update(chunk)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValueError(f"{label}: not a valid gzip stream ({exc})") from exc
    return sha.hexdigest()


def file_sha256(path: str | os.PathLike, hash_of: str = "raw") -> str:
    """Return the sha256 of a file's bytes or of its gzip-decompressed content.

    Parameters
    ----------
    path : str or os.PathLike
        File to hash; read in 1 MiB chunks, never whole.
    hash_of : {"raw", "gunzip"}
        ``"raw"`` hashes the bytes; ``"gunzip"`` hashes the decompressed payload (all gzip
        members, as :mod:`gzip` reads them).

    Returns
    -------
    str
        Lower-case hex digest, 64 characters.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        ``hash_of`` is unknown, or ``hash_of="gunzip"`` and the file is not valid gzip.
    """
    with open(path, "rb") as fh:
        return stream_sha256(fh, hash_of, str(path))


def recorded_sha256(path: str | os.PathLike) -> str | None:
    """Return the sha256 recorded beside an unpinned file by an earlier fetch (trust on first use).

    Parameters
    ----------
    path : str or os.PathLike
        The raw file; its record is ``<path>.sha256`` (``sha256sum`` format: the digest, two spaces, the
        file name; the digest is of what the registry's ``hash_of`` names).

    Returns
    -------
    str or None
        The recorded lower-case hex digest, or None when there is no record.

    Raises
    ------
    ValueError
        The record exists but does not start with 64 hex digits; the message names it.
    """
    record = record_path(path)
    if not record.is_file():
        return None
    words = record.read_text(encoding="utf-8").split()
    digest = words[0].lower() if words else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{record}: not a sha256 record (64 hex digits, then the file name); fix or delete it")
    return digest


def record_path(path: str | os.PathLike) -> Path:
    """The trust-on-first-use record of raw file ``path``: ``<path>.sha256`` (:data:`RECORD_SUFFIX`)."""
    return Path(f"{path}{RECORD_SUFFIX}")
