"""Atomic file output and small serialisation helpers.

Every file fedshift writes goes through :func:`atomic_write`: the content lands in a temporary
file in the destination's folder and is renamed over the destination only when complete, so a
killed job never leaves a file that looks finished. The finished file gets the permissions of the
process's umask (0644 under umask 022), as ``open`` would give it, not ``mkstemp``'s 0600.

A process killed with SIGKILL cannot remove its temporary file. Temporary files are therefore named
``.<name>.<random>.tmp`` (DVC ignores them: ``.dvcignore``) and held under an exclusive ``flock`` while
being written; :func:`sweep_temporaries` removes those whose writer is gone (the kernel releases the lock
when a process dies). The workflow sweeps ``data/`` and ``results/`` when it starts and when it ends
(``onstart``/``onsuccess``/``onerror`` in ``workflow/rules/common.smk``), so a rerun after ``kill -9``
leaves the tree exactly as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "write_json", "read_json", "torch_save_atomic", "sweep_temporaries", "umask",
           "TEMPORARY_PATTERN", "DiskFullError"]

#: Names of :func:`atomic_write`'s temporary files: ``.<destination name>.<random>.tmp``.
TEMPORARY_PATTERN = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")


#: ``errno`` values of a full disk or an exhausted quota.
_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(OSError):
    """A write ran out of space (ENOSPC, or EDQUOT): the destination was left as it was.

    Raised by :func:`atomic_write` (so by every fedshift output, checkpoint, table and model); its message names
    the file, says that the previous version (if any) is intact and how to continue: free space and rerun, the job
    resuming from its last checkpoint to the same bytes.
    """


def umask() -> int:
    """The process's umask (e.g. ``0o022``), read without changing it where Linux allows.

    Returns
    -------
    int
        The file-mode creation mask: ``/proc/self/status``'s ``Umask`` line (Linux >= 4.7), else set
        and restored with :func:`os.umask` (not thread-safe, hence the second choice).
    """
    with contextlib.suppress(OSError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file that replaces ``path`` when the ``with`` block exits cleanly.

    Parameters
    ----------
    path : str or os.PathLike
        Destination file. Its parent folder is created if missing.
    mode : {"w", "wb"}
        Text or binary mode.
    encoding : str or None
        Text encoding (ignored in binary mode).

    Yields
    ------
    IO
        The open temporary file.

    Notes
    -----
    On an exception inside the block (or in the final flush/fsync/rename) the temporary file is removed and
    ``path`` is left as it was; a full disk or quota (ENOSPC/EDQUOT) is re-raised as :class:`DiskFullError`
    naming ``path``. The rename is atomic on POSIX file systems (``os.replace``). The temporary file,
    ``.<name>.<random>.tmp`` beside ``path``, gets mode ``0o666 & ~umask`` before any byte is
    written (so the finished file has the umask's permissions) and is held under an exclusive
    ``flock`` until renamed: after a SIGKILL it is left behind unlocked, and
    :func:`sweep_temporaries` removes it.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write supports modes 'w' and 'wb', not {mode!r}")
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _locked_temporary(dest)
    lock = os.dup(fd)  # holds the lock from closing the file until the rename
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError) and not isinstance(err, DiskFullError) and err.errno in _FULL:
            before = "its previous version is intact" if dest.exists() else "nothing was written there"
            raise DiskFullError(err.errno, f"no space left on the device while writing {dest} ({before}; the "
                                f"partial temporary file was removed). Free space and rerun: the job resumes from "
                                f"its last checkpoint", str(dest)) from err
        raise
    finally:
        os.close(lock)


def _locked_temporary(dest: Path) -> tuple[int, str]:
    """Create and ``flock`` a temporary file beside ``dest``; the descriptor and path.

    A sweep may take the lock in the instant between creation and locking and remove the file; the
    blocking lock then waits for it, sees the file gone, and starts again.
    """
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: sweeps keep every temporary file there
            return fd, tmp
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)


def sweep_temporaries(*roots: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of :func:`atomic_write` whose writer is gone, under ``roots``.

    Parameters
    ----------
    *roots : str or os.PathLike
        Folders searched recursively (missing ones are skipped).

    Returns
    -------
    list of Path
        The files removed, sorted.

    Notes
    -----
    A file is removed when its name matches :data:`TEMPORARY_PATTERN` and an exclusive ``flock`` on
    it can be taken without waiting: a live writer (another job, another Snakemake) holds the lock,
    a killed one has lost it. Where the file system refuses locks, nothing is removed. Safe to run
    while other jobs write.
    """
    removed: list[Path] = []
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                if not TEMPORARY_PATTERN.match(name):
                    continue
                path = Path(folder) / name
                try:
                    fd = os.open(path, os.O_RDONLY)
                except FileNotFoundError:  # renamed or removed by its writer meanwhile
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # held by a live writer, or no locks here
                    continue
                else:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    removed.append(path)
                finally:
                    os.close(fd)
    return sorted(removed)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON, atomically."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
        fh.write("\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def torch_save_atomic(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` through :func:`atomic_write`."""
    import torch

    with atomic_write(path, "wb") as fh:
        torch.save(obj, fh)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
