"""The common end of every training job: its outputs, written in a crash-safe order.

:func:`write_job_outputs` writes ``model.pt``, any extra objects, ``history.csv`` and ``run.json`` atomically, in
that order, then drops the checkpoint (:func:`fedshift.jobs.train_job` calls it for every paper; the checkpoint's
identity is :func:`fedshift.jobs.input_fingerprint`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from fedshift.budget import is_rehearsal, standin_of_workflow
from fedshift.core.training import TrainResult, request_stop
from fedshift.io import atomic_write, torch_save_atomic, write_json
from fedshift.provenance import environment_info, git_commit

__all__ = ["write_job_outputs", "PREEMPTION_SIGNALS", "preemption_handlers"]

log = logging.getLogger(__name__)

#: Signals a scheduler sends before killing a job: SIGTERM (SLURM's time limit and preemption, then SIGKILL after
#: its KillWait grace, 30 s by default), SIGUSR1 (the ``--signal=USR1@<seconds>`` warning convention).
PREEMPTION_SIGNALS = ("SIGTERM", "SIGUSR1")


def write_job_outputs(params: dict[str, torch.Tensor], history: pd.DataFrame, info: dict[str, Any], *,
                      result: TrainResult | None, t0: float, device: torch.device, fingerprint: str,
                      model_path: str | Path, history_path: str | Path, run_json_path: str | Path,
                      checkpoint_path: str | Path | None, workdir: str | Path = ".",
                      extra: list[tuple[Any, str | Path]] | None = None) -> dict[str, Any]:
    """Write one training job's outputs atomically, provenance last, and drop its checkpoint.

    The common end of every paper's training job: ``model.pt`` (``params`` detached, on the CPU), any
    ``extra`` ``(object, path)`` pairs (``torch.save``), ``history.csv``, then ``run.json`` = ``info`` plus
    the provenance fields below. Because ``run.json`` is written last and the checkpoint removed only
    after it, a job killed at any point either left a complete run or resumes from its checkpoint.

    Parameters
    ----------
    params : dict[str, Tensor]
        The parameters to store (the final, averaged or selected model).
    history : DataFrame
        One row per logged round.
    info : dict
        The job's own ``run.json`` fields; must hold ``"rounds"`` (rounds the run covers).
    result : TrainResult or None
        :func:`fedshift.core.training.run_training`'s result (None when training was abandoned, e.g. diverged:
        then nothing was resumed and the training time is the job's).
    t0 : float
        ``time.time()`` at the job's start.
    device : torch.device
        The device the job ran on (recorded with the environment).
    fingerprint : str
        The job's checkpoint identity.
    model_path, history_path, run_json_path : path
    checkpoint_path : path, optional
    workdir : path
        Folder whose git commit is recorded.
    extra : list of (object, path), optional
        Further ``torch.save`` outputs, written before ``run.json``.

    Returns
    -------
    dict
        The ``run.json`` content: ``info`` plus ``resumed_from_round``, ``train_wall_time_s``,
        ``job_wall_time_s``, ``seconds_per_round``, ``git_commit``, ``environment`` and ``fingerprint``; at the
        rehearsal scale also ``scale: "rehearsal"`` and ``standin_data``, the registry datasets the workflow
        replaced by generated stand-ins (:func:`fedshift.budget.standin_of_workflow`).

    Raises
    ------
    KeyError
        If ``info`` lacks ``"rounds"``.
    """
    rounds = info["rounds"]
    torch_save_atomic({k: v.detach().cpu() for k, v in params.items()}, model_path)
    for obj, path in extra or []:
        torch_save_atomic(obj, path)
    with atomic_write(history_path) as fh:
        history.to_csv(fh, index=False)
    start = result.resumed_from if result is not None else 0
    wall = result.wall_time_s if result is not None else time.time() - t0
    run = {**info, "resumed_from_round": start, "train_wall_time_s": wall, "job_wall_time_s": time.time() - t0,
           "seconds_per_round": wall / max(rounds - start, 1), "git_commit": git_commit(workdir),
           "environment": environment_info(device), "fingerprint": fingerprint}
    if is_rehearsal():  # the rehearsal: its scale and the workflow's datasets replaced by stand-ins
        run["scale"] = "rehearsal"
        run["standin_data"] = standin_of_workflow()
    write_json(run_json_path, run)
    if checkpoint_path is not None:
        Path(checkpoint_path).unlink(missing_ok=True)
    return run


@contextlib.contextmanager
def preemption_handlers() -> Iterator[None]:
    """While inside, SIGTERM and SIGUSR1 ask training to stop at its next safe point instead of killing the job.

    The handler only records the request (:func:`fedshift.core.training.request_stop`); :func:`~fedshift.core.training.
    run_training` then finishes the round in progress, writes its checkpoint and raises
    :class:`~fedshift.core.training.Preempted`, which :func:`fedshift.jobs.train_job` turns into exit status
    128 + signal (non-zero: the scheduler requeues the job, which resumes from that checkpoint to the same
    bytes). A SIGKILL that comes before the safe point (the grace period ran out) is the ``kill -9`` case: the
    job resumes from its last checkpoint. Outside the main thread nothing is installed. The previous handlers
    and the request are restored/cleared on exit.
    """
    from fedshift.core import training

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:  # noqa: ARG001
        if training.stop_requested() is None:
            log.warning("received %s: stopping after the current round (checkpoint, then exit %d)",
                        signal.Signals(signum).name, 128 + signum)
        request_stop(signum)

    old = {}
    for name in PREEMPTION_SIGNALS:
        sig = getattr(signal, name)
        old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
        training._STOP.clear()
