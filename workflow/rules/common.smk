# Helpers shared by all rule files (configuration validation, the paper plug-ins and their runs, input/params
# functions). No rules here and no paper's name; all logic lives in the installed `fedshift` package. Every paper is
# a plug-in (fedshift.contract, config `papers:`) served by workflow/rules/runs.smk; its outputs are filed in the
# report under its Paper.title with its own caption.
import os
import re
import sys
from pathlib import Path

from fedshift.codehash import keep_code_memo_in
from fedshift.contract import RUN_FILES, load_papers
from fedshift.plan import PartitionJobs, experiment_jobs, job_code, run_jobs, run_table
from fedshift.plan import experiment_resource as _experiment_resource
from fedshift.config import check_registered
from fedshift.errors import ConfigError
from fedshift.jobs import allocator_environment
from fedshift.data.download import MissingSourceError, check_mirror
from fedshift.data.sources import DatasetSpec
from fedshift.data.registry import DECODED, GENERATED
from fedshift.data.registry import FACTS as DATASET_FACTS
from fedshift.data.registry import load_plugins as load_dataset_plugins
from fedshift.plugins import loaded_files as loaded_plugin_files
from fedshift.validation import inspected_once, validate_workflow_config  # inspected_once: a Snakemake internal

ENV = "../../envs/fedshift.yaml"
ROOT = Path(workflow.current_basedir).parents[1]  # the repository (this file: workflow/rules/)

# The jobs' code hashes (code_of below), kept between plans while the files they read are unchanged: each
# `snakemake -n`, and each SLURM job's parse, would otherwise parse and hash the package's sources again.
keep_code_memo_in(Path(".snakemake", "fedshift", "code-hashes.json"))

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


# The memory allocator's settings (fedshift.jobs.ALLOCATOR_ENV): every job inherits them from this process; they
# move no number, so they are not part of any job's code hash.
os.environ.update(allocator_environment())


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
    (RunSpec.modules: a matrix run's shift). fedshift.plan.job_code, marked when portable_cpu is on (it changes
    the numbers); an experiment's one job stamps each of its run ids with the same function.
    """
    return job_code(
        ROOT / "workflow" / "scripts",
        script,
        algorithms=algorithms,
        paper=paper,
        modules=modules,
        portable=PORTABLE_CPU,
    )


def _portable_marked(digest):
    """`digest`, marked portable_cpu when the portable-CPU switch is on (it changes the numbers)."""
    return f"{digest}+portable_cpu" if PORTABLE_CPU else digest


# The scale (config `scale`; "rehearsal" in config/rehearsal.yaml): every job that writes results gets it, and the
# stand-in datasets, as `params` (scale=SCALE, standins=STANDIN_DATASETS), for fedshift.budget.job_scale.
SCALE = str(config.get("scale", "paper"))


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
PREPARED_FROM_REGISTRY = sorted(set(DECODED) | {n for n, f in DATASET_FACTS.items() if f.loader is not None})
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
# One job vocabulary: every experiment's runs are trained and evaluated by rules of its own, generated in one loop,
# and how many runs one job holds is a property of the experiment:
#   a run        (wildcards run, seed) the default: one job per run, what a cluster schedules best;
#   a run id     (wildcard run) its seeds trained together, then evaluated together, when Paper.seeds_per_job is not
#                1 (config `jobs: {seeds_together: true}`, a paper's batched engine; fedshift.plan.seed_batched);
#   the experiment  every run, and the partitions only it reads, in one job (config `jobs: {experiments_together:
#                true}`, one machine: the rehearsal; fedshift.plan.experiment_jobs).
# The literal paper and experiment sit in every rule's patterns, so no two rules make the same file: no ruleorder.
EXPERIMENT_JOBS = (
    experiment_jobs(RUNS, PAPER_PLUGINS) if (config.get("jobs") or {}).get("experiments_together", False) else {}
)


# Each experiment's training and evaluation rules (fedshift.plan.RunJobs), by (paper, experiment); each paper's
# partition rule (fedshift.plan.PartitionJobs, made in runs.smk).
RUN_JOBS = run_jobs(RUNS, PAPER_PLUGINS, EXPERIMENT_JOBS, code_of)


def prepare_mem_mb(wildcards, input):
    """Office-31: 4,110 images at 224 px; else Snakemake's own default (twice the input, at least 1 GB)."""
    return 8192 if wildcards.dataset == "office31" else max(2 * input.size_mb, 1000)


def experiment_resource(job, name, default):
    """A resource of an experiment's one job (fedshift.plan.experiment_resource)."""
    return _experiment_resource(job, PAPER_PLUGINS, name, default)


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
