"""Logging for workflow jobs: everything a job says (and its traceback) goes to its ``log:`` file."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["job_logging"]


@contextlib.contextmanager
def job_logging(log_path: str | Path, level: int = logging.INFO) -> Iterator[logging.Logger]:
    """Send logging records and stderr to ``log_path`` for the duration of the block.

    An exception raised in the block is logged with its traceback, then re-raised so that the
    job fails.
    """
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", buffering=1) as fh:
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        old_level, old_stderr = root.level, sys.stderr
        root.addHandler(handler)
        root.setLevel(level)
        sys.stderr = fh
        try:
            yield logging.getLogger("fedshift.job")
        except BaseException:
            logging.getLogger("fedshift.job").exception("job failed")
            raise
        finally:
            sys.stderr = old_stderr
            root.removeHandler(handler)
            root.setLevel(old_level)
