"""Logging for workflow jobs: everything a job says (and its traceback) goes to its ``log:`` file.

Fault injection (tests only). When the environment variable ``FEDSHIFT_FAIL_ONCE`` holds one or
more comma-separated shell patterns (:func:`fnmatch.fnmatch`) and a job's log path matches one of
them, the job fails on purpose the first time it runs: :func:`job_logging` writes a marker file
``<log>.failed-once`` beside the log and raises :class:`InjectedFailure`; the next attempt finds
the marker and runs normally. ``tests/cluster/test_slurm.py`` uses it to show that a SLURM job
that fails once succeeds when Snakemake resubmits it (``retries`` in ``profiles/slurm``). Unset
(always, outside that test), it costs one environment look-up per job and changes nothing.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["FAIL_ONCE_ENV", "InjectedFailure", "job_logging"]

FAIL_ONCE_ENV = "FEDSHIFT_FAIL_ONCE"


class InjectedFailure(RuntimeError):
    """The failure a job raises on purpose when ``FEDSHIFT_FAIL_ONCE`` matches its log path."""


def _fail_once_if_asked(log_path: Path) -> None:
    """Raise :class:`InjectedFailure` on the first attempt of a job selected by ``FEDSHIFT_FAIL_ONCE``.

    Parameters
    ----------
    log_path : Path
        The job's log file; patterns are matched against it as given (usually relative to the
        workflow's working directory, e.g. ``results/logs/afl/train/afl_adult/afl/seeds.log``).

    Raises
    ------
    InjectedFailure
        When a pattern matches and the marker ``<log>.failed-once`` does not exist yet (it is
        created first, so the next attempt passes).
    """
    patterns = [p for p in os.environ.get(FAIL_ONCE_ENV, "").split(",") if p]
    if not any(fnmatch.fnmatch(str(log_path), p) for p in patterns):
        return
    marker = log_path.with_name(log_path.name + ".failed-once")
    if marker.exists():
        logging.getLogger("fedshift.job").warning("%s matched this job; it failed once already, so it runs now",
                                                  FAIL_ONCE_ENV)
        return
    marker.write_text(f"{FAIL_ONCE_ENV}={os.environ[FAIL_ONCE_ENV]}\n", encoding="utf-8")
    raise InjectedFailure(f"{FAIL_ONCE_ENV} matches {log_path}: failing this first attempt on purpose")


@contextlib.contextmanager
def job_logging(log_path: str | Path, level: int = logging.INFO) -> Iterator[logging.Logger]:
    """Send logging records and stderr to ``log_path`` for the duration of the block.

    Parameters
    ----------
    log_path : str or Path
        The job's ``log:`` file (appended to; its folder is created).
    level : int
        Lowest level of the records written.

    Yields
    ------
    logging.Logger
        The ``fedshift.job`` logger.

    Raises
    ------
    InjectedFailure
        On the first attempt of a job selected by ``FEDSHIFT_FAIL_ONCE`` (see the module docstring).
    BaseException
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
            _fail_once_if_asked(path)
            yield logging.getLogger("fedshift.job")
        except BaseException:
            logging.getLogger("fedshift.job").exception("job failed")
            raise
        finally:
            sys.stderr = old_stderr
            root.removeHandler(handler)
            root.setLevel(old_level)
