"""The training loop: rounds of an algorithm, with logging, NaN checks and checkpoint/resume.

The loop never keeps a mutable RNG: round r's randomness is ``RoundKey(seed, r)``, so a run
resumed from its checkpoint at round r continues exactly as the uninterrupted run would.
Diagnostics stay on the device and are synchronised to the host only every ``log_every``
rounds, where non-finite losses stop the run with :class:`NonFiniteLossError`.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedshift.core.base import ClientData, FederatedAlgorithm, state_from_dict, state_to_dict
from fedshift.core.rng import RoundKey
from fedshift.io import torch_save_atomic

__all__ = ["NonFiniteLossError", "Preempted", "TrainResult", "run_training", "request_stop", "stop_requested",
           "progress_metrics", "format_duration"]

log = logging.getLogger(__name__)


#: The signal asking the running job to stop at its next safe point (SIGTERM/SIGUSR1 of a scheduler's time
#: limit or preemption; set by :func:`request_stop`, from :func:`fedshift.runner.preemption_handlers`).
_STOP: list[int] = []


def request_stop(signum: int) -> None:
    """Ask :func:`run_training` to checkpoint after the current round and raise :class:`Preempted`."""
    if not _STOP:
        _STOP.append(int(signum))


def stop_requested() -> int | None:
    """The signal number of a pending stop request, or None."""
    return _STOP[0] if _STOP else None


class Preempted(Exception):  # noqa: N818 — a request, not an error of the job
    """Training stopped at a safe point after a stop request (SIGTERM/SIGUSR1), its checkpoint written.

    Attributes
    ----------
    signum : int
        The signal that asked for the stop.
    round : int
        Rounds done and saved in the checkpoint (the requeued job resumes there).
    checkpoint : Path or None
        The checkpoint written (None when the job has no checkpoint path: its rerun starts over).
    """

    def __init__(self, signum: int, round: int, checkpoint: Path | None) -> None:  # noqa: A002
        self.signum, self.round, self.checkpoint = signum, round, checkpoint
        where = f"checkpoint {checkpoint} holds round {round}" if checkpoint else "no checkpoint path: a rerun restarts"
        super().__init__(f"stopped by signal {signum} after round {round} ({where})")


class NonFiniteLossError(FloatingPointError):
    """Raised when a loss or parameter becomes NaN or infinite (the caller decides what is written)."""


@dataclass
class TrainResult:
    """What :func:`run_training` returns.

    Attributes
    ----------
    state : Any
        The algorithm's final state.
    history : list of dict
        One row per logged round: ``round`` (1-based count of rounds done), ``loss``
        (mean of the logged window), per-domain ``domain_loss/<k>`` and ``lambda/<k>`` when the
        algorithm reports them, and the window mean of every diagnostic named ``metric/<name>``.
    resumed_from : int
        Round the run resumed from (0 for a fresh start).
    wall_time_s : float
        Seconds spent in this call (not counting earlier, interrupted calls).
    """

    state: Any
    history: list[dict[str, float]] = field(default_factory=list)
    resumed_from: int = 0
    wall_time_s: float = 0.0


# Over 80 lines: its signature and NumPy docstring name every option of a run (64 lines); the body is 59.
def run_training(
    algorithm: FederatedAlgorithm,
    init_params: dict[str, torch.Tensor],
    clients: Sequence[ClientData],
    *,
    rounds: int,
    seed: int,
    checkpoint_path: str | Path | None = None,
    checkpoint_every: int = 0,
    log_every: int = 100,
    fingerprint: str = "",
    stop_after: int | None = None,
) -> TrainResult:
    """Run ``rounds`` rounds of ``algorithm`` on ``clients``.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
        Built by its factory.
    init_params : dict[str, Tensor]
        Initial model parameters (ignored when resuming).
    clients : sequence of ClientData
        The clients of the experiment (all of them; the algorithm samples).
    rounds : int
        Total number of rounds T (> 0).
    seed : int
        The run's seed; round r uses ``RoundKey(seed, r)``.
    checkpoint_path : path, optional
        Where to save/restore the state. A checkpoint whose ``fingerprint`` differs (other
        hyper-parameters or data), or whose algorithm name or state type differs (e.g. written by an
        older version that wrapped the state differently), is ignored and overwritten.
    checkpoint_every : int
        Save every this many rounds (0: never).
    log_every : int
        Synchronise, check and record diagnostics every this many rounds (and at the end). Each
        such round logs one progress line (logger ``fedshift.core.training``, level INFO): rounds done
        of ``rounds``, mean loss of the window, the worst domain's loss, λ and ``eval/*`` metrics
        when the algorithm reports them (mean over runs for several runs at once), rounds per
        second and the ETA.
        When the process's stderr is an interactive terminal, a tqdm progress bar shows the same
        there (per round; set ``TQDM_DISABLE=1`` to turn it off).
    fingerprint : str
        Identifies the configuration (hash of resolved hyper-parameters and inputs).
    stop_after : int, optional
        Stop (without error) once this many rounds are done; for tests of resumption.

    Returns
    -------
    TrainResult

    Raises
    ------
    NonFiniteLossError
        If a logged loss is NaN or infinite (message names the round).
    Preempted
        When a stop was requested (:func:`request_stop`; SIGTERM/SIGUSR1 under
        :func:`fedshift.runner.preemption_handlers`) before the last round: the round in progress is finished,
        a checkpoint of it (with the open log window, so the resumed history is the uninterrupted one) is written
        when ``checkpoint_path`` is given, and the requeued job resumes there, having lost at most the round that
        was running when the signal came.
    ValueError
        For ``rounds < 1``, ``log_every < 1``, or a ``checkpoint_every`` that is not a multiple of
        ``log_every`` (a checkpoint must fall on a log boundary for a resume to be exact).
    """
    if rounds < 1 or log_every < 1:
        raise ValueError(f"rounds and log_every must be >= 1, got {rounds}, {log_every}")
    if checkpoint_every % log_every:
        raise ValueError(f"checkpoint_every ({checkpoint_every}) must be a multiple of log_every ({log_every})")
    start_time = time.perf_counter()
    state, history, start, window = None, [], 0, []
    ckpt = Path(checkpoint_path) if checkpoint_path else None
    if ckpt is not None and ckpt.exists():
        saved = torch.load(ckpt, map_location="cpu", weights_only=True)
        state_name = algorithm.state_type.__qualname__
        if (saved.get("fingerprint") == fingerprint and saved.get("algorithm") == algorithm.name
                and saved.get("state_type", state_name) == state_name):
            device = next(iter(init_params.values())).device
            state = state_from_dict(algorithm.state_type, _to_device(saved["state"], device))
            history, start = saved["history"], int(saved["round"])
            window = _to_device(list(saved.get("window", [])), device)  # a stop between log rounds
            log.info("resumed from %s at round %d", ckpt, start)
        else:
            log.warning("ignoring checkpoint %s: it belongs to another configuration or state layout", ckpt)
    if state is None:
        state = algorithm.init(init_params)
    progress = _Progress(rounds, start)
    try:
        for r in range(start, rounds):
            state, diag = algorithm.apply(state, clients, RoundKey(seed, r))
            window.append(diag)
            done = r + 1
            progress.step(done)
            if done % log_every == 0 or done == rounds:
                row = _summarise(window, done)
                window.clear()
                losses = row["loss"] if isinstance(row["loss"], list) else [row["loss"]]
                if not all(math.isfinite(v) for v in losses):
                    runs = f"seed {seed}" if seed >= 0 else "one value per run of the batched job"
                    raise NonFiniteLossError(
                        f"loss became {row['loss']} by round {done} ({runs}); lower the learning "
                        "rate or check the data"
                    )
                history.append(row)
                progress.report(row)
            if ckpt is not None and checkpoint_every and done % checkpoint_every == 0 and done < rounds:
                torch_save_atomic({"fingerprint": fingerprint, "algorithm": algorithm.name, "round": done,
                                   "state_type": algorithm.state_type.__qualname__,
                                   "state": state_to_dict(state), "history": history}, ckpt)
            signum = stop_requested()
            if signum is not None and done < rounds:  # preemption: save this round (and the open log window)
                if ckpt is not None:
                    torch_save_atomic({"fingerprint": fingerprint, "algorithm": algorithm.name, "round": done,
                                       "state_type": algorithm.state_type.__qualname__,
                                       "state": state_to_dict(state), "history": history, "window": window}, ckpt)
                raise Preempted(signum, done, ckpt)
            if stop_after is not None and done >= stop_after:
                break
    finally:
        progress.close()
    final = algorithm.eval_params(state)
    if not all(torch.isfinite(v).all() for v in final.values()):
        raise NonFiniteLossError("final parameters are not finite")
    return TrainResult(state, history, start, time.perf_counter() - start_time)


class _Progress:
    """Progress of one training call: log lines at log boundaries, a tqdm bar on a terminal.

    The rate and ETA use the rounds since the previous log line; the bar (only when the real
    stderr is a TTY: a job's log file never gets one) is updated every round and closed at the end.
    """

    def __init__(self, rounds: int, start: int):
        self.rounds, self.r_last, self.t_last, self.t0 = rounds, start, time.perf_counter(), time.perf_counter()
        self.bar = None
        stream = _terminal_stderr()
        if stream is not None and os.environ.get("TQDM_DISABLE", "") in ("", "0"):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=rounds, initial=start, file=stream, unit="round", desc="training",
                            leave=False)

    def step(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.bar.n)

    def report(self, row: dict[str, Any]) -> None:
        done, now = row["round"], time.perf_counter()
        rate = (done - self.r_last) / max(now - self.t_last, 1e-9)
        eta = (self.rounds - done) / max(rate, 1e-9)
        metrics = progress_metrics(row)
        text = "  ".join(f"{k} {v}" for k, v in metrics.items())
        log.info("round %d/%d (%.0f%%)  %s  %.1f rounds/s  elapsed %s  ETA %s", done, self.rounds,
                 100 * done / self.rounds, text, rate, format_duration(now - self.t0), format_duration(eta))
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
        self.r_last, self.t_last = done, now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _terminal_stderr():
    """The interactive stderr to draw a progress bar on, or None.

    ``sys.stderr`` when it is a terminal; inside a workflow job, :func:`fedshift.logs.job_logging`
    points ``sys.stderr`` at the log file, so the process's original stderr is checked too.
    """
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and stream.isatty():
                return stream
        except (AttributeError, ValueError):  # closed or a file-like object without isatty
            continue
    return None


def _mean(value: Any) -> float:
    return sum(value) / len(value) if isinstance(value, list) else float(value)


def progress_metrics(row: dict[str, Any]) -> dict[str, str]:
    """The values of one progress line: loss, worst-domain loss, λ and evaluations (means over runs).

    Parameters
    ----------
    row : dict
        One history row of :func:`run_training` (``loss``, ``domain_loss/<k>``, ``lambda/<k>``, ``eval/<name>``;
        a list of per-run values on the batched path).

    Returns
    -------
    dict
        Label → formatted value (4 decimals; λ as a list of 3-decimal weights).
    """
    out = {"loss": f"{_mean(row['loss']):.4f}"}
    domain = [_mean(v) for k, v in row.items() if k.startswith("domain_loss/")]
    if domain:
        out["worst-domain loss"] = f"{max(domain):.4f}"
    lam = [_mean(v) for k, v in row.items() if k.startswith("lambda/")]
    if lam:
        out["lambda"] = "[" + ", ".join(f"{v:.3f}" for v in lam) + "]"
    for k, v in row.items():  # evaluations at this round (e.g. eval/score of model selection)
        if k.startswith("eval/"):
            out[k.removeprefix("eval/")] = f"{_mean(v):.4f}"
    return out


def format_duration(seconds: float) -> str:
    """``seconds`` (a wall time, rounded to whole seconds) as ``1 h 02 min``, ``3 min 05 s`` or ``12 s``."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def _summarise(window: list[dict[str, torch.Tensor]], done: int) -> dict[str, Any]:
    """Window means; with a leading run axis (several runs at once) every value is a list over runs."""
    row: dict[str, Any] = {"round": done}
    row["loss"] = torch.stack([d["loss"] for d in window]).mean(0).tolist()
    if "domain_loss" in window[0]:
        dl = torch.stack([d["domain_loss"] for d in window]).mean(0)
        for k in range(dl.shape[-1]):
            row[f"domain_loss/{k}"] = dl[..., k].tolist()
    for key in window[0]:
        if key.startswith("metric/"):  # algorithm-specific scalars (e.g. WAFL's ρ²), window means
            row[key] = torch.stack([d[key] for d in window]).mean(0).tolist()
    for k, v in window[-1].items():  # evaluations made at the logged round (model selection)
        if k.startswith("eval/"):
            row[k] = v.tolist()
    if "lambda" in window[-1]:
        lam = window[-1]["lambda"]
        for k in range(lam.shape[-1]):
            row[f"lambda/{k}"] = lam[..., k].tolist()
    return row


def _to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_device(v, device) for v in obj]
    return obj
