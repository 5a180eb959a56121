# Helpers shared by all rule files (configuration validation, run enumeration, input/params
# functions). No rules here; all logic lives in the installed `fedshift` package.
#
# Hooks for the paper files workflow/rules/<paper>.smk --
#   PAPER_OUTPUTS[paper] = [...]      the paper's final tables and figures; `rule all` builds them.
#   paper_report(path, *, paper, label, caption) -> report-flagged `path` for an `output:` entry:
#       path     the output file (may hold wildcards);
#       paper    a key of PAPER_TITLES ("afl", "agnostic_fedavg", "wafl", "fedmm"): the
#                report groups every output under its paper's title;
#       label    the paper's numbering, e.g. "Table 1", "Figure 3b": the group inside the paper;
#       caption  an .rst caption template, relative to workflow/rules/ (e.g. "../report/afl.rst"),
#                rendered with the producing job's `snakemake` object (snakemake.params, .wildcards,
#                .config, .rule): say which paper, table/figure and configuration made the output.
#   Example: output: pdf=paper_report("results/figures/wafl/figure2.pdf", paper="wafl", label="Figure 2",
#                                      caption="../report/wafl_figure.rst")
#   `snakemake --report results/report.html` (or .zip) then holds it. An unknown paper or a missing
#   caption file stops the workflow before any job runs.
import os
import re
import sys
from pathlib import Path

from fedshift.budget import SCALE_ENV, STANDIN_ENV
from fedshift.codehash import code_hash
from fedshift.contract import load_papers, run_table
from fedshift.config import (
    PAPER_SECTIONS,
    ConfigError,
    algorithm_ids,
    check_registered,
    resolve_hparams,
    runs_of,
)
from fedshift.data.download import DatasetSpec, MissingSourceError, check_mirror
from fedshift.data.prepare import GENERATED, IMAGE_FILE_PREPARERS, PREPARERS
from fedshift.validation import validate_workflow_config

ENV = "../../envs/fedshift.yaml"
ROOT = Path(workflow.basedir)

try:  # every section, every depth, cross-references and registered algorithms: before any job
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


def code_of(script, algorithms=None, paper=None):
    """`params` entry `code`: a hash of the fedshift modules the rule's script imports (transitively).

    Snakemake's own `code` trigger sees only the script; this makes a job rerun when a library module it
    runs changes, and only then (fedshift.codehash). `algorithms`: the registered algorithm names the job
    runs, a list or a function of the wildcards ([] for a job that runs none); then the other algorithm modules
    are left out of the hash, so editing one algorithm reruns exactly its runs. Without it, every module the
    script reaches counts. `paper`: the paper plug-in the script loads by name (fedshift.contract): its module
    and what that imports count too.
    """
    path = ROOT / "workflow" / "scripts" / script
    plugins = [paper.module_file] if paper is not None else []
    if algorithms is None:
        return _portable_marked(code_hash(path, plugins=plugins))
    if callable(algorithms):
        return lambda wildcards: _portable_marked(code_hash(path, algorithms=algorithms(wildcards), plugins=plugins))
    return _portable_marked(code_hash(path, algorithms=algorithms, plugins=plugins))


def _portable_marked(digest):
    """`digest`, marked portable_cpu when the portable-CPU switch is on (it changes the numbers)."""
    return f"{digest}+portable_cpu" if PORTABLE_CPU else digest


# The scale (config `scale`; "rehearsal" in config/rehearsal.yaml) for code that writes figures without the config at
# hand (fedshift.reporting.save_figure marks rehearsal figures); a cluster job parses this file again and sets it too.
os.environ[SCALE_ENV] = str(config.get("scale", "paper"))


EXPERIMENTS = config["experiments"]
# Experiment names of every paper (AFL's `experiments:` and each paper section's own).
ALL_EXPERIMENTS = list(EXPERIMENTS) + [
    e
    for sec in PAPER_SECTIONS
    if sec in config and sec not in PAPER_PLUGINS
    for e in config[sec].get("experiments", {})
]
ALL_EXPERIMENTS += sorted({s.experiment for s in RUNS.values()} - set(ALL_EXPERIMENTS))
# Experiments whose seeds train together in one job (batched over the run axis) and the others.
BATCHED = [e for e, v in EXPERIMENTS.items() if v.get("batch_seeds", False)]
PER_SEED = [e for e in EXPERIMENTS if e not in BATCHED]
TABLES = config["tables"]
PAPERS = sorted({t["paper"] for t in TABLES.values()})
# Datasets of the papers with their own config section (checked by the paper's own code first, so a bad
# cross-reference fails here, before any job runs); only those their active outputs need.
PAPER_DATASETS = {}  # config section -> the registry datasets its enabled outputs need
if "wafl" in config:
    from fedshift.papers import wafl as wafl_paper

    try:
        wafl_paper.check_config(config["wafl"])
    except ConfigError as err:
        sys.exit(f"fedshift: {err}")
    PAPER_DATASETS["wafl"] = wafl_paper.datasets_of(config["wafl"])
# ---- FedMM (issue 7) ----
if "fedmm" in config:
    from fedshift.papers import fedmm as fedmm_paper

    try:
        fedmm_paper.check_config(config["fedmm"])
    except ConfigError as err:
        sys.exit(f"fedshift: {err}")
    PAPER_DATASETS["fedmm"] = fedmm_paper.datasets_of(config["fedmm"])
# ---- end FedMM ----
# ---- AgnosticFedAvg (issue 5) ----
if "agnostic_fedavg" in config:
    from fedshift.papers import agnostic_fedavg as afa_paper

    try:
        afa_paper.check_config(config["agnostic_fedavg"])
    except ConfigError as err:
        sys.exit(f"fedshift: {err}")
    PAPER_DATASETS["agnostic_fedavg"] = afa_paper.datasets_of(config["agnostic_fedavg"])
# ---- end AgnosticFedAvg ----
for _name, _paper in PAPER_PLUGINS.items():
    PAPER_DATASETS[_name] = _paper.datasets()
try:
    check_registered(PAPER_DATASETS, config["datasets"])
except ConfigError as err:
    sys.exit(f"fedshift: {err}")
DATASETS = sorted({e["dataset"] for e in EXPERIMENTS.values()}.union(*PAPER_DATASETS.values()))


def raw_files(dataset):
    """The verified raw files of one dataset (outputs of its download rule)."""
    return [f"data/raw/{dataset}/{f['name']}" for f in config["datasets"][dataset]["files"]]


# Datasets the rehearsal replaces by generated stand-ins (config `standin`, config/rehearsal.yaml; else none).
STANDIN_DATASETS = sorted(set(config.get("standin", {}).get("datasets", [])) & set(DATASETS))
os.environ[STANDIN_ENV] = ",".join(STANDIN_DATASETS)  # recorded in every run.json (fedshift.runner)


def standin_files(dataset):
    """The generated stand-in files of one dataset (none unless the rehearsal replaces it)."""
    if dataset not in STANDIN_DATASETS:
        return []
    return [f"data/standin/{dataset}/{f['name']}" for f in config["datasets"][dataset]["files"]]


def raw_files_of(wildcards):
    return raw_files(wildcards.dataset)


# prepared datasets: registry datasets with a decoder, and those generated from several registry datasets
PREPARED_FROM_REGISTRY = sorted(set(PREPARERS) | set(IMAGE_FILE_PREPARERS))


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


# Before any job starts and when the workflow ends: a rerun after kill -9 leaves the tree an uninterrupted
# run leaves (temporaries a live job of another Snakemake is writing are locked and kept).
onstart:
    _sweep_temporaries(log)


onsuccess:
    _sweep_temporaries(log)


onerror:
    _sweep_temporaries(log)


def run_dir(experiment, algorithm, seed):
    return f"results/runs/{experiment}/{algorithm}/seed~{seed}"


def experiment_metrics(experiment):
    """metrics.csv of every run of one experiment."""
    return [f"{run_dir(r.experiment, r.algorithm, r.seed)}/metrics.csv" for r in runs_of(config, experiment)]


def table_files(name):
    t = TABLES[name]
    # _runs.csv: one row per run, what claims pair by seed
    return [f"results/tables/{t['paper']}/{t['file']}{end}" for end in (".csv", ".md", ".tex", "_runs.csv")]


def figure_files(name):
    t = TABLES[name]
    return [f"results/figures/{t['paper']}/{t['file']}.{ext}" for ext in ("pdf", "png")]


def paper_label(title):
    """The paper's number at the start of a table or figure title: "Table 1", "Fig. 4", "Fig. 8(a)"."""
    m = re.match(r"(Table|Fig\.|Figure)\s*\d+[a-z]?(\([a-z]\))?", title)
    if m is None:
        sys.exit(f"fedshift: title {title!r} does not start with its table or figure number")
    return m.group(0)


def table_label(name):
    """The paper's number of an AFL table ("Table 1")."""
    return paper_label(TABLES[name]["title"])


def paper_outputs(paper):
    out = []
    for name, t in TABLES.items():
        if t["paper"] == paper:
            out += table_files(name) + figure_files(name)
    return out


# Outputs of the papers whose rules live in their own rule file (workflow/rules/<paper>.smk, config
# section `<paper>:`): each such file registers its named targets here, so `rule all` builds them.
PAPER_OUTPUTS = {}


def all_outputs():
    return [f for p in PAPERS for f in paper_outputs(p)] + [f for files in PAPER_OUTPUTS.values() for f in files]


def prepared_of(wildcards):
    return f"data/prepared/{EXPERIMENTS[wildcards.experiment]['dataset']}.pt"


def resolved_params(wildcards):
    """The job's complete hyper-parameters: the `params` rerun trigger sees any edit."""
    return resolve_hparams(config, wildcards.experiment, wildcards.algorithm)


def regex_of(names):
    """A wildcard constraint matching exactly these names (and nothing when empty)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def seed_outputs(experiment, kind):
    """One output file per seed of a batched experiment (`{algorithm}` stays a wildcard)."""
    name = {"model": "model.pt", "history": "history.csv", "run": "run.json", "metrics": "metrics.csv"}[kind]
    return [f"results/runs/{experiment}/{{algorithm}}/seed~{s}/{name}" for s in range(EXPERIMENTS[experiment]["seeds"])]


def resolved_params_of(experiment):
    """`params` function of a batched training rule (its experiment is fixed, not a wildcard)."""

    def resolved(wildcards):
        return resolve_hparams(config, experiment, wildcards.algorithm)

    return resolved


def partition_spec(wildcards):
    e = EXPERIMENTS[wildcards.experiment]
    return {k: e[k] for k in ("dataset", "domains", "partition_seed")} | {
        "validation_fraction": e.get("validation_fraction", 0.0)
    }


# ---- report -----------------------------------------------------------------------------------
# Report categories: one per paper, in this order (short key -> title shown in the report).
PAPER_TITLES = {
    "afl": "AFL (Mohri, Sivek, Suresh: Agnostic Federated Learning, ICML 2019)",
    "agnostic_fedavg": "AgnosticFedAvg (Ro et al., Interspeech 2021)",
    "wafl": "WAFL (On the Generalization of Wasserstein Robust Federated Learning, 2022)",
    "fedmm": "FedMM (Shen et al., AAMAS 2023)",
}


def paper_report(path, *, paper, label, caption):
    """Mark one output for `snakemake --report`, filed under its paper and its table/figure label.

    path: the output (may hold wildcards); paper: a key of PAPER_TITLES (the report category);
    label: "Table 1", "Figure 3b", ... (the subcategory); caption: .rst template relative to
    workflow/rules/, rendered with the producing job's `snakemake` object (params, wildcards,
    config, rule). A missing caption file or unknown paper stops the workflow before any job runs.
    """
    if paper not in PAPER_TITLES:
        sys.exit(f"fedshift: paper_report({path!r}): unknown paper {paper!r}; add it to PAPER_TITLES")
    if not (ROOT / "workflow" / "rules" / caption).resolve().is_file():
        sys.exit(f"fedshift: paper_report({path!r}): caption template {caption!r} not found")
    return report(
        path,
        caption=caption,
        category=PAPER_TITLES[paper],
        subcategory=label,
        labels={"output": label, "format": Path(path).suffix.lstrip(".")},
    )


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
