"""Atomic file output and small serialisation helpers.

Every file fedshift writes goes through :func:`atomic_write`: the content lands in a temporary
file in the destination's folder and is renamed over the destination only when complete, so a
killed job never leaves a file that looks finished.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "write_json", "read_json", "torch_save_atomic"]


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
    On an exception inside the block the temporary file is removed and ``path`` is left as it
    was. The rename is atomic on POSIX file systems (``os.replace``).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write supports modes 'w' and 'wb', not {mode!r}")
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
