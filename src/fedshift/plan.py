"""The job planner: which jobs train, evaluate and partition which runs (plain Python, testable without Snakemake).

The paper contract (:mod:`fedshift.contract`) says what a paper's runs, inputs and outputs are; this module groups
them into jobs for the workflow (``workflow/rules/common.smk``, ``runs.smk``): the run table by path
(:func:`run_table`), the experiments whose seeds train together (:func:`seed_batched`, :func:`seeds_inputs`), the
experiments that are one job whole (:func:`experiment_jobs`, config ``jobs: {experiments_together: true}``), and the
named input, params and resource functions of each experiment's rules (:class:`RunJobs`, :class:`PartitionJobs`).
It imports the contract and nothing heavier: the plan imports no torch (a plan of thousands of
jobs must start in a second; ``tests/unit/test_plan_imports.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedshift.contract import RUN_FILES, Paper, PartitionSpec, RunSpec, paths_of, run_file
from fedshift.errors import ConfigError

__all__ = ["run_table", "seed_batched", "ExperimentJob", "experiment_jobs", "SEED_KEY", "seeds_inputs",
           "split_seeds_inputs", "RunJobs", "run_jobs", "PartitionJobs", "experiment_resource", "CodeOf", "job_code"]

#: ``code_of(script, algorithms=None, paper=None, modules=())``: the workflow's `code` params entry of a job
#: (``workflow/rules/common.smk``: :func:`fedshift.codehash.code_hash` with the portable-CPU mark).
CodeOf = Callable[..., str]


def job_code(scripts: str | Path, script: str, *, algorithms: Sequence[str] | None = None, paper: Paper | None = None,
             modules: Iterable[str | Path] = (), portable: bool = False) -> str:
    """A job's ``code`` params entry: a hash of the fedshift modules its script imports (transitively).

    The workflow's ``code_of`` (``workflow/rules/common.smk``), and what an experiment's one job
    (:func:`fedshift.jobs.experiment_job`) stamps each run id with: the hash that run id's own job would have.

    Parameters
    ----------
    scripts : path
        The workflow's ``scripts`` folder.
    script : str
        The job's script, a file name in ``scripts``.
    algorithms : sequence of str, optional
        The registered algorithms the job runs ([] for none): the other algorithm modules are left out of the hash
        (:func:`fedshift.codehash.code_hash`). None: every module the script reaches counts.
    paper : Paper, optional
        The paper plug-in the script loads by name: its module and its closure count too; its
        :attr:`~fedshift.contract.Paper.output_modules` are cut from a partition, training or evaluation job's hash,
        its :attr:`~fedshift.contract.Paper.train_modules` from a table/figure job's (``job_output.py``).
    modules : iterable of path
        Further source files the job runs by a computed name (:attr:`RunSpec.modules`: a matrix run's shift).
    portable : bool
        Config ``portable_cpu``: marks the hash (the switch changes the numbers).

    Returns
    -------
    str
        16 hex digits, ``+portable_cpu`` appended when ``portable``.
    """
    from fedshift.codehash import code_hash

    path = Path(scripts) / script
    plugins = ([paper.module_file] if paper is not None else []) + sorted(modules)
    cut = () if paper is None else paper.train_modules if script == "job_output.py" else paper.output_modules
    digest = (code_hash(path, plugins=plugins, cut=cut) if algorithms is None
              else code_hash(path, algorithms=list(algorithms), plugins=plugins, cut=cut))
    return f"{digest}+portable_cpu" if portable else digest


def seed_batched(runs: Mapping[str, RunSpec], papers: Mapping[str, Paper]) -> list[tuple[str, str]]:
    """The (paper, experiment) pairs whose seeds one job trains together.

    Those whose paper's :meth:`Paper.seeds_per_job` is not 1 and whose run ids all have the same seeds (one rule per
    pair lists every seed's files as outputs). Seeds may read different inputs (one partition per seed): see
    :func:`seeds_inputs`.
    """
    seeds: dict[tuple[str, str], dict[str, set[int]]] = {}
    for s in runs.values():
        seeds.setdefault((s.paper, s.experiment), {}).setdefault(s.run, set()).add(s.seed)
    return sorted(key for key, by_run in seeds.items()
                  if papers[key[0]].seeds_per_job(key[1]) != 1 and len({frozenset(v) for v in by_run.values()}) == 1)


@dataclass(frozen=True)
class ExperimentJob:
    """Everything one job trains and evaluates when ``jobs: {experiments_together: true}``.

    Attributes
    ----------
    paper, experiment : str
    runs : tuple of RunSpec
        Every run of the experiment, ordered by (run id, seed).
    partitions : tuple of PartitionSpec
        The partitions only this experiment's runs read (computed first, inside the job); partitions that other
        experiments read too keep their own job (rule ``paper_partition_<paper>``).
    """

    paper: str
    experiment: str
    runs: tuple[RunSpec, ...]
    partitions: tuple[PartitionSpec, ...] = ()

    def partition_file(self, spec: PartitionSpec) -> str:
        """``data/partitions/{paper}/{name}``."""
        return f"data/partitions/{self.paper}/{spec.name}"

    def outputs(self) -> list[str]:
        """Every file the job writes: its partitions, then each run's :data:`RUN_FILES` in run order."""
        return ([self.partition_file(p) for p in self.partitions]
                + [s.file(k) for s in self.runs for k in RUN_FILES])

    def inputs(self, papers: Mapping[str, Paper]) -> list[str]:
        """Every file the job reads, sorted.

        The partitions' inputs and the runs' training and evaluation inputs, less what the job writes itself.
        """
        paper = papers[self.paper]
        files: set[str] = set()
        for p in self.partitions:
            files |= paths_of(p.inputs)
        for s in self.runs:
            files |= paths_of(paper.inputs(s)) | paths_of(paper.evaluate_inputs(s))
        return sorted(files - set(self.outputs()))


def experiment_jobs(runs: Mapping[str, RunSpec], papers: Mapping[str, Paper]) -> dict[tuple[str, str], ExperimentJob]:
    """Group every run into one job per (paper, experiment) (config ``jobs: {experiments_together: true}``).

    One process start per experiment instead of one per run and stage: the paper-scale DAG's 1,397 jobs that import
    torch with one job per run id (4,307 with one per run) become 130, at 2.6–3.3 CPU-s of interpreter and torch
    import per start on the 2-core machine (``benchmarks/job_startup.py``). Within the job each run id trains as a
    seeds-together job would (:func:`fedshift.jobs.experiment_job`), so every file has the same bytes.

    Parameters
    ----------
    runs : mapping of str to RunSpec
        :func:`run_table`.
    papers : mapping of str to Paper

    Returns
    -------
    dict
        (paper, experiment) → :class:`ExperimentJob`, sorted by key. A partition goes to an experiment's job when
        no other experiment's run reads it.
    """
    groups: dict[tuple[str, str], list[RunSpec]] = {}
    for s in runs.values():
        groups.setdefault((s.paper, s.experiment), []).append(s)
    readers: dict[str, set[tuple[str, str]]] = {}
    for key, specs in groups.items():
        paper = papers[key[0]]
        for s in specs:
            for f in paths_of(paper.inputs(s)) | paths_of(paper.evaluate_inputs(s)):
                readers.setdefault(f, set()).add(key)
    parts = {name: papers[name].partitions() for name in {k[0] for k in groups}}
    out = {}
    for key in sorted(groups):
        own = tuple(p for p in parts[key[0]] if readers.get(f"data/partitions/{key[0]}/{p.name}") == {key})
        out[key] = ExperimentJob(key[0], key[1], tuple(sorted(groups[key], key=lambda s: (s.run, s.seed))), own)
    return out


#: Suffix of an input key that only one seed of a seeds-together job reads (``partition__seed3``).
SEED_KEY = "__seed"


def seeds_inputs(per_seed: Mapping[int, Mapping[str, str]]) -> dict[str, str]:
    """One input mapping for a job that trains several seeds: shared files by key, the others by ``<key>__seed<s>``.

    Parameters
    ----------
    per_seed : mapping of int to mapping
        Seed → that seed's inputs (:meth:`Paper.inputs`).

    Returns
    -------
    dict
        Inverted by :func:`split_seeds_inputs`.
    """
    keys = {k for files in per_seed.values() for k in files}
    out: dict[str, str] = {}
    for k in sorted(keys):
        values = {seed: files.get(k) for seed, files in per_seed.items()}
        if len(set(values.values())) == 1 and None not in values.values():
            out[k] = next(iter(values.values()))
        else:
            out |= {f"{k}{SEED_KEY}{seed}": v for seed, v in values.items() if v is not None}
    return out


def split_seeds_inputs(inputs: Mapping[str, str], seeds: Sequence[int]) -> list[dict[str, str]]:
    """Per seed, its inputs from :func:`seeds_inputs`'s mapping (other keys of ``inputs`` are kept as shared)."""
    shared = {k: v for k, v in inputs.items() if SEED_KEY not in k}
    return [shared | {k.rsplit(SEED_KEY, 1)[0]: v for k, v in inputs.items() if k.endswith(f"{SEED_KEY}{s}")}
            for s in seeds]


def run_table(papers: Iterable[Paper]) -> dict[str, RunSpec]:
    """Every run of every paper, by :attr:`RunSpec.path`.

    Raises
    ------
    ConfigError
        If two runs share a path (two variants that resolve to one id).
    """
    table: dict[str, RunSpec] = {}
    for paper in papers:
        for spec in paper.runs():
            if spec.paper != paper.name:
                raise ConfigError(f"paper {paper.name}: run {spec.path} names paper {spec.paper!r}")
            if spec.path in table:
                raise ConfigError(f"paper {paper.name}: two runs share the path {spec.path}")
            table[spec.path] = spec
    return table


class RunJobs:
    """Named input and params functions of one experiment's training and evaluation rules (``runs.smk``).

    A job is named by its wildcards, ``run`` and ``seed`` (one run) or ``run`` alone (every seed of a run id,
    ``seeds``: the experiment's seeds, the same for every run id). Every function resolves the job to its RunSpecs,
    looked up by path in ``runs`` (:func:`run_table`), never parsed back from it; the job scripts read the same
    params and the same keys at both granularities: the i-th seed's run files are ``<RUN_FILES key>_<i>``.

    Parameters
    ----------
    plugin : Paper
        The experiment's paper.
    experiment : str
    runs : mapping of str to RunSpec
        :func:`run_table`.
    code_of : callable
        The workflow's :data:`CodeOf`.
    seeds : list of int, optional
        The seeds one job trains together (:func:`seed_batched`); None: one job per run.
    own_runs : list of RunSpec, optional
        The experiment's runs (default: those of ``runs``), for the resources they share.
    """

    def __init__(self, plugin: Paper, experiment: str, runs: Mapping[str, RunSpec], code_of: CodeOf,
                 seeds: Sequence[int] | None = None, own_runs: Sequence[RunSpec] | None = None):
        self.plugin, self.paper, self.experiment, self.seeds = plugin, plugin.name, experiment, seeds
        self.runs, self.code_of = runs, code_of
        self.own_runs = list(own_runs) if own_runs is not None else [
            s for s in runs.values() if (s.paper, s.experiment) == (self.paper, experiment)]
        # what names the job in its log, benchmark and checkpoint paths
        self.job = "{run}/seed~{seed}" if seeds is None else "{run}/seeds"

    def run_files(self, keys: Iterable[str]) -> dict[str, str]:
        """Run-file patterns by ``<key>_<i>``, for the i-th seed of the job."""
        seeds = ["{seed}"] if self.seeds is None else self.seeds
        return {f"{k}_{i}": run_file(self.paper, self.experiment, "{run}", s, k)
                for i, s in enumerate(seeds) for k in keys}

    def specs(self, wildcards: Any) -> list[RunSpec]:
        """The job's RunSpecs, in seed order.

        Raises
        ------
        ValueError
            For a path no paper lists (an error, not a guess).
        """
        seeds = [wildcards.seed] if self.seeds is None else self.seeds
        paths = [f"{self.paper}/{self.experiment}/{wildcards.run}/seed~{s}" for s in seeds]
        missing = [p for p in paths if p not in self.runs]
        if missing:
            raise ValueError(f"fedshift: no paper lists the run {missing[0]}")
        return [self.runs[p] for p in paths]

    def train_inputs(self, wildcards: Any) -> dict[str, str]:
        """The runs' training inputs: shared files by key, a seed's own as ``<key>__seed<s>``."""
        return seeds_inputs({s.seed: self.plugin.inputs(s) for s in self.specs(wildcards)})

    def evaluate_inputs(self, wildcards: Any) -> dict[str, str]:
        """The paper's evaluation inputs (as ``train_inputs``), and each run's files but metrics by ``<key>_<i>``."""
        specs = self.specs(wildcards)
        files = seeds_inputs({s.seed: self.plugin.evaluate_inputs(s) for s in specs})
        for i, s in enumerate(specs):
            files |= {f"{k}_{i}": s.file(k) for k in RUN_FILES if k != "metrics"}
        return files

    def seeds_of(self, wildcards: Any) -> list[int]:
        return [s.seed for s in self.specs(wildcards)]

    def hparams(self, wildcards: Any) -> dict[int, dict[str, Any]]:
        """Seed -> that run's RunSpec.hparams."""
        return {s.seed: dict(s.hparams) for s in self.specs(wildcards)}

    def algorithms(self, wildcards: Any) -> list[str]:
        """The run id's algorithms (every seed of a run id has the same)."""
        return list(self.specs(wildcards)[0].algorithms)

    def evaluation(self, wildcards: Any) -> dict[str, Any]:
        return self.plugin.evaluate_params(self.specs(wildcards)[0])

    def _code(self, script: str, wildcards: Any) -> str:
        spec = self.specs(wildcards)[0]
        # Snakemake asks once per job (4,201 jobs at paper scale) for ~300 distinct (script, algorithms, modules);
        # one plan is one parse of the sources, so each distinct hash is computed once per RunJobs (codehash's own
        # memo re-stats every file it read on each call, there so that a long-lived process sees an edit)
        key = (script, tuple(spec.algorithms), tuple(spec.modules))
        memo = self.__dict__.setdefault("_codes", {})
        if key not in memo:
            memo[key] = self.code_of(script, algorithms=list(spec.algorithms), paper=self.plugin,
                                     modules=spec.modules)
        return memo[key]

    def train_code(self, wildcards: Any) -> str:
        """`code` of a training job: the script, the paper plug-in and exactly the run's algorithms (code_of)."""
        return self._code("job_train.py", wildcards)

    def evaluate_code(self, wildcards: Any) -> str:
        return self._code("job_evaluate.py", wildcards)

    def resource(self, name: str, default: int) -> int | Callable[[Any], int]:
        """A resource of the job: Paper.resources of its first run (the seeds of a run id share them).

        The value itself when every run of the experiment has the same (the usual case: Snakemake then calls no
        function for it per job, 2 of the ~10 calls a training job's plan makes), else a function of the job.
        """
        values = {self.plugin.resources(s).get(name, default) for s in self.own_runs}
        if len(values) == 1:
            return values.pop()

        def value(wildcards: Any) -> int:
            return self.plugin.resources(self.specs(wildcards)[0]).get(name, default)

        return value


def run_jobs(runs: Mapping[str, RunSpec], papers: Mapping[str, Paper], whole: Mapping[tuple[str, str], Any],
             code_of: CodeOf) -> dict[tuple[str, str], RunJobs]:
    """:class:`RunJobs` of every experiment that is not one job whole (``whole``: :func:`experiment_jobs`' keys),
    by (paper, experiment), sorted; the seeds of a :func:`seed_batched` experiment train in one job."""
    batched = set(seed_batched(runs, papers))
    own: dict[tuple[str, str], list[RunSpec]] = {}  # (paper, experiment) -> its runs
    for s in runs.values():
        if (s.paper, s.experiment) not in whole:
            own.setdefault((s.paper, s.experiment), []).append(s)
    return {key: RunJobs(papers[key[0]], key[1], runs, code_of,
                         sorted({s.seed for s in own[key]}) if key in batched else None, own[key])
            for key in sorted(own)}


class PartitionJobs:
    """Named functions of one paper's partition rule: the partitions no experiment's one job writes itself."""

    def __init__(self, paper: Paper, whole: Mapping[tuple[str, str], ExperimentJob], code_of: CodeOf):
        self.paper, self.code_of = paper, code_of
        owned = {p.name for job in whole.values() if job.paper == paper.name for p in job.partitions}
        self.partitions = {p.name: p for p in paper.partitions() if p.name not in owned}

    def spec(self, wildcards: Any) -> PartitionSpec:
        """The partition of the job (ValueError for a name the paper does not list)."""
        try:
            return self.partitions[wildcards.partition]
        except KeyError:
            raise ValueError(f"fedshift: paper {self.paper.name} lists no partition {wildcards.partition}") from None

    def inputs(self, wildcards: Any) -> dict[str, str]:
        return dict(self.spec(wildcards).inputs)

    def params(self, wildcards: Any) -> dict[str, Any]:
        return dict(self.spec(wildcards).params)

    def code(self, wildcards: Any) -> str:
        return self.code_of("job_partition.py", algorithms=[], paper=self.paper)


def experiment_resource(job: ExperimentJob, papers: Mapping[str, Paper], name: str, default: int) -> int:
    """A resource of an experiment's one job: the largest ``mem_mb`` of its runs, the sum of its run ids' ``runtime``."""
    paper = papers[job.paper]
    values = {s.run: paper.resources(s).get(name, default) for s in job.runs}
    return sum(values.values()) if name == "runtime" else max(values.values())
