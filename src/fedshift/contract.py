"""The paper contract: what every reproduced paper implements, and the registry of papers.

How the workflow groups runs into jobs is :mod:`fedshift.plan`'s (it imports this module, never the reverse).

A paper is a plug-in. It subclasses :class:`Paper` in one module (``fedshift.papers.<paper>.paper``, or a
file anywhere, e.g. a test folder) and is switched on by one line of configuration::

    papers:
      wafl: fedshift.papers.wafl.paper:WaflPaper        # or  tests/toy_paper/paper.py:ToyPaper

Its configuration is the top-level section of the same name (``wafl:``), validated against the paper's own
JSON schema (:attr:`Paper.schema`) and then by :meth:`Paper.validate`. The workflow then asks the paper, and
only the paper, four questions: which partitions (:meth:`Paper.partitions`), which runs (:meth:`Paper.runs`,
typed :class:`RunSpec`), which inputs each run reads (:meth:`Paper.inputs`), and which named tables and
figures it makes (:meth:`Paper.outputs`). One job skeleton (:mod:`fedshift.jobs`) trains, evaluates,
partitions and writes outputs for every paper through :meth:`Paper.train`, :meth:`Paper.evaluate`,
:meth:`Paper.write_partition` and :meth:`Paper.make_output`; one rule per stage
(``workflow/rules/runs.smk``) serves them all, with one wildcard vocabulary and one path layout::

    data/partitions/{paper}/{partition}                       Paper.partitions() / write_partition()
    results/runs/{paper}/{experiment}/{run}/seed~{seed}/      model.pt history.csv artifacts.pt run.json metrics.csv

A run's identity is its path (:attr:`RunSpec.path`); its hyper-parameters never travel through the path:
the workflow looks the spec up by path in :func:`fedshift.plan.run_table` and hands the typed ``hparams`` to the job.

Design after FedJAX's small factories (:mod:`fedshift.algorithms.registry`) and Flower's one folder per
paper; ``../shared/design/architecture.md`` has the reasoning.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fedshift.errors import ConfigError

if TYPE_CHECKING:  # the plan imports no pandas, torch or a paper's training code (a plan must start in a second)
    import pandas as pd

__all__ = ["deep_merge", "experiments_of", "RunSpec", "PartitionSpec", "OutputSpec", "Fit", "Paper", "RUN_FILES",
           "load_paper", "load_papers", "NAME", "RUN_ID", "datasets_read", "run_file", "seeded_checkpoint", "paths_of"]

#: Paper, experiment and partition-part names: plain identifiers (they are folder names).
NAME = re.compile(r"^[A-Za-z0-9_]+$")
#: A run id (one folder): letters, digits and ``_ . + - ~``; no path separator.
RUN_ID = re.compile(r"^[A-Za-z0-9_.+~-]+$")
#: The files of one run folder, by key (what :func:`fedshift.jobs.train_job` writes, ``metrics`` by
#: :func:`fedshift.jobs.evaluate_job`).
RUN_FILES = {"model": "model.pt", "history": "history.csv", "artifacts": "artifacts.pt", "run": "run.json",
             "metrics": "metrics.csv"}


def run_file(paper: str, experiment: str, run: str, seed: int | str, key: str) -> str:
    """``results/runs/{paper}/{experiment}/{run}/seed~{seed}/<file>``: the one layout of a run's files.

    :meth:`RunSpec.file` for a run; the workflow passes ``"{run}"`` / ``"{seed}"`` to get its rules' patterns.

    Raises
    ------
    KeyError
        ``key`` is not one of :data:`RUN_FILES`.
    """
    return f"results/runs/{paper}/{experiment}/{run}/seed~{seed}/{RUN_FILES[key]}"


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` updated by ``override``, recursively for nested mappings (lists and scalars are replaced).

    Neither argument is modified; an ``override`` of None returns a copy of ``base``.
    """
    out = {k: (deep_merge(v, {}) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = deep_merge(value, {}) if isinstance(value, Mapping) else value
    return out


def experiments_of(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A paper section's experiments, each its ``defaults:`` merged with its own overrides (one config shape).

    Parameters
    ----------
    section : mapping
        ``{defaults: {...}, experiments: {name: {...}}}``; ``defaults`` is optional.

    Returns
    -------
    dict
        Experiment name → fully merged settings (:func:`deep_merge` of the defaults and the experiment).
    """
    defaults = section.get("defaults") or {}
    return {name: deep_merge(defaults, exp or {}) for name, exp in (section.get("experiments") or {}).items()}


@dataclass(frozen=True)
class RunSpec:
    """One training run of one paper: its identity and its fully resolved hyper-parameters.

    Attributes
    ----------
    paper : str
        The paper's registered name (``"wafl"``).
    experiment : str
        The paper's experiment (``"mnist"``).
    run : str
        The run's id inside the experiment: the algorithm and its variant (``"wafl~0.02"``, ``"fedavg"``,
        ``"fedpals~ess25"``); a label, the values live in ``hparams``.
    seed : int
        The run's seed (initialisation, client sampling, batches: ``RoundKey(seed, round, client)``).
    algorithms : tuple of str
        The registered algorithm names the run executes (:mod:`fedshift.algorithms.registry`): its code hash
        covers exactly their modules.
    hparams : mapping
        Everything the run's training depends on, defaults merged (JSON-able: it is the job's ``params``
        rerun trigger and part of its checkpoint fingerprint).
    modules : tuple of str
        Source files of library modules the run executes although its job reaches them only by a computed name
        (the shift matrix: its shift's module, :func:`fedshift.shifts.shift_module_file`): its code hash covers
        them and what they import, so editing one shift reruns that shift's runs only.
    """

    paper: str
    experiment: str
    run: str
    seed: int
    algorithms: tuple[str, ...] = ()
    hparams: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    modules: tuple[str, ...] = field(default=(), compare=False, hash=False)

    def __post_init__(self) -> None:
        for key in ("paper", "experiment"):
            if not NAME.match(getattr(self, key)):
                raise ConfigError(f"run {self.paper}/{self.experiment}/{self.run}: {key} "
                                  f"{getattr(self, key)!r} is not a plain name (letters, digits, _)")
        if not RUN_ID.match(self.run):
            raise ConfigError(f"run {self.paper}/{self.experiment}: run id {self.run!r} is not one folder name "
                              "(letters, digits, _ . + - ~)")
        if int(self.seed) < 0:
            raise ConfigError(f"run {self.path}: seed must be >= 0")

    @property
    def path(self) -> str:
        """``{paper}/{experiment}/{run}/seed~{seed}``: the run's folder under ``results/runs/``."""
        return f"{self.paper}/{self.experiment}/{self.run}/seed~{self.seed}"

    def file(self, key: str) -> str:
        """The run's file ``key`` of :data:`RUN_FILES` (``results/runs/<path>/model.pt``; :func:`run_file`)."""
        return run_file(self.paper, self.experiment, self.run, self.seed, key)


@dataclass(frozen=True)
class PartitionSpec:
    """One partition file of a paper: ``data/partitions/{paper}/{name}``.

    Attributes
    ----------
    name : str
        The file's path under the paper's partition folder, one or more plain names joined by ``/``, with
        an extension (``"mnist.json"``, ``"fmnist_c3/seed~0.json"``).
    inputs : mapping of str to str
        Files the partition is computed from (prepared datasets), by key.
    params : mapping
        Everything else it depends on (JSON-able; the rerun trigger).
    """

    name: str
    inputs: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OutputSpec:
    """One named table or figure of a paper (a target of its own: ``snakemake <name>``).

    Attributes
    ----------
    name : str
        The target name (``"wafl_fig4"``), unique across papers.
    files : mapping of str to str
        The files it writes by key (``{"csv": "results/tables/wafl/fig4.csv", "pdf": ..., "png": ...}``).
    inputs : sequence of str
        The run files (or partitions, other outputs) it reads; it never trains.
    label : str
        The paper's numbering (``"Figure 4"``, ``"Table 2"``): the report's subcategory.
    params : mapping
        What else it depends on (JSON-able).
    """

    name: str
    files: Mapping[str, str]
    inputs: Sequence[str]
    label: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Fit:
    """What a paper's training returns to the job skeleton, which writes it (:func:`fedshift.jobs.train_job`).

    Attributes
    ----------
    params : dict[str, Tensor]
        The model to store in ``model.pt`` (final, averaged or selected).
    history : DataFrame
        One row per logged round (``history.csv``).
    info : dict
        The run's own ``run.json`` fields; must hold ``"rounds"``.
    result : TrainResult or None
        :func:`fedshift.core.training.run_training`'s result (resume point, wall time); None when training was
        abandoned (e.g. a recorded divergence).
    artifacts : dict
        Further objects for ``artifacts.pt`` (e.g. WAFL's model snapshots); empty when there are none.
    """

    params: dict[str, Any]
    history: pd.DataFrame
    info: dict[str, Any]
    result: Any = None
    artifacts: dict[str, Any] = field(default_factory=dict)


class Paper:
    """The contract of one reproduced paper (subclass it; :func:`load_paper` instantiates it).

    A subclass sets the class attributes and implements the methods that raise ``NotImplementedError``.
    ``self.section`` is the paper's config section, ``self.config`` the whole merged configuration (for the
    dataset registry, ``budget`` and ``scale``).

    Attributes
    ----------
    name : str
        Registered name = config section = ``{paper}`` wildcard (set by :func:`load_paper` from the
        ``papers:`` key).
    title : str
        The report's category for the paper's outputs (authors, venue, year).
    schema : str or None
        Path of the section's JSON schema (relative to the module file, or absolute); None: no schema.
    caption : str or None
        Path of the report caption template (.rst, rendered with the job's ``snakemake`` object), relative to
        the module file.
    output_modules : tuple of str
        Modules only :meth:`make_output` runs (the paper's plotting/table module): left out of the code hash of
        its partition, training and evaluation jobs, so that editing a plot does not retrain (default: the
        generic plotting/table helpers :mod:`fedshift.reporting`; a paper adds its own report module).
    train_modules : tuple of str
        The twin of ``output_modules``: modules only the partition, training and evaluation jobs run (the
        paper's ``fit`` and ``data``, imported inside :meth:`train`, :meth:`evaluate` and
        :meth:`write_partition`): left out of the code hash of its table and figure jobs, so that editing
        training code reruns a table only through its changed metrics (default: none).
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    schema: ClassVar[str | None] = None
    caption: ClassVar[str | None] = None
    module_file: ClassVar[str] = ""
    output_modules: ClassVar[tuple[str, ...]] = ("fedshift.reporting",)
    train_modules: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: Mapping[str, Any]):
        self.config = config
        self.section = config.get(self.name) or {}

    # ---- configuration --------------------------------------------------------------------------------
    def check_raw_section(self, name: str, section: Mapping[str, Any]) -> None:
        """Checks of the section as written, run by :func:`fedshift.validation.validate_workflow_config` after the
        schema and before :meth:`validate` (default: none).

        The place for what only this paper's layout gives a meaning to (participants per round against the clients
        its experiments or shifts define), so that the generic validation names no paper.

        Parameters
        ----------
        name : str
            The section's name (the ``papers:`` key), the first part of every key path an error names.
        section : Mapping
            The section as configured (``defaults:`` not merged; :func:`fedshift.validation.merged_view` merges).

        Raises
        ------
        ConfigError
            Naming the key path (:func:`fedshift.validation.config_error`).
        """

    def validate(self) -> None:
        """Cross-reference checks beyond the schema (unknown experiments, datasets, outputs, ...).

        Raises
        ------
        ConfigError
            Naming the key path (``wafl.figures.fig4[0]: unknown experiment 'mnsit'``).
        """

    def datasets(self) -> list[str]:
        """Registry datasets (``config/datasets.yaml``) the enabled outputs need, derived from the files they read.

        :func:`datasets_read` of every run's training and evaluation inputs and of the partitions they read: a
        paper whose inputs name its data (``data/prepared/<name>.pt``, ``data/raw/<entry>/...``) needs no override.

        Raises
        ------
        ConfigError
            From :meth:`runs` on an invalid section (call :meth:`validate` first).
        """
        runs = self.runs()
        files = {f for spec in runs for f in paths_of({**self.inputs(spec), **self.evaluate_inputs(spec)})}
        files |= {f for p in self.partitions() if f"data/partitions/{self.name}/{p.name}" in files
                  for f in paths_of(p.inputs)}
        return datasets_read(files)

    # ---- partitions -------------------------------------------------------------------------------------
    def partitions(self) -> list[PartitionSpec]:
        """Every partition file the enabled runs read."""
        return []

    def write_partition(self, spec: PartitionSpec, output: str) -> None:
        """Compute one partition and write it (atomically) to ``output``."""
        raise NotImplementedError(f"{self.name}: write_partition")

    # ---- runs ---------------------------------------------------------------------------------------------
    def runs(self) -> list[RunSpec]:
        """Every run the enabled outputs need, hyper-parameters resolved (budget applied)."""
        raise NotImplementedError(f"{self.name}: runs")

    def inputs(self, spec: RunSpec) -> dict[str, str]:
        """The files one run reads, by key (prepared data, its partition, pretrained weights)."""
        raise NotImplementedError(f"{self.name}: inputs")

    def seeds_per_job(self, experiment: str) -> int:
        """How many seeds of one (experiment, run id) one training job trains (see :meth:`train_many`).

        1 (one job per seed) unless the workflow's ``jobs: {seeds_together: true}`` asks for fewer, fatter jobs:
        then every seed of a run id trains in one job (and is evaluated in one), which saves a process start
        (interpreter, torch, CUDA context: 2–4 s) per seed. Papers with a batched engine path override it.
        """
        return 0 if (self.config.get("jobs") or {}).get("seeds_together", False) else 1

    def resources(self, spec: RunSpec) -> dict[str, int]:
        """Scheduler resources of the run's training job (``mem_mb``, ``runtime`` in minutes)."""
        return {"mem_mb": 4096, "runtime": 240}

    def train(self, spec: RunSpec, inputs: Mapping[str, str], *, device: Any, checkpoint: str | None,
              fingerprint: str) -> Fit:
        """Train one run, resuming from ``checkpoint`` when its fingerprint matches."""
        raise NotImplementedError(f"{self.name}: train")

    def train_many(self, specs: Sequence[RunSpec], inputs: Mapping[str, str], *, device: Any,
                   checkpoint: str | None, fingerprint: str) -> list[Fit]:
        """Train several runs in one job (same experiment and run id, several seeds); default: one by one.

        Papers with a batched path (one model per seed on a run axis) override it; the outputs must equal
        what :meth:`train` gives each run alone.
        """
        return [self.train(s, inputs, device=device, checkpoint=seeded_checkpoint(checkpoint, s.seed),
                           fingerprint=f"{fingerprint}:{s.seed}") for s in specs]

    def evaluate(self, spec: RunSpec, inputs: Mapping[str, str], run_files: Mapping[str, str], *,
                 device: Any) -> pd.DataFrame:
        """Evaluate one trained run: tidy rows (one per metric/population/round), written to metrics.csv."""
        raise NotImplementedError(f"{self.name}: evaluate")

    def evaluate_inputs(self, spec: RunSpec) -> dict[str, str]:
        """Files the evaluation reads besides the run's own (default: :meth:`inputs`)."""
        return self.inputs(spec)

    def evaluate_params(self, spec: RunSpec) -> dict[str, Any]:
        """Settings the evaluation reads besides ``hparams`` (JSON-able; the evaluation's rerun trigger; default {})."""
        return {}

    # ---- outputs -----------------------------------------------------------------------------------------
    def outputs(self) -> list[OutputSpec]:
        """The enabled named tables and figures."""
        return []

    def make_output(self, spec: OutputSpec, inputs: Sequence[str], files: Mapping[str, str]) -> None:
        """Write one table/figure's ``files`` from its ``inputs`` (tidy data in, never training)."""
        raise NotImplementedError(f"{self.name}: make_output")

    def rules(self) -> str | None:
        """Path of a rule file for stages the contract does not cover (e.g. a paper's own data build), or None."""
        return None

    # ---- helpers ------------------------------------------------------------------------------------------
    def resolve_path(self, relative: str | None) -> Path | None:
        """A path given relative to the paper's module file (schema, caption, rules)."""
        if relative is None:
            return None
        p = Path(relative)
        return p if p.is_absolute() else (Path(self.module_file).parent / p).resolve()


def seeded_checkpoint(checkpoint: str | None, seed: int) -> str | None:
    """One seed's checkpoint beside ``checkpoint``: ``x.pt`` -> ``x.seed~<seed>.pt`` (None stays None)."""
    if checkpoint is None:
        return None
    p = Path(checkpoint)
    return str(p.with_name(f"{p.stem}.seed~{seed}{p.suffix}"))


def load_paper(name: str, target: str, config: Mapping[str, Any]) -> Paper:
    """Instantiate the paper plug-in ``target`` (``"pkg.module:Class"`` or ``"path/to/file.py:Class"``).

    Raises
    ------
    ConfigError
        ``papers.<name>``: a malformed target, a module or class that cannot be found, or a class that is not a
        :class:`Paper`; ``algorithm_plugins[i]``: an algorithm plug-in that cannot be loaded
        (:func:`fedshift.algorithms.registry.load_plugins`, loaded first).
    """
    from fedshift.algorithms.registry import load_plugins
    from fedshift.data.registry import load_plugins as load_dataset_plugins
    from fedshift.plugins import import_target

    load_plugins(config.get("algorithm_plugins"))  # their @register lines first: runs may name their algorithms
    load_dataset_plugins(config.get("dataset_plugins"))  # and datasets: their facts and decoders
    where = f"config error at papers.{name}"
    if not NAME.match(name):
        raise ConfigError(f"{where}: paper names are plain identifiers (letters, digits, _)")
    if not isinstance(target, str) or target.count(":") != 1:
        raise ConfigError(f"{where}: expected 'package.module:Class' or 'path/file.py:Class', got {target!r}")
    mod_name, cls_name = target.split(":")
    if mod_name.endswith(".py") and not Path(mod_name).is_file():
        raise ConfigError(f"{where}: no file {mod_name!r}")
    try:
        module = import_target(mod_name, f"fedshift_paper_{name}")
    except ImportError as err:
        raise ConfigError(f"{where}: cannot import {mod_name!r}: {err}") from err
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Paper)):
        raise ConfigError(f"{where}: {target!r} is not a fedshift.contract.Paper subclass")
    cls = type(cls.__name__, (cls,), {"name": name, "module_file": str(Path(module.__file__).resolve())})
    return cls(config)


def load_papers(config: Mapping[str, Any]) -> dict[str, Paper]:
    """Every paper switched on by the ``papers:`` mapping, in its order (section present or not).

    These are the plan's papers, fixed once loaded: each one's :meth:`Paper.runs` is computed once and handed out
    as a fresh list on every later call (a plan asks each paper for its runs four times: its datasets, the
    algorithm checks, the run table; FedPALS' 1,656 runs at paper scale are resolved from the merged config).
    """
    papers = {name: load_paper(name, target, config) for name, target in (config.get("papers") or {}).items()}
    for paper in papers.values():
        paper.runs = _runs_once(paper.runs)  # type: ignore[method-assign]
    return papers


def _runs_once(runs: Callable[[], list[RunSpec]]) -> Callable[[], list[RunSpec]]:
    """``runs``, called the first time only (an error is raised again on every call: nothing is kept then)."""
    kept: list[list[RunSpec]] = []

    @functools.wraps(runs)
    def once() -> list[RunSpec]:
        if not kept:
            kept.append(runs())
        return list(kept[0])

    return once


def datasets_read(files: Iterable[str]) -> list[str]:
    """The registry datasets whose raw files a set of input files comes from, sorted.

    ``data/prepared/<name>.pt`` (and its image folder) counts as the raw datasets it is decoded or generated from
    (:func:`fedshift.data.registry.raw_datasets_of`: ``mnist_m_bsds`` → MNIST and BSDS500); ``data/raw/<entry>/...``
    (pretrained weights, files a job decodes itself) as ``<entry>``; other files (partitions, run files) as none.
    """
    from fedshift.data.registry import raw_datasets_of

    out: set[str] = set()
    for f in files:
        parts = Path(f).parts
        if len(parts) >= 3 and parts[:2] == ("data", "prepared"):
            out.update(raw_datasets_of(Path(parts[2]).name.removesuffix(".pt")))
        elif len(parts) >= 3 and parts[:2] == ("data", "raw"):
            out.add(parts[2])
    return sorted(out)


def paths_of(inputs: Mapping[str, Any]) -> set[str]:
    """The file paths of an input mapping whose values are paths or lists of paths."""
    out: set[str] = set()
    for v in inputs.values():
        out |= {str(x) for x in v} if isinstance(v, list | tuple) else {str(v)}
    return out
