"""Fetch raw dataset files from a local mirror or their canonical URLs, verified by sha256.

The registry's files, their pins and the sha256 records beside unpinned ones are :mod:`fedshift.data.sources`.
An unpinned file is fetched unverified, with a warning that gives its sha256, so the user can pin it in the
registry (which then verifies every later fetch). Until then it is trusted on first use: the sha256 it had is
recorded beside it, in ``<file>.sha256``, and a later fetch that gets other bytes fails, naming the record to delete
to accept them. The record also says what every result was computed from.

A fetched file that starts like an HTML page (``<!doctype html`` or ``<html``) is refused unless its
pinned sha256 accepts it: the usual answer of a file host that wants a click first, such as Google Drive's
confirmation page for large files. For a download it counts as that URL's failure (the next URL is tried).

A dataset is fetched all or nothing: each file lands in a temporary file inside the destination
folder, is verified, and is renamed into place; on any failure the files this call wrote for the
dataset are removed again, so a partial dataset never looks complete.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import requests
from tqdm import tqdm

from fedshift.data.sources import (
    CHUNK,
    DatasetSpec,
    FileSpec,
    file_sha256,
    record_path,
    recorded_sha256,
    stream_sha256,
)
from fedshift.io import atomic_write

__all__ = [
    "ChecksumError",
    "MissingSourceError",
    "check_mirror",
    "fetch_dataset",
    "fetch_standin",
    "STANDIN_MARKER",
    "standin_datasets",
]

log = logging.getLogger(__name__)

_HTML_STARTS = (b"<!doctype html", b"<html")
#: File beside the raw files of a dataset filled from a stand-in (:func:`fetch_standin`; the rehearsal only).
STANDIN_MARKER = "STANDIN"
# HTTP statuses worth retrying on the same URL; any other 4xx moves on to the next URL.
_RETRY_STATUS = frozenset({408, 425, 429})


class ChecksumError(RuntimeError):
    """A fetched file's sha256 differs from the registry's."""


class MissingSourceError(FileNotFoundError):
    """A mirror folder, mirror file or every canonical URL of a file is unavailable."""


class _HTMLPageError(MissingSourceError):
    """A source answered with an HTML page instead of the file (for a download: try the next URL)."""


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


def _write_record(target: Path, digest: str) -> Path:
    record = record_path(target)
    with atomic_write(record) as fh:
        fh.write(f"{digest}  {target.name}\n")
    return record


def _looks_like_html(head: bytes) -> bool:
    """Whether a file's first bytes are those of an HTML page."""
    return head.lstrip().lower().startswith(_HTML_STARTS)


# Over 80 lines: its signature and NumPy docstring state each source and outcome (60 lines); the body is 51.
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
        The dataset (see :meth:`fedshift.data.sources.DatasetSpec.from_registry`).
    dest_dir : str or os.PathLike
        Destination folder, created if missing. Files keep their registry names.
    mirror : str or os.PathLike, optional
        Data mirror; when given, file ``f`` is copied from ``mirror / spec.mirror_dir / f.name``
        and no network is used. When None, the canonical URLs are tried in order.
    timeout : float
        Seconds for connecting and for each read of an HTTP response.
    retries : int
        Attempts per URL (at least 1). Connection errors, timeouts, 5xx and 408/425/429 are
        retried after ``backoff * 2**k`` seconds (k = 0, 1, ...); any other 4xx, and an HTML page
        instead of the file, moves on to the next URL at once.
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
        The mirror folder or a mirror file is missing (checked before anything is written), the mirror
        file is an HTML page, or every URL of a file failed (an HTML page counts as a failure); the
        message names the path or the URLs with their errors.
    ChecksumError
        A copied or downloaded file's sha256 differs from the registry; or, for an unpinned file, from
        the sha256 recorded in ``<file>.sha256`` by an earlier fetch (the message names the record to
        delete to accept the new bytes). The message names the file, its source, and both hashes.
    ValueError
        ``retries < 1``, or an unpinned file's record is malformed.

    Notes
    -----
    A file already in ``dest_dir`` that verifies is kept as it is; any other is replaced. An
    unpinned file verifies against its record; one present without a record (and not an HTML page) is
    kept and its sha256 recorded. Each file is written to a temporary file in ``dest_dir``,
    verified, then renamed into place (:func:`fedshift.io.atomic_write`); an unpinned one then gets
    its record ``<file>.sha256``, unless it has one. If anything fails, the temporary file and every
    file (and record) this call already wrote for the dataset are removed; earlier records are kept, and so
    is a record written for a file that was already present (the file stays too).
    """
    if retries < 1:
        raise ValueError(f"retries must be at least 1, got {retries}")
    dest = Path(dest_dir)
    if mirror is not None:
        check_mirror(mirror, [spec])
    dest.mkdir(parents=True, exist_ok=True)
    paths = [dest / f.name for f in spec.files]
    if (dest / STANDIN_MARKER).is_file():  # a rehearsal's stand-in is never kept, nor trusted on first use
        for path in [*paths, *(record_path(p) for p in paths), dest / STANDIN_MARKER]:
            path.unlink(missing_ok=True)
        log.warning("%s: removed the rehearsal's stand-in files from %s before fetching the real ones", spec.name,
                    dest)
    written: list[Path] = []
    try:
        for fs, target in zip(spec.files, paths, strict=True):
            recorded = None if fs.pinned else recorded_sha256(target)
            if target.is_file():
                digest = _present_digest(target, fs, recorded)
                if digest is not None and (fs.pinned or recorded is not None):
                    log.info("%s: %s already present and verified; kept", spec.name, target)
                    continue
                if digest is not None:  # unpinned, from before records were kept: trusted now
                    record = _write_record(target, digest)
                    log.warning("%s: %s already present, unverified (%s); kept, and its sha256 (%s) %s "
                                "recorded in %s", spec.name, target, fs.unpinned_reason, fs.hash_of, digest, record)
                    continue
                log.warning("%s: %s exists but does not verify; replacing it", spec.name, target)
            if mirror is not None:
                source, digest = _copy_file(Path(mirror) / spec.mirror_dir / fs.name, target, fs, recorded,
                                            progress)
            else:
                source, digest = _download_file(fs, target, recorded, timeout, retries, backoff, progress)
            written.append(target)
            if fs.pinned:
                log.info("%s: %s <- %s (sha256 %s verified)", spec.name, target, source, fs.sha256)
            elif recorded is not None:
                log.info("%s: %s <- %s (sha256 %s, as recorded by an earlier fetch)", spec.name, target, source,
                         digest)
            else:
                record = _write_record(target, digest)
                written.append(record)
                log.warning("%s from %s is not verified (%s); its sha256 (%s) is %s, recorded in %s: pin it in "
                            "config/datasets.yaml", fs.name, source, fs.unpinned_reason, fs.hash_of, digest, record)
    except BaseException:
        for path in written:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if written:
            log.error("%s: fetch failed; removed %s", spec.name, ", ".join(p.name for p in written))
        raise
    return paths


def fetch_standin(spec: DatasetSpec, dest_dir: str | os.PathLike, standin_dir: str | os.PathLike) -> list[Path]:
    """Copy a dataset's *stand-in* files (the rehearsal's generated data) into ``dest_dir``, without verification.

    The registry's checksum check is skipped here, and only here, explicitly: the rehearsal
    (``config/rehearsal.yaml``, key ``standin``) names the datasets it replaces by
    :mod:`fedshift.data.standin` files. No trust-on-first-use record is written, and ``dest_dir / STANDIN``
    marks the folder, so that a later real fetch (:func:`fetch_dataset`) removes the stand-in instead of keeping
    it, and :func:`standin_datasets` (``run.json``) records it.

    Parameters
    ----------
    spec : DatasetSpec
        The real dataset's registry entry (file names; its checksums are *not* checked).
    dest_dir : path
        ``data/raw/<dataset>``.
    standin_dir : path
        Folder holding the generated files under the registry's names (``data/standin/<dataset>``).

    Returns
    -------
    list of Path
        ``dest_dir / f.name`` per registry file, in order.

    Raises
    ------
    MissingSourceError
        A stand-in file is missing.
    ChecksumError
        A stand-in file passes the real file's pinned checksum (it would be mistaken for the real data).
    """
    dest, src_dir = Path(dest_dir), Path(standin_dir)
    missing = [f.name for f in spec.files if not (src_dir / f.name).is_file()]
    if missing:
        raise MissingSourceError(f"{spec.name}: stand-in files missing from {src_dir}: {missing}")
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for fs in spec.files:
        src, target = src_dir / fs.name, dest / fs.name
        digest = file_sha256(src, "raw")
        if fs.pinned and fs.accepts(digest):
            raise ChecksumError(f"{spec.name}: stand-in {src} passes the real checksum {fs.sha256}; refusing it")
        with open(src, "rb") as fin, atomic_write(target, "wb") as fout:
            while chunk := fin.read(CHUNK):
                fout.write(chunk)
        record_path(target).unlink(missing_ok=True)
        out.append(target)
        log.warning("%s: %s <- STAND-IN %s (sha256 %s; checksum not verified: rehearsal only, not the real data)",
                    spec.name, target, src, digest)
    (dest / STANDIN_MARKER).write_text(
        f"{spec.name}: stand-in data generated by fedshift.data.standin for the rehearsal; not the real dataset.\n",
        encoding="utf-8")
    return out


def standin_datasets(raw_root: str | os.PathLike = "data/raw") -> list[str]:
    """Datasets under ``raw_root`` whose raw files are stand-ins (their folder holds ``STANDIN``), sorted."""
    root = Path(raw_root)
    return sorted(p.parent.name for p in root.glob(f"*/{STANDIN_MARKER}")) if root.is_dir() else []


def _present_digest(path: Path, fs: FileSpec, recorded: str | None) -> str | None:
    """The digest of a file already in place when it may be kept, else None.

    Pinned: it verifies; unpinned: it matches its record or, without one, is no HTML page.
    """
    try:
        digest = file_sha256(path, fs.hash_of)
    except ValueError:
        return None
    if fs.pinned:
        return digest if fs.accepts(digest) else None
    if recorded is not None:
        return digest if digest == recorded else None
    with open(path, "rb") as fh:
        return None if _looks_like_html(fh.read(512)) else digest


def _verify(fh: IO[bytes], fs: FileSpec, source: str, target: Path, recorded: str | None) -> str:
    """Hash the temporary file behind ``fh`` (fully written), raise unless it is the file, return its digest."""
    fh.flush()
    with open(os.dup(fh.fileno()), "rb") as reader:  # shares the fd's offset; writing is done
        reader.seek(0)
        head = reader.read(512)
        reader.seek(0)
        try:
            actual, unreadable = stream_sha256(reader, fs.hash_of, fs.name), ""
        except ValueError as exc:
            actual, unreadable = f"<unreadable: {exc}>", str(exc)
    if fs.pinned and fs.accepts(actual):
        return actual
    if _looks_like_html(head):
        raise _HTMLPageError(f"{fs.name} from {source} is an HTML page, not the file (a file host's confirmation "
                             "page, such as Google Drive's for large files?); fetch it by hand into a data mirror")
    if fs.pinned:
        raise ChecksumError(
            f"checksum mismatch for {fs.name} from {source}: expected sha256 "
            f"({fs.hash_of}) {fs.sha256}, got {actual}"
        )
    if unreadable:
        raise ChecksumError(f"{fs.name} from {source}: cannot hash it ({fs.hash_of}): {unreadable}")
    if recorded is not None and actual != recorded:
        record = record_path(target)
        raise ChecksumError(
            f"checksum mismatch for {fs.name} from {source}: sha256 ({fs.hash_of}) {actual} differs from "
            f"{recorded}, recorded in {record} by an earlier fetch; delete {record} to accept the new file"
        )
    return actual


def _copy_file(src: Path, target: Path, fs: FileSpec, recorded: str | None, progress: bool) -> tuple[str, str]:
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
        while chunk := fin.read(CHUNK):
            fout.write(chunk)
            bar.update(len(chunk))
        digest = _verify(fout, fs, str(src), target, recorded)
    return str(src), digest


def _download_file(
    fs: FileSpec, target: Path, recorded: str | None, timeout: float, retries: int, backoff: float,
    progress: bool
) -> tuple[str, str]:
    if not fs.urls:
        raise MissingSourceError(f"{fs.name}: no mirror given and the registry lists no URLs")
    errors: list[str] = []
    with (
        tqdm(unit="B", unit_scale=True, desc=fs.name, disable=not progress, leave=False) as bar,
        atomic_write(target, "wb") as fout,
    ):
        for url in fs.urls:
            log.info("%s: downloading %s", fs.name, url)
            error = _fetch_url(url, fout, bar, timeout, retries, backoff)
            if error is None:
                try:
                    digest = _verify(fout, fs, url, target, recorded)
                    break
                except _HTMLPageError as exc:
                    error = str(exc)
            log.warning("%s: giving up on %s (%s)", fs.name, url, error)
            errors.append(f"{url}: {error}")
        else:
            raise MissingSourceError(f"{fs.name}: every URL failed:\n  " + "\n  ".join(errors))
    return url, digest


def _fetch_url(
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
                for chunk in resp.iter_content(CHUNK):
                    fout.write(chunk)
                    bar.update(len(chunk))
            return None
        except requests.RequestException as exc:
            error = f"{type(exc).__name__}: {exc}"
    return error
