"""Fetch raw files that have no published sha256 (Office-31, the full MNIST-M, BSDS500, model weights).

The dataset registry (``config/datasets.yaml``, :mod:`fedshift.data.download`) only takes files with a known
sha256. Some sources FedMM needs publish none: the Office-31 and MNIST-M archives sit behind Google Drive, the
BSDS500 archive on a Berkeley server, and torchvision names its weights by the first 8 hex digits of their
sha256 only. :func:`fetch_unpinned` fetches such a file from a data mirror or its URLs, checks whatever
digest the source does give (``sha256``, ``sha1`` or torchvision's ``sha256_prefix``), and records the sha256
it got beside the file (``<name>.sha256``, "trust on first use"): a later fetch that gets other bytes fails,
and the record says what every result was computed from.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fedshift.data.download import ChecksumError, MissingSourceError, fetch_url
from fedshift.io import atomic_write

__all__ = ["DIGESTS", "fetch_unpinned", "check_digest", "recorded_sha256"]

log = logging.getLogger(__name__)

#: Digest kinds a source may publish.
DIGESTS = ("sha256", "sha1", "sha256_prefix")
_CHUNK = 1 << 20


def _hashes(fh) -> dict[str, str]:
    """sha256 and sha1 of a binary file object, read from its start."""
    sha256, sha1 = hashlib.sha256(), hashlib.sha1()  # noqa: S324 (sha1: the digest some sources publish)
    fh.seek(0)
    while chunk := fh.read(_CHUNK):
        sha256.update(chunk)
        sha1.update(chunk)
    return {"sha256": sha256.hexdigest(), "sha1": sha1.hexdigest()}


def _file_hashes(path: Path) -> dict[str, str]:
    with open(path, "rb") as fh:
        return _hashes(fh)


def check_digest(hashes: Mapping[str, str], digest: Mapping[str, str] | None, label: str) -> None:
    """Compare a file's hashes with the digest its source publishes.

    Parameters
    ----------
    hashes : mapping
        ``{"sha256": ..., "sha1": ...}`` of the file.
    digest : mapping or None
        ``{"kind": "sha256" | "sha1" | "sha256_prefix", "value": hex}``; None: nothing published.
    label : str
        For messages.

    Raises
    ------
    ValueError
        An unknown digest kind.
    ChecksumError
        The file does not match.
    """
    if digest is None:
        return
    kind, value = digest["kind"], str(digest["value"]).lower()
    if kind not in DIGESTS:
        raise ValueError(f"{label}: digest kind must be one of {DIGESTS}, got {kind!r}")
    actual = hashes["sha256" if kind == "sha256_prefix" else kind]
    ok = actual.startswith(value) if kind == "sha256_prefix" else actual == value
    if not ok:
        raise ChecksumError(f"{label}: {kind} mismatch: expected {value}, got {actual}")


def recorded_sha256(path: str | os.PathLike) -> str | None:
    """The sha256 recorded beside ``path`` by an earlier fetch (``<path>.sha256``), or None."""
    rec = Path(f"{path}.sha256")
    return rec.read_text(encoding="utf-8").split()[0] if rec.is_file() else None


def _looks_like_html(fh) -> bool:
    fh.seek(0)
    head = fh.read(512).lstrip().lower()
    return head.startswith(b"<!doctype html") or head.startswith(b"<html")


def fetch_unpinned(name: str, files: Sequence[Mapping[str, Any]], dest_dir: str | os.PathLike,
                   mirror_dir: str | os.PathLike | None = None, *, timeout: float = 60.0, retries: int = 3,
                   backoff: float = 1.0, progress: bool = False) -> list[Path]:
    """Copy (from ``mirror_dir``) or download every file of one source, check it, and record its sha256.

    Parameters
    ----------
    name : str
        Source name, for messages.
    files : sequence of mapping
        ``{"name": file name, "urls": [...], "digest": {"kind", "value"} or None}``.
    dest_dir : path
        Destination folder (created). File ``f`` lands at ``dest_dir / f`` and its sha256 at ``f.sha256``.
    mirror_dir : path, optional
        The source's folder in a local mirror; when given, nothing is downloaded.
    timeout, retries, backoff
        As :func:`fedshift.data.download.fetch_dataset`.

    Returns
    -------
    list of Path
        The files, in order.

    Raises
    ------
    MissingSourceError
        A mirror file is missing, or every URL failed (Google Drive's HTML confirmation page counts as a failure).
    ChecksumError
        A file does not match its published digest, or differs from the sha256 recorded by an earlier fetch.
    """
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for f in files:
        target = dest / f["name"]
        before = recorded_sha256(target)
        if target.is_file() and before is not None and _file_hashes(target)["sha256"] == before:
            log.info("%s: %s already present (sha256 %s); kept", name, target, before)
            out.append(target)
            continue
        with atomic_write(target, "wb") as fout:
            if mirror_dir is not None:
                src = Path(mirror_dir) / f["name"]
                if not src.is_file():
                    raise MissingSourceError(f"{name}: {f['name']} not found in the data mirror: {src}")
                with open(src, "rb") as fin:
                    while chunk := fin.read(_CHUNK):
                        fout.write(chunk)
                source = str(src)
            else:
                source = _download(name, f, fout, timeout, retries, backoff, progress)
            fout.flush()
            with open(os.dup(fout.fileno()), "rb") as reader:  # the temporary file, fully written
                if _looks_like_html(reader):
                    raise MissingSourceError(f"{name}: {source} returned an HTML page instead of {f['name']} "
                                             "(Google Drive's confirmation page?); fetch it by hand into a data mirror")
                hashes = _hashes(reader)
            check_digest(hashes, f.get("digest"), f"{name}/{f['name']}")
            if before is not None and hashes["sha256"] != before:
                raise ChecksumError(f"{name}/{f['name']}: sha256 {hashes['sha256']} differs from the recorded "
                                    f"{before} of an earlier fetch; remove {target}.sha256 to accept the new file")
        with atomic_write(f"{target}.sha256") as fh:
            fh.write(f"{hashes['sha256']}  {f['name']}\n")
        if f.get("digest") is None:
            log.warning("%s: %s has no published digest; recorded sha256 %s (from %s)", name, f["name"],
                        hashes["sha256"], source)
        out.append(target)
    return out


def _download(name: str, f: Mapping[str, Any], fout, timeout: float, retries: int, backoff: float,
              progress: bool) -> str:
    errors = []
    with tqdm(unit="B", unit_scale=True, desc=f["name"], disable=not progress, leave=False) as bar:
        for url in f["urls"]:
            log.info("%s: downloading %s", name, url)
            error = fetch_url(url, fout, bar, timeout, retries, backoff)
            if error is None:
                return url
            errors.append(f"{url}: {error}")
    raise MissingSourceError(f"{name}: every URL of {f['name']} failed:\n  " + "\n  ".join(errors))
