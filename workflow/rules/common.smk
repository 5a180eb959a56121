# Helpers shared by all rule files (configuration validation, the paper plug-ins and their runs, input/params
# functions). No rules here and no paper's name; all logic lives in the installed `fedshift` package. Every paper is
# a plug-in (fedshift.contract, config `papers:`) served by workflow/rules/runs.smk; its outputs are filed in the
# report under its Paper.title with its own caption.
import os
from operator import attrgetter
import re
import sys
from pathlib import Path

from fedshift.codehash import code_hash
from fedshift.contract import RUN_FILES, experiment_jobs, load_papers, run_table, seed_batched, seeds_inputs
from fedshift.config import ConfigError, check_registered
from fedshift.data.download import DatasetSpec, MissingSourceError, check_mirror
from fedshift.data.registry import FACTS as DATASET_FACTS
from fedshift.data.registry import load_plugins as load_dataset_plugins
from fedshift.plugins import loaded_files as loaded_plugin_files
from fedshift.data.prepare import GENERATED, IMAGE_FILE_PREPARERS, PREPARERS
from fedshift.validation import validate_workflow_config

ENV = "../../envs/fedshift.yaml"
ROOT = Path(workflow.basedir)

try:  # dataset plug-ins first (their facts are checked against), then every section, every depth: before any job
    load_dataset_plugins(config.get("dataset_plugins"))
    validate_workflow_config(config, ROOT / "workflow" / "schemas")
except ConfigError as err:
    sys.exit(f"fedshift: {err}")

# The paper plug-ins (config `papers:`, fedshift.contract), by name, and all their runs by path (RunSpec.path);
# workflow/rules/runs.smk serves them all.
PAPER_PLUGINS = load_papers(config)
try:
    RUNS = run_table(PAPER_PLUGINS.values())
except ConfigError as err:
    sys.exit(f"fedshift: {err}")


# The portable-CPU switch (README "Reproducibility"): its variables go into this process's environment, which
# every job inherits (a SLURM job's Snakemake parses this file again), before any job imports torch. It changes
# the numbers, so code_of appends it to the `code` entry, the rerun trigger of every job that computes.
PORTABLE_CPU = bool(config.get("portable_cpu", False))
if PORTABLE_CPU:
    from fedshift.provenance import portable_cpu_environment

    os.environ.update(portable_cpu_environment())


def code_of(script, algorithms=None, paper=None, modules=()):
    """`params` entry `code`: a hash of the fedshift modules the rule's script imports (transitively).

    Snakemake's own `code` trigger sees only the script; this makes a job rerun when a library module it
    runs changes, and only then (fedshift.codehash). `algorithms`: the registered algorithm names the job
    runs, a list ([] for a job that runs none; the run rules' named functions pass each run's own); then the other algorithm modules
    are left out of the hash, so editing one algorithm reruns exactly its runs. Without it, every module the
    script reaches counts. `paper`: the paper plug-in the script loads by name (fedshift.contract): its module
    and what that imports count too. `modules`: further source files the job runs by a computed name
    (RunSpec.modules: a matrix run's shift).
    """
    path = ROOT / "workflow" / "scripts" / script
    plugins = ([paper.module_file] if paper is not None else []) + sorted(modules)
    # a plug-in's output-only modules (Paper.output_modules) count for its table/figure jobs alone
    cut = paper.output_modules if paper is not None and script != "job_output.py" else ()
    if algorithms is None:
        return _portable_marked(code_hash(path, plugins=plugins, cut=cut))
    return _portable_marked(code_hash(path, algorithms=algorithms, plugins=plugins, cut=cut))


def _portable_marked(digest):
    """`digest`, marked portable_cpu when the portable-CPU switch is on (it changes the numbers)."""
    return f"{digest}+portable_cpu" if PORTABLE_CPU else digest


# The scale (config `scale`; "rehearsal" in config/rehearsal.yaml): every job that writes results gets it, and the
# stand-in datasets, as `params` (scale=SCALE, standins=STANDIN_DATASETS), for fedshift.budget.job_scale.
SCALE = str(config.get("scale", "paper"))


# Experiment names of every paper (its runs').
ALL_EXPERIMENTS = sorted({s.experiment for s in RUNS.values()})
# Datasets of every paper plug-in (validated before: a bad cross-reference fails before any job runs); only those
# their enabled outputs need.
PAPER_DATASETS = {}  # config section -> the registry datasets its enabled outputs need
for _name, _paper in PAPER_PLUGINS.items():
    PAPER_DATASETS[_name] = _paper.datasets()
try:
    check_registered(PAPER_DATASETS, config["datasets"])
except ConfigError as err:
    sys.exit(f"fedshift: {err}")
DATASETS = sorted(set().union(*PAPER_DATASETS.values()))


def raw_files(dataset):
    """The verified raw files of one dataset (outputs of its download rule)."""
    return [f"data/raw/{dataset}/{f['name']}" for f in config["datasets"][dataset]["files"]]


# Datasets the rehearsal replaces by generated stand-ins (config `standin`, config/rehearsal.yaml; else none).
STANDIN_DATASETS = sorted(set(config.get("standin", {}).get("datasets", [])) & set(DATASETS))
_unknown_fractions = sorted(set(config.get("standin", {}).get("fractions", {})) - set(STANDIN_DATASETS))
if _unknown_fractions:
    sys.exit(
        f"fedshift: config error at standin.fractions: {_unknown_fractions} are not stand-in datasets of this "
        f"workflow (standin.datasets: {STANDIN_DATASETS})"
    )


def standin_files(dataset):
    """The generated stand-in files of one dataset (none unless the rehearsal replaces it)."""
    if dataset not in STANDIN_DATASETS:
        return []
    return [f"data/standin/{dataset}/{f['name']}" for f in config["datasets"][dataset]["files"]]


def raw_files_of(wildcards):
    return raw_files(wildcards.dataset)


# prepared datasets: registry datasets with a decoder, and those generated from several registry datasets
# ... and the datasets of dataset plug-ins (config `dataset_plugins`), decoded by their own loader
PREPARED_FROM_REGISTRY = sorted(
    set(PREPARERS) | set(IMAGE_FILE_PREPARERS) | {n for n, f in DATASET_FACTS.items() if f.loader is not None}
)
# the plug-in files the prepare job imports by a computed name: its code hash covers them
DATASET_PLUGIN_FILES = loaded_plugin_files(config.get("dataset_plugins"))


def generated_sources(wildcards):
    """Raw files of the registry datasets one generated dataset is made from, in GENERATED's order."""
    return [f for d in GENERATED[wildcards.generated] for f in raw_files(d)]


def _check_mirror_early():
    """Fail before any job runs when the mirror lacks a file that still has to be fetched."""
    mirror = config["data_mirror"]
    if not mirror:
        return
    todo = [d for d in DATASETS if d not in STANDIN_DATASETS and not all(Path(p).exists() for p in raw_files(d))]
    try:
        check_mirror(Path(mirror), [DatasetSpec.from_registry(d, config["datasets"]) for d in todo])
    except MissingSourceError as err:
        sys.exit(f"fedshift: data_mirror={mirror!r}: {err}")


_check_mirror_early()


def _sweep_temporaries(log):
    """Remove the temporary files that killed jobs left under data/ and results/ (fedshift.io)."""
    from fedshift.io import sweep_temporaries

    removed = sweep_temporaries("data", "results")
    if removed:
        print(f"fedshift: removed {len(removed)} temporary file(s) of killed jobs, e.g. {removed[0]}", file=sys.stderr)


def _explain_killed_jobs(log):
    """Name each job the log shows killed by SIGKILL or for memory, with its mem_mb (fedshift.validation)."""
    from fedshift.validation import explain_killed_jobs

    try:
        text = Path(log).read_text(errors="replace")
    except (OSError, TypeError):
        return
    for line in explain_killed_jobs(text):
        print(line, file=sys.stderr)


# Before any job starts and when the workflow ends: a rerun after kill -9 leaves the tree an uninterrupted
# run leaves (temporaries a live job of another Snakemake is writing are locked and kept).
onstart:
    _sweep_temporaries(log)


onsuccess:
    _sweep_temporaries(log)


onerror:
    _sweep_temporaries(log)
    _explain_killed_jobs(log)


# Every paper's named outputs (filled by workflow/rules/runs.smk from Paper.outputs), so `rule all` builds them.
PAPER_OUTPUTS = {}


def all_outputs(papers=None):
    """The named outputs of ``papers`` (default: every paper plug-in)."""
    return [f for p, files in PAPER_OUTPUTS.items() if papers is None or p in papers for f in files]


def default_papers():
    """Papers whose outputs the default target builds, from config `default_papers` (a list or a
    comma-separated string), default every paper plug-in; an unknown name is a config error naming the key."""
    wanted = config.get("default_papers")
    if wanted is None:
        return None
    names = [p.strip() for p in (wanted.split(",") if isinstance(wanted, str) else wanted) if p.strip()]
    unknown = sorted(set(names) - set(PAPER_PLUGINS))
    if unknown:
        sys.exit(
            f"fedshift: config error at default_papers: {unknown} are not papers (papers: {sorted(PAPER_PLUGINS)})"
        )
    return names


def regex_of(names):
    """A wildcard constraint matching exactly these names (and nothing when empty)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


# ---- report -----------------------------------------------------------------------------------


def verdict_report(path):
    """Mark an output of the target `claims` for the report: category "0. Verdicts", which the report's menu
    (sorted by name) shows before the papers."""
    return report(
        path,
        caption="../report/claims.rst",
        category="0. Verdicts",
        subcategory="Headline claims",
        labels={"output": "verdicts", "format": Path(path).suffix.lstrip(".")},
    )


# ---- the paper contract's rules (workflow/rules/runs.smk) ------------------------------------------------------
# (paper, experiment) pairs whose seeds train (and are evaluated) together in one job: Paper.seeds_per_job is
# not 1 (0: all of them; config `jobs: {seeds_together: true}`, or a paper's batched engine path)
# ... and, with `jobs: {experiments_together: true}` (one machine: the rehearsal), every run of an experiment in one
# job (rule paper_experiment_<paper>_<experiment>), with the partitions only it reads
EXPERIMENT_JOBS = (
    experiment_jobs(RUNS, PAPER_PLUGINS) if (config.get("jobs") or {}).get("experiments_together", False) else {}
)
SEED_BATCHED = [k for k in seed_batched(RUNS, PAPER_PLUGINS) if k not in EXPERIMENT_JOBS]
PARTITIONS = {f"{p.name}/{part.name}": part for p in PAPER_PLUGINS.values() for part in p.partitions()}


def run_key(wildcards):
    return f"{wildcards.paper}/{wildcards.experiment}/{wildcards.run}/seed~{wildcards.seed}"


def spec_of(wildcards):
    """The RunSpec of the job's run (a path no paper lists is an error, not a guess)."""
    try:
        return RUNS[run_key(wildcards)]
    except KeyError:
        raise ValueError(f"fedshift: no paper lists the run {run_key(wildcards)}") from None


def run_inputs(wildcards):
    return PAPER_PLUGINS[wildcards.paper].inputs(spec_of(wildcards))


def run_hparams(wildcards):
    return dict(spec_of(wildcards).hparams)


def run_algorithms(wildcards):
    return list(spec_of(wildcards).algorithms)


def run_code(script):
    """`code` param of a run job: the script, its paper plug-in and exactly the run's algorithms."""

    def code(wildcards):
        spec = spec_of(wildcards)
        return code_of(
            script, algorithms=list(spec.algorithms), paper=PAPER_PLUGINS[wildcards.paper], modules=spec.modules
        )

    return code


def run_resource(name, default):
    def value(wildcards):
        return PAPER_PLUGINS[wildcards.paper].resources(spec_of(wildcards)).get(name, default)

    return value


def seeds_hparams(paper, experiment, seeds):
    """`hparams` of a seeds-together job: seed -> that seed's RunSpec.hparams."""

    def value(wildcards):
        return {s: dict(RUNS[f"{paper}/{experiment}/{wildcards.run}/seed~{s}"].hparams) for s in seeds}

    return value


def seeds_resource(paper, experiment, seed, name, default):
    """A resource of a seeds-together job (Paper.resources of its run id's first seed)."""

    def value(wildcards):
        spec = RUNS[f"{paper}/{experiment}/{wildcards.run}/seed~{seed}"]
        return PAPER_PLUGINS[paper].resources(spec).get(name, default)

    return value


class SeedsJob:
    """Named input functions of one experiment's seeds-together rules: a run id's seeds in one job.

    The job's run id is the `run` wildcard; its hyper-parameters, algorithms and code are those of the run id's
    first seed (RunSpec, looked up by path): every seed shares them.
    """

    def __init__(self, paper, experiment, seeds):
        self.paper, self.experiment, self.seeds = paper, experiment, seeds

    def spec(self, wildcards):
        return RUNS[f"{self.paper}/{self.experiment}/{wildcards.run}/seed~{self.seeds[0]}"]

    def train_inputs(self, wildcards):
        return run_inputs_of(self.paper, self.experiment, wildcards.run)

    def evaluate_inputs(self, wildcards):
        return evaluate_inputs_of(self.paper, self.experiment, wildcards.run)

    def algorithms(self, wildcards):
        return list(self.spec(wildcards).algorithms)

    def evaluation(self, wildcards):
        return PAPER_PLUGINS[self.paper].evaluate_params(self.spec(wildcards))

    def _code(self, script, wildcards):
        spec = self.spec(wildcards)
        return code_of(script, algorithms=list(spec.algorithms), paper=PAPER_PLUGINS[self.paper], modules=spec.modules)

    def train_code(self, wildcards):
        return self._code("job_train.py", wildcards)

    def evaluate_code(self, wildcards):
        return self._code("job_evaluate.py", wildcards)


def prepare_mem_mb(wildcards, input):
    """Office-31: 4,110 images at 224 px; else Snakemake's own default (twice the input, at least 1 GB)."""
    return 8192 if wildcards.dataset == "office31" else max(2 * input.size_mb, 1000)


def partition_inputs(wildcards):
    return dict(partition_of(wildcards).inputs)


def partition_params(wildcards):
    return dict(partition_of(wildcards).params)


def partition_code(wildcards):
    return code_of("job_partition.py", algorithms=[], paper=PAPER_PLUGINS[wildcards.paper])


def run_evaluate_inputs(wildcards):
    return PAPER_PLUGINS[wildcards.paper].evaluate_inputs(spec_of(wildcards))


def run_evaluation(wildcards):
    return PAPER_PLUGINS[wildcards.paper].evaluate_params(spec_of(wildcards))


def partition_of(wildcards):
    try:
        return PARTITIONS[f"{wildcards.paper}/{wildcards.partition}"]
    except KeyError:
        raise ValueError(f"fedshift: paper {wildcards.paper} lists no partition {wildcards.partition}") from None


def run_specs_of(paper, experiment, run):
    """The RunSpecs of one run id, by seed."""
    return sorted(
        (s for s in RUNS.values() if (s.paper, s.experiment, s.run) == (paper, experiment, run)),
        key=attrgetter("seed"),
    )


def run_inputs_of(paper, experiment, run):
    """Inputs of a seeds-together training job: shared files by key, a seed's own as <key>__seed<s>."""
    return seeds_inputs({s.seed: PAPER_PLUGINS[paper].inputs(s) for s in run_specs_of(paper, experiment, run)})


def evaluate_inputs_of(paper, experiment, run):
    """Inputs of a seeds-together evaluation job: the paper's evaluation inputs and every seed's run files."""
    specs = run_specs_of(paper, experiment, run)
    files = seeds_inputs({s.seed: PAPER_PLUGINS[paper].evaluate_inputs(s) for s in specs})
    for s in specs:
        files |= {f"{k}_{s.seed}": s.file(k) for k in RUN_FILES if k != "metrics"}
    return files


def experiment_resource(job, name, default):
    """A resource of an experiment's one job: the largest `mem_mb` of its runs, the sum of its run ids' `runtime`."""
    paper = PAPER_PLUGINS[job.paper]
    values = {s.run: paper.resources(s).get(name, default) for s in job.runs}
    return sum(values.values()) if name == "runtime" else max(values.values())


def plugin_report(path, paper, label):
    """Mark a plug-in paper's output for the report: its title is the category, its numbering the subcategory."""
    caption = paper.resolve_path(paper.caption)
    return report(
        path,
        caption=str(caption),
        category=paper.title,
        subcategory=label,
        labels={"output": label, "format": Path(path).suffix.lstrip(".")},
    )


def claims_missing_data():
    """Registry datasets the claims' `data:` name that this machine cannot get: not a stand-in of this workflow,
    neither verified raw files under data/raw nor (with `data_mirror` set) a mirror folder holding every file
    (fedshift.data.download.check_mirror). Without a mirror every registry dataset counts as downloadable."""
    names = sorted({d for items in config.get("claims", {}).values() for c in items for d in c.get("data", [])})
    mirror, missing = config.get("data_mirror", ""), []
    for d in names:
        if d not in config["datasets"]:
            sys.exit(f"fedshift: config error at claims: data {d!r} is not a dataset of config/datasets.yaml")
        # a stand-in is generated by this workflow, so it is never missing (and the answer does not change once
        # its files exist: the claims job's params stay the same, a rerun has nothing to do)
        if d in STANDIN_DATASETS or all(Path(f).is_file() for f in raw_files(d)) or not mirror:
            continue
        try:
            check_mirror(Path(mirror), [DatasetSpec.from_registry(d, config["datasets"])])
        except MissingSourceError:
            missing.append(d)
    return missing
