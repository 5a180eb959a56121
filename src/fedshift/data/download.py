"""Fetch raw dataset files from a local mirror or their canonical URLs, verified by sha256.

The registry (``config/datasets.yaml``, key ``datasets:``) lists every raw file with its
canonical URLs and its sha256. ``hash_of: raw`` hashes the file's bytes; ``hash_of: gunzip``
hashes the gzip-decompressed payload, because some mirrors recompress canonical ``.gz`` files
(the payload is canonical, the gzip container is not).

Some canonical files have no published sha256. Two weaker pins are accepted, each stated in the
registry: a hex *prefix* of at least 8 digits (torch.hub's convention: torchvision's weight files
carry the first 8 hex digits of their sha256 in their names, and ``check_hash`` verifies them), and
``sha256: unpinned`` together with an ``unpinned_reason`` (e.g. a CodaLab bundle that publishes only
its size). An unpinned file is fetched unverified, with a warning that gives its sha256, so the user
can pin it in the registry (which then verifies every later fetch).

A dataset is fetched all or nothing: each file lands in a temporary file inside the destination
folder, is verified, and is renamed into place; on any failure the files this call wrote for the
dataset are removed again, so a partial dataset never looks complete.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import os
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import requests
from tqdm import tqdm

from fedshift.io import atomic_write

__all__ = [
    "FileSpec",
    "DatasetSpec",
    "ChecksumError",
    "MissingSourceError",
    "file_sha256",
    "check_mirror",
    "fetch_dataset",
    "fetch_url",
]

log = logging.getLogger(__name__)

HASH_KINDS = ("raw", "gunzip")
#: The registry value of a file fetched without verification (needs ``unpinned_reason``).
UNPINNED = "unpinned"
_MIN_PREFIX = 8
_CHUNK = 1 << 20  # bytes per read/write
# HTTP statuses worth retrying on the same URL; any other 4xx moves on to the next URL.
_RETRY_STATUS = frozenset({408, 425, 429})


class ChecksumError(RuntimeError):
    """A fetched file's sha256 differs from the registry's."""


class MissingSourceError(FileNotFoundError):
    """A mirror folder, mirror file or every canonical URL of a file is unavailable."""


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


def _digest(fh: IO[bytes], hash_of: str, label: str) -> str:
    """Stream ``fh`` from its current position and return the hex sha256 of ``hash_of``."""
    if hash_of not in HASH_KINDS:
        raise ValueError(f"hash_of must be one of {HASH_KINDS}, not {hash_of!r}")
    sha = hashlib.sha256()
    try:
        reader: IO[bytes] = gzip.GzipFile(fileobj=fh, mode="rb") if hash_of == "gunzip" else fh
        while chunk := reader.read(_CHUNK):
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
        return _digest(fh, hash_of, str(path))


def check_mirror(mirror: str | os.PathLike, specs: Iterable[DatasetSpec]) -> None:
    """Check that the mirror holds every file of ``specs``, before any work starts.

    Parameters
    ----------
    mirror : str or os.PathLike
        The data mirror; dataset ``s`` lives in ``mirror / s.mirror_dir``.
    specs : iterable of DatasetSpec
        Datasets to check.

    Raises
    ------
    MissingSourceError
        The mirror, a dataset folder or any file is missing; the message names every missing
        folder and file. Hashes are not checked here (``fetch_dataset`` does that).
    """
    root = Path(mirror)
    if not root.is_dir():
        raise MissingSourceError(f"data mirror folder not found: {root}")
    missing: list[str] = []
    for spec in specs:
        folder = root / spec.mirror_dir
        if not folder.is_dir():
            missing.append(f"{spec.name}: mirror folder {folder}")
            continue
        missing += [
            f"{spec.name}: {folder / f.name}" for f in spec.files if not (folder / f.name).is_file()
        ]
    if missing:
        raise MissingSourceError("missing from the data mirror:\n  " + "\n  ".join(missing))


def fetch_dataset(
    spec: DatasetSpec,
    dest_dir: str | os.PathLike,
    mirror: str | os.PathLike | None = None,
    *,
    timeout: float = 60.0,
    retries: int = 3,
    progress: bool = True,
    backoff: float = 1.0,
) -> list[Path]:
    """Copy or download every file of a dataset into ``dest_dir``, verified by sha256.

    Parameters
    ----------
    spec : DatasetSpec
        The dataset (see :meth:`DatasetSpec.from_registry`).
    dest_dir : str or os.PathLike
        Destination folder, created if missing. Files keep their registry names.
    mirror : str or os.PathLike, optional
        Data mirror; when given, file ``f`` is copied from ``mirror / spec.mirror_dir / f.name``
        and no network is used. When None, the canonical URLs are tried in order.
    timeout : float
        Seconds for connecting and for each read of an HTTP response.
    retries : int
        Attempts per URL (at least 1). Connection errors, timeouts, 5xx and 408/425/429 are
        retried after ``backoff * 2**k`` seconds (k = 0, 1, ...); any other 4xx moves on to
        the next URL at once.
    progress : bool
        Show a ``tqdm`` byte progress bar per file.
    backoff : float
        Base of the exponential backoff, in seconds.

    Returns
    -------
    list of Path
        ``dest_dir / f.name`` for each file, in registry order.

    Raises
    ------
    MissingSourceError
        The mirror folder or a mirror file is missing (checked before anything is written), or
        every URL of a file failed; the message names the path or the URLs with their errors.
    ChecksumError
        A copied or downloaded file's sha256 differs from the registry; the message names the
        file, its source, and the expected and actual hashes.
    ValueError
        ``retries < 1``.

    Notes
    -----
    A file already in ``dest_dir`` with the right hash is kept as it is; one with a wrong hash is
    replaced. Each file is written to a temporary file in ``dest_dir``, verified, then renamed
    into place (:func:`fedshift.io.atomic_write`). If anything fails, the temporary file and
    every file this call already wrote for the dataset are removed.
    """
    if retries < 1:
        raise ValueError(f"retries must be at least 1, got {retries}")
    dest = Path(dest_dir)
    if mirror is not None:
        check_mirror(mirror, [spec])
    dest.mkdir(parents=True, exist_ok=True)
    paths = [dest / f.name for f in spec.files]
    written: list[Path] = []
    try:
        for fs, target in zip(spec.files, paths, strict=True):
            if target.is_file():
                if _matches(target, fs):
                    log.info("%s: %s already present and verified; kept", spec.name, target)
                    continue
                log.warning("%s: %s exists with the wrong sha256; replacing it", spec.name, target)
            if mirror is not None:
                source = _copy_file(Path(mirror) / spec.mirror_dir / fs.name, target, fs, progress)
            else:
                source = _download_file(fs, target, timeout, retries, backoff, progress)
            written.append(target)
            if fs.pinned:
                log.info("%s: %s <- %s (sha256 %s verified)", spec.name, target, source, fs.sha256)
    except BaseException:
        for path in written:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if written:
            log.error("%s: fetch failed; removed %s", spec.name, ", ".join(p.name for p in written))
        raise
    return paths


def _matches(path: Path, fs: FileSpec) -> bool:
    try:
        return fs.accepts(file_sha256(path, fs.hash_of))
    except ValueError:
        return False


def _verify(fh: IO[bytes], fs: FileSpec, source: str) -> None:
    """Hash the temporary file behind ``fh`` (fully written) and raise on a mismatch."""
    fh.flush()
    with open(os.dup(fh.fileno()), "rb") as reader:  # shares the fd's offset; writing is done
        reader.seek(0)
        try:
            actual = _digest(reader, fs.hash_of, fs.name)
        except ValueError as exc:
            actual = f"<unreadable: {exc}>"
    if not fs.pinned:
        log.warning("%s from %s is not verified (%s); its sha256 (%s) is %s: pin it in config/datasets.yaml",
                    fs.name, source, fs.unpinned_reason, fs.hash_of, actual)
    elif not fs.accepts(actual):
        raise ChecksumError(
            f"checksum mismatch for {fs.name} from {source}: expected sha256 "
            f"({fs.hash_of}) {fs.sha256}, got {actual}"
        )


def _copy_file(src: Path, target: Path, fs: FileSpec, progress: bool) -> str:
    if not src.is_file():
        raise MissingSourceError(f"{fs.name}: not found in the data mirror: {src}")
    with (
        open(src, "rb") as fin,
        tqdm(
            total=src.stat().st_size,
            unit="B",
            unit_scale=True,
            desc=fs.name,
            disable=not progress,
            leave=False,
        ) as bar,
        atomic_write(target, "wb") as fout,
    ):
        while chunk := fin.read(_CHUNK):
            fout.write(chunk)
            bar.update(len(chunk))
        _verify(fout, fs, str(src))
    return str(src)


def _download_file(
    fs: FileSpec, target: Path, timeout: float, retries: int, backoff: float, progress: bool
) -> str:
    if not fs.urls:
        raise MissingSourceError(f"{fs.name}: no mirror given and the registry lists no URLs")
    errors: list[str] = []
    with (
        tqdm(unit="B", unit_scale=True, desc=fs.name, disable=not progress, leave=False) as bar,
        atomic_write(target, "wb") as fout,
    ):
        for url in fs.urls:
            log.info("%s: downloading %s", fs.name, url)
            error = fetch_url(url, fout, bar, timeout, retries, backoff)
            if error is None:
                _verify(fout, fs, url)
                break
            log.warning("%s: giving up on %s (%s)", fs.name, url, error)
            errors.append(f"{url}: {error}")
        else:
            raise MissingSourceError(f"{fs.name}: every URL failed:\n  " + "\n  ".join(errors))
    return url


def fetch_url(
    url: str, fout: IO[bytes], bar: tqdm, timeout: float, retries: int, backoff: float
) -> str | None:
    """Stream ``url`` into ``fout``, retrying transient failures with exponential back-off.

    Parameters
    ----------
    url : str
    fout : binary file
        Rewound and truncated before every attempt.
    bar : tqdm
        Progress bar, reset to the response's Content-Length.
    timeout : float
        Seconds per connection / read (``requests``).
    retries : int
        Attempts on this URL (network errors, 5xx, 408/425/429); any other 4xx gives up at once.
    backoff : float
        Seconds before the second attempt, doubling after each failure.

    Returns
    -------
    str or None
        None when the whole body was written, else the last error (the caller tries its next URL).
    """
    error = "not tried"
    for attempt in range(retries):
        if attempt:
            delay = backoff * 2 ** (attempt - 1)
            log.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.1f s",
                url,
                attempt,
                retries,
                error,
                delay,
            )
            time.sleep(delay)
        fout.seek(0)
        fout.truncate()
        try:
            with requests.get(url, stream=True, timeout=timeout) as resp:
                status = resp.status_code
                if 400 <= status < 500 and status not in _RETRY_STATUS:
                    return f"HTTP {status}"  # permanent for this URL: try the next one
                resp.raise_for_status()
                size = resp.headers.get("Content-Length")
                bar.reset(total=int(size) if size and size.isdigit() else None)
                for chunk in resp.iter_content(_CHUNK):
                    fout.write(chunk)
                    bar.update(len(chunk))
            return None
        except requests.RequestException as exc:
            error = f"{type(exc).__name__}: {exc}"
    return error
