"""The one job skeleton: partition, train, evaluate and output jobs of every paper (:mod:`fedshift.contract`).

Each function is what one workflow rule's script calls (``workflow/scripts/job_*.py``). The skeleton owns
everything that is the same for every paper — threads, device, the checkpoint fingerprint, atomic outputs
written in a crash-safe order (``run.json`` last, then the checkpoint dropped), provenance, the rehearsal
mark — and asks the paper plug-in only for what differs (:meth:`~fedshift.contract.Paper.train`,
:meth:`~fedshift.contract.Paper.evaluate`, ...).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from fedshift.contract import RUN_FILES, OutputSpec, Paper, PartitionSpec, RunSpec, seeded_checkpoint
from fedshift.io import atomic_write
from fedshift.plan import ExperimentJob

#: The memory allocator's settings every job starts with (:func:`allocator_environment`). PyTorch's CPU tensors come
#: from glibc malloc, which serves each allocation above 32 MiB (a forward pass over a test split, a client's
#: batch of activations) with a fresh ``mmap`` and returns it to the system on free: the next one faults in and
#: zeroes the same pages again, system time that was a quarter of the CI rehearsal's job CPU seconds. Keeping large
#: blocks in the heap (mmap and trim thresholds 4 GiB) and backing PyTorch's allocations by transparent huge
#: pages (``THP_MEM_ALLOC_ENABLE``, read by PyTorch's CPU allocator) removes most of it. Measured on the AMD EPYC
#: kind with ``benchmarks/job_cpu.py`` (AgnosticFedAvg's EMNIST job at CI sizes): 47.4 → 27.5 CPU-s (system
#: 19.3 → 3.6), peak memory 1.97 → 2.14 GB; every output file byte-identical (the allocator moves no number).
ALLOCATOR_ENV = {"THP_MEM_ALLOC_ENABLE": "1", "MALLOC_MMAP_THRESHOLD_": str(4 << 30),
                 "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}


def allocator_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allocator variables (:data:`ALLOCATOR_ENV`) that ``base`` does not set already.

    The workflow adds them to its own environment, which every job inherits (a SLURM job's too); a value the user
    exported wins (e.g. ``MALLOC_TRIM_THRESHOLD_=131072`` to return freed memory at once, glibc's default).
    glibc reads its variables when a process starts, so they act in the processes started after, not in the
    one that sets them.

    Parameters
    ----------
    base : mapping of str to str, optional
        The current environment (default ``os.environ``).

    Returns
    -------
    dict of str to str
        The variables to add; empty when ``base`` sets them all.
    """
    base = os.environ if base is None else base
    return {k: v for k, v in ALLOCATOR_ENV.items() if k not in base}


# torch, the training loop and the provenance (which imports torch) are imported by the jobs that run them: a table,
# figure or partition job starts without torch (importing it costs seconds per job and gigabytes of memory).

__all__ = ["ALLOCATOR_ENV", "allocator_environment", "input_fingerprint", "train_job", "evaluate_job",
           "partition_job", "output_job", "experiment_job", "stash_run_files"]

log = logging.getLogger(__name__)

#: Inputs at most this large are hashed whole in the fingerprint; larger ones (prepared datasets) by size and
#: modification time (hashing them would cost seconds per job).
HASH_LIMIT = 8 << 20


def input_fingerprint(hparams: Mapping[str, Any], seeds: Any, inputs: Mapping[str, str], code: str | None = None
                      ) -> str:
    """The checkpoint identity of a training job: one recipe for every paper.

    Parameters
    ----------
    hparams : mapping
        The run's resolved hyper-parameters (JSON-able).
    seeds : int or list of int
        The seed(s) the job trains.
    inputs : mapping of str to path
        The job's input files: each small one (partitions, ≤ 8 MiB) by its sha256, each large one by size and
        modification time.
    code : str, optional
        The job's code hash (the rule's ``params.code``, :func:`fedshift.codehash.code_hash`): a checkpoint written
        before an edit of the code the job runs is not resumed after it.

    Returns
    -------
    str
        A hex digest (:func:`fedshift.provenance.fingerprint`), also over the fedshift version.
    """
    import fedshift
    from fedshift.provenance import fingerprint

    ident = {}
    for key, path in sorted(inputs.items()):
        st = Path(path).stat()
        ident[key] = (hashlib.sha256(Path(path).read_bytes()).hexdigest() if st.st_size <= HASH_LIMIT
                      else [st.st_size, st.st_mtime_ns])
    if code is not None:
        ident["code"] = code
    return fingerprint(dict(hparams), seeds, fedshift.__version__, ident)


def train_job(paper: Paper, specs: Sequence[RunSpec], inputs: Mapping[str, str] | Sequence[Mapping[str, str]],
              outputs: Sequence[Mapping[str, str]], *, checkpoint: str | None, device: str = "auto",
              threads: int = 1, workdir: str | Path = ".", code: str | None = None,
              design_hash: str | None = None) -> list[dict[str, Any]]:
    """Train one run (or several seeds of one run id, :meth:`Paper.train_many`) and write their files.

    Parameters
    ----------
    paper : Paper
    specs : sequence of RunSpec
        One run, or the seeds of one (experiment, run id) trained together.
    inputs : mapping of str to path, or one such mapping per spec
        :meth:`Paper.inputs` of the runs. When the seeds read different files (one partition per seed), each
        seed trains by :meth:`Paper.train` with its own inputs, checkpoint and fingerprint; otherwise several seeds
        go to :meth:`Paper.train_many` together.
    outputs : sequence of mapping
        Per spec, the files ``model``, ``history``, ``artifacts``, ``run`` (:data:`~fedshift.contract.RUN_FILES`).
    checkpoint : path, optional
        The job's resume point (removed once every output is written).
    device : str
        ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda[:i]"``.
    threads : int
        ``torch.set_num_threads``.
    workdir : path
        Folder whose git commit is recorded.
    code : str, optional
        The job's code hash, part of the checkpoint fingerprint (:func:`input_fingerprint`).
    design_hash : str, optional
        The confirmatory design the run is made under (config ``design_hash``,
        :func:`fedshift.claims.design.design_hash`): recorded in every ``run.json`` as ``design_hash``, which the
        judge checks (:func:`fedshift.claims.design.check_design`). None (exploratory runs): not recorded.

    Returns
    -------
    list of dict
        Each run's ``run.json`` content.

    Raises
    ------
    ValueError
        If ``specs`` is empty or mixes experiments/run ids, or ``outputs`` does not match it.
    NonFiniteLossError
        When training diverges and the paper does not record divergence (nothing is written). A paper that records
        it (FedPALS: a diverged candidate of a validation choice; FedMM) returns a fit marked ``diverged``: its
        files are written as such (:func:`_diverged_info`, logged with what was written).
    SystemExit
        Status 128 + signal after SIGTERM/SIGUSR1 (:func:`fedshift.runner.preemption_handlers`): the checkpoint
        holds the last finished round and nothing else was written.
    """
    from fedshift.core.training import Preempted
    from fedshift.runner import preemption_handlers

    with preemption_handlers():
        try:
            return _train_job(paper, specs, inputs, outputs, checkpoint=checkpoint, device=device, threads=threads,
                              workdir=workdir, code=code, design_hash=design_hash)
        except Preempted as stop:
            run = f"{specs[0].paper} / {specs[0].experiment} / {specs[0].run}"
            log.error("%s: %s; exit %d so that the scheduler requeues the job, which resumes there", run, stop,
                      128 + stop.signum)
            raise SystemExit(128 + stop.signum) from stop


def _train_job(paper: Paper, specs: Sequence[RunSpec], inputs: Mapping[str, str] | Sequence[Mapping[str, str]],
               outputs: Sequence[Mapping[str, str]], *, checkpoint: str | None, device: str, threads: int,
               workdir: str | Path, code: str | None, design_hash: str | None) -> list[dict[str, Any]]:
    """:func:`train_job` under the preemption handlers."""
    import torch

    from fedshift.provenance import pick_device
    from fedshift.runner import write_job_outputs

    if not specs or len({(s.paper, s.experiment, s.run) for s in specs}) != 1 or len(outputs) != len(specs):
        raise ValueError("train_job: one or more seeds of one (paper, experiment, run), one outputs entry each")
    t0 = time.time()
    torch.set_num_threads(threads)
    dev = pick_device(device)
    seeds = [s.seed for s in specs]
    per_spec = [dict(i) for i in inputs] if not isinstance(inputs, Mapping) else [dict(inputs)] * len(specs)
    if len(per_spec) != len(specs):
        raise ValueError("train_job: one inputs mapping per spec")
    if len(specs) == 1:
        fps = [input_fingerprint(specs[0].hparams, seeds[0], per_spec[0], code)]
        fits = [paper.train(specs[0], per_spec[0], device=dev, checkpoint=checkpoint, fingerprint=fps[0])]
    elif all(i == per_spec[0] for i in per_spec):
        fps = [input_fingerprint(specs[0].hparams, seeds, per_spec[0], code)] * len(specs)
        fits = paper.train_many(specs, per_spec[0], device=dev, checkpoint=checkpoint, fingerprint=fps[0])
    else:  # seeds of one run id reading their own files: one after the other, each resumable on its own
        fps = [input_fingerprint(s.hparams, s.seed, own, code) for s, own in zip(specs, per_spec, strict=True)]
        fits = [paper.train(s, own, device=dev, checkpoint=seeded_checkpoint(checkpoint, s.seed), fingerprint=fp)
                for s, own, fp in zip(specs, per_spec, fps, strict=True)]
    runs = []
    for spec, fit, out, fp in zip(specs, fits, outputs, fps, strict=True):
        info = {"paper": spec.paper, "experiment": spec.experiment, "run": spec.run, "algorithm": spec.run,
                "seed": spec.seed, **fit.info}
        if design_hash:
            info["design_hash"] = design_hash
        if info.get("diverged"):
            info = _diverged_info(paper, spec, info)
        runs.append(write_job_outputs(fit.params, fit.history, info, result=fit.result, t0=t0, device=dev,
                                      fingerprint=fp, model_path=out["model"], history_path=out["history"],
                                      run_json_path=out["run"], checkpoint_path=None, workdir=workdir,
                                      extra=[(fit.artifacts, out["artifacts"])]))
    if checkpoint is not None:  # every run is written: the resume points are no longer needed
        Path(checkpoint).unlink(missing_ok=True)
        for s in specs:
            Path(seeded_checkpoint(checkpoint, s.seed)).unlink(missing_ok=True)
    return runs


def _candidates(paper: Paper, spec: RunSpec) -> list[str] | None:
    """Other run ids of ``spec``'s validation choice (same experiment, seed and ``kind``), or None when unknown."""
    kind = spec.hparams.get("kind")
    if kind is None:
        return None
    try:
        runs = paper.runs()
    except Exception:  # noqa: BLE001 — a plug-in loaded without its config (tests) cannot list its runs
        return None
    return sorted({s.run for s in runs if (s.experiment, s.seed) == (spec.experiment, spec.seed)
                   and s.hparams.get("kind") == kind and s.run != spec.run})


def _diverged_info(paper: Paper, spec: RunSpec, info: dict[str, Any]) -> dict[str, Any]:
    """``run.json`` of a run the paper records as diverged, with where it came from and what stands in for it.

    Adds ``diverged_cause`` (``optimisation``: the loss became non-finite on inputs checked finite and in range
    when loaded, :func:`fedshift.data.prepare.check_prepared`) and ``diverged_fallback`` (the other candidates of
    its validation choice, ``[]`` when none: the table then reports the seed as diverged; None when the paper
    does not say), and logs exactly what the job writes, so that the log and the files agree.
    """
    alternatives = _candidates(paper, spec)
    info = {**info, "diverged_cause": info.get("diverged_cause", "optimisation"), "diverged_fallback": alternatives}
    then = ("the validation choice takes one of " + ", ".join(alternatives) if alternatives
            else "no other candidate stands in: the table reports this seed as diverged" if alternatives == []
            else "the paper's table reports it as diverged")
    log.warning("%s / %s / %s / seed %d diverged (%s): recorded as such, not a result — writing an empty model.pt, "
                "a one-row history with a NaN score and run.json with diverged: true; its metrics hold NaN with "
                "a run/diverged row = 1; %s", spec.paper, spec.experiment, spec.run, spec.seed,
                info.get("diverged_error", "non-finite loss"), then)
    return info


def evaluate_job(paper: Paper, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str],
                 metrics_path: str | Path, *, device: str = "auto", threads: int = 1) -> None:
    """Evaluate one trained run and write its tidy ``metrics.csv`` atomically.

    The rows get the run's identity columns ``paper``, ``experiment``, ``run`` and ``seed`` where the paper's
    rows do not already hold them.
    """
    import torch

    from fedshift.provenance import pick_device

    torch.set_num_threads(threads)
    dev = pick_device(device)
    rows = paper.evaluate(spec, inputs, run_files, device=dev)
    for key, value in (("paper", spec.paper), ("experiment", spec.experiment), ("run", spec.run),
                       ("seed", spec.seed)):
        if key not in rows.columns:
            rows.insert(0, key, value)
    with atomic_write(metrics_path) as fh:
        rows.to_csv(fh, index=False)


def partition_job(paper: Paper, spec: PartitionSpec, output: str | Path) -> None:
    """Compute one partition (:meth:`Paper.write_partition`; it writes ``output`` atomically)."""
    paper.write_partition(spec, str(output))
    if not Path(output).is_file():
        raise RuntimeError(f"{paper.name}: write_partition({spec.name!r}) wrote no {output}")


def output_job(paper: Paper, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
    """Write one named table/figure (:meth:`Paper.make_output`) and mark it when made at the rehearsal scale."""
    from fedshift.reporting import mark_rehearsal

    paper.make_output(spec, inputs, files)
    missing = [f for f in files.values() if not Path(f).is_file()]
    if missing:
        raise RuntimeError(f"{paper.name}: output {spec.name} did not write {missing}")
    mark_rehearsal(list(files.values()), paper.config)


def experiment_job(paper: Paper, job: ExperimentJob, *, checkpoints: str | Path, device: str = "auto",
                   threads: int = 1, workdir: str | Path = ".", code: str | None = None,
                   design_hash: str | None = None, run_codes: Mapping[str, str] | None = None) -> None:
    """Every run of one experiment in one process (config ``jobs: {experiments_together: true}``).

    First the partitions only this experiment reads (:func:`partition_job`), then, run id by run id, its seeds
    trained together (:func:`train_job`, as a seeds-together ``paper_train_<paper>_<experiment>`` job does) and each
    evaluated (:func:`evaluate_job`): every file is the one a per-run or seeds-together job writes.

    Parameters
    ----------
    paper : Paper
    job : ExperimentJob
        :func:`fedshift.plan.experiment_jobs`' entry for this (paper, experiment).
    checkpoints : path
        Folder of the job's resume points: ``<run id>/seeds.pt`` while a run id trains (removed once every output
        is written), and ``finished/<run id>/``, hard links to the files of each run id already trained and
        evaluated (kept). Snakemake deletes a job's outputs before it runs it again (a failed job's, or a finished
        one's whose experiment gained a run id: a plug-in algorithm added to the shift matrix); the job restores a
        finished run id from there instead of training it again, when its stamp (hyper-parameters, seeds, inputs,
        the run id's code and the machine, :func:`input_fingerprint`) still matches: the same inodes, the same bytes.
        A forced rerun (``snakemake -F``) restores them too: delete ``finished/`` to train them again.
    device, threads, workdir, code, design_hash
        As :func:`train_job` (a finished run id is restored only if it was made under the same ``design_hash``).
    run_codes : mapping of str to str, optional
        Run id → the code hash of that run id's own algorithms (:func:`fedshift.plan.job_code`), the ``code`` of
        its stamp: so that another run id joining the experiment (whose algorithm changes the job's ``code``)
        leaves the others' stamps as they were. A run id missing here is stamped with ``code``.

    Raises
    ------
    ValueError
        If ``job`` names another paper.
    """
    if job.paper != paper.name:
        raise ValueError(f"experiment_job: the job is paper {job.paper}'s, not {paper.name}'s")
    checkpoints = Path(checkpoints)
    machine = _machine(device)
    for part in job.partitions:
        partition_job(paper, part, job.partition_file(part))
    for run, group in groupby(job.runs, key=lambda s: s.run):
        specs = list(group)
        per_spec = [paper.inputs(s) for s in specs]
        files = [{k: s.file(k) for k in RUN_FILES} for s in specs]
        seen = {f"{k}@{s.seed}": f for s, own in zip(specs, per_spec, strict=True)
                for k, f in (own | {f"eval:{k}": v for k, v in paper.evaluate_inputs(s).items()}).items()}
        made = {"hparams": [dict(s.hparams) for s in specs], "machine": machine,
                **({"design_hash": design_hash} if design_hash else {})}
        stamp = input_fingerprint(made, [s.seed for s in specs], seen, (run_codes or {}).get(run, code))
        finished = checkpoints / "finished" / run
        if _restore(finished, stamp, files):
            log.info("%s / %s / %s: restored from %s (trained before, same stamp)", job.paper, job.experiment, run,
                     finished)
            continue
        train_job(paper, specs, per_spec, [run_outputs(s) for s in specs],
                  checkpoint=str(checkpoints / run / "seeds.pt"), device=device, threads=threads, workdir=workdir,
                  code=code, design_hash=design_hash)
        for s, f in zip(specs, files, strict=True):
            evaluate_job(paper, s, paper.evaluate_inputs(s), run_outputs(s),
                         f["metrics"], device=device, threads=threads)
        stash_run_files(finished, stamp, files)
    for run in {s.run for s in job.runs}:  # the resume points; the finished run ids' stashes stay
        shutil.rmtree(checkpoints / run, ignore_errors=True)


def _machine(device: str) -> dict[str, Any]:
    """What decides a run's bytes besides its recipe: the CPU model, ATen's kernel level and the GPU when one is used.

    Part of a stashed run id's stamp (:func:`experiment_job`): the stash outlives the job, and a file restored from
    it is one this machine would have written. ``device`` as :func:`fedshift.provenance.pick_device` reads it (no GPU
    is claimed here).
    """
    import torch

    from fedshift.provenance import cpu_info

    cpu = cpu_info()
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    return {"cpu": cpu["model"], "torch_capability": cpu["torch_capability"],
            "gpu": torch.cuda.get_device_name(0) if cuda and torch.cuda.is_available() else None}


def _link(src: str | Path, dst: str | Path) -> None:
    """``dst`` becomes a hard link to ``src`` (a copy where the file system has none)."""
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    Path(dst).unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def stash_run_files(folder: Path, stamp: str, files: Sequence[Mapping[str, str]]) -> None:
    """Keep a finished run id's files (hard links) under ``folder``, with the stamp written last.

    Parameters
    ----------
    folder : Path
        The stash (emptied first).
    stamp : str
        What the files were made by (the job's fingerprint): written last, so a stash without it is incomplete.
    files : sequence of mapping
        Per run, file key → path.
    """
    shutil.rmtree(folder, ignore_errors=True)
    for i, f in enumerate(files):
        for k, path in f.items():
            _link(path, folder / str(i) / k)
    with atomic_write(folder / "STAMP") as fh:
        fh.write(stamp)


def _restore(folder: Path, stamp: str, files: Sequence[Mapping[str, str]]) -> bool:
    """Put a stashed run id's files back when its stamp matches; False (nothing touched) otherwise."""
    mark = folder / "STAMP"
    if not mark.is_file() or mark.read_text() != stamp:
        return False
    if not all((folder / str(i) / k).is_file() for i, f in enumerate(files) for k in f):
        return False
    for i, f in enumerate(files):
        for k, path in f.items():
            _link(folder / str(i) / k, path)
    return True


def run_outputs(spec: RunSpec) -> dict[str, str]:
    """The training files of one run, by key (:data:`~fedshift.contract.RUN_FILES` less ``metrics``): what
    :func:`train_job` writes and :func:`evaluate_job` reads for it (:func:`experiment_job` passes them)."""
    return {k: spec.file(k) for k in RUN_FILES if k != "metrics"}
