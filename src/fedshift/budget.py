"""The training budget: one generic cap on the training length of every paper (the rehearsal scale).

The configuration's top-level ``budget: {max_rounds: R}`` (``config/rehearsal.yaml``) caps the rounds (AFL:
steps) of every training job of every paper at ``R`` and nothing else: experiments, seeds, algorithms, λ/γ
variants, data, partitions, evaluation protocols, tables and figures stay at the paper scale. Each paper applies
it in the one place it resolves a job's training length (``fedshift.papers.afl.config.resolve_run`` for AFL, and
``resolve_run`` / ``resolve`` of ``fedshift.papers.{agnostic_fedavg, wafl, fedmm, fedpals}``), through
:func:`apply_budget`. Without a ``budget`` key nothing changes.

``scale: rehearsal`` (same overlay) marks every table and figure as a rehearsal output (:data:`REHEARSAL_MARK`):
:func:`is_rehearsal` tells the writers so. The workflow passes the scale and the stand-in datasets to every job that
writes results as rule ``params`` (``scale``, ``standins``); the job's script enters :func:`job_scale` with them, so
that code without the config at hand (:func:`fedshift.reporting.save_figure`, the ``run.json`` writer) knows them
for the job's duration. Nothing travels through the environment.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from math import gcd
from typing import Any

__all__ = ["PERIOD_KEYS", "REHEARSAL_MARK", "apply_budget", "is_rehearsal", "job_scale", "largest_proper_divisor",
           "standin_of_workflow"]

#: Keys of a ``train`` mapping that count rounds between two events (logging or evaluation, checkpoints,
#: snapshots); 0 disables the event and stays 0.
PERIOD_KEYS = ("log_every", "eval_every", "checkpoint_every", "snapshot_every")

#: The words every rehearsal table and figure carries in its file (csv column, md header, figure title).
REHEARSAL_MARK = "REHEARSAL — not a result"


#: The running job's (scale, stand-in datasets), set by :func:`job_scale`; ("paper", ()) outside any job.
_JOB_SCALE: ContextVar[tuple[str, tuple[str, ...]]] = ContextVar("fedshift_job_scale", default=("paper", ()))


@contextlib.contextmanager
def job_scale(scale: str, standins: Sequence[str] = ()) -> Iterator[None]:
    """Run the body as a job of the workflow's ``scale`` whose ``standins`` datasets are generated stand-ins.

    The job scripts enter it with their rule's ``params.scale`` and ``params.standins``; :func:`is_rehearsal` and
    :func:`standin_of_workflow` read it.
    """
    token = _JOB_SCALE.set((str(scale), tuple(sorted(standins))))
    try:
        yield
    finally:
        _JOB_SCALE.reset(token)


def standin_of_workflow() -> list[str]:
    """The registry datasets the running job reads from generated stand-ins (:func:`job_scale`), sorted."""
    return list(_JOB_SCALE.get()[1])


def is_rehearsal(config: Mapping[str, Any] | None = None) -> bool:
    """Whether this is the rehearsal scale.

    ``config["scale"] == "rehearsal"``; without ``config``, the running job's scale (:func:`job_scale`).
    """
    if config is None:
        return _JOB_SCALE.get()[0] == "rehearsal"
    return config.get("scale") == "rehearsal"


def largest_proper_divisor(n: int) -> int:
    """The largest divisor of ``n`` below ``n`` (1 for n ≤ 3 and primes; ``n // p`` for its smallest prime p)."""
    for p in range(2, int(n**0.5) + 1):
        if n % p == 0:
            return n // p
    return 1


def apply_budget(train: Mapping[str, Any], budget: Mapping[str, Any] | None, *, rounds_key: str = "rounds"
                 ) -> dict[str, Any]:
    """Cap a job's training length at the budget's ``max_rounds``.

    Parameters
    ----------
    train : mapping
        The job's resolved training settings: ``rounds_key`` (int, rounds or steps T) and optionally the
        :data:`PERIOD_KEYS` (ints, rounds between two events; 0 = never).
    budget : mapping or None
        ``{"max_rounds": R}`` (R ≥ 1), or None / empty for no cap.
    rounds_key : str
        Name of the length key (``"rounds"`` in every paper's config).

    Returns
    -------
    dict
        A copy of ``train``. When ``T > R``: ``rounds_key`` = R, and each positive period p becomes
        ``gcd(p, h)`` with h the largest proper divisor of R (1 for R ≤ 3): every period then divides R (the
        last round still logs and evaluates), every divisibility between periods holds as before (a checkpoint
        period that was a multiple of the logging period still is), and a positive checkpoint period is below R,
        so a resume point is written at least once (for R ≥ 2). When ``T ≤ R`` the copy is unchanged.

    Raises
    ------
    ValueError
        ``max_rounds`` missing or below 1, or ``train`` lacks ``rounds_key``.

    Notes
    -----
    The cap is the rehearsal's (``config/rehearsal.yaml``): it checks that every job of the paper-scale
    DAG runs, at the cost of training length only. Ours, not a paper's.
    """
    out = dict(train)
    if not budget:
        return out
    cap = budget.get("max_rounds")
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
        raise ValueError(f"budget.max_rounds must be an integer >= 1, got {cap!r}")
    if rounds_key not in out:
        raise ValueError(f"training settings lack {rounds_key!r}; cannot apply the budget")
    if int(out[rounds_key]) <= cap:
        return out
    out[rounds_key] = cap
    h = largest_proper_divisor(cap)
    for key in PERIOD_KEYS:
        p = out.get(key)
        if isinstance(p, int) and not isinstance(p, bool) and p > 0:
            out[key] = gcd(p, h)
    return out
