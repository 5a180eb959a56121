# Helpers of the FedPALS rules (workflow/rules/fedpals.smk): config checks, job parameters, file lists.
# No rules here.
from fedshift.papers import fedpals as FP

try:
    FP.validate(config["fedpals"], config["datasets"])
except ConfigError as err:
    sys.exit(f"fedshift: {err}")

FEDPALS = config["fedpals"]
FEDPALS_EXPERIMENTS = list(FEDPALS["experiments"])


def fedpals_prepared(wildcards):
    return f"data/prepared/{FEDPALS['experiments'][wildcards.experiment]['dataset']}.pt"


def fedpals_resolved(wildcards):
    return FP.resolve(FEDPALS, wildcards.experiment, wildcards.algorithm)


def fedpals_run_files(experiment, name):
    e = FEDPALS["experiments"][experiment]
    return [
        f"{run_dir(experiment, a, s)}/{name}"
        for a in FP.algorithm_ids(e)
        for s in range(e["seeds"])
    ]


def fedpals_table_files(name):
    return [f"results/tables/fedpals/{FEDPALS['tables'][name]['file']}.{x}" for x in ("csv", "md", "tex")]


def fedpals_figure_files(name):
    return [f"results/figures/fedpals/{FEDPALS['figures'][name]['file']}.{x}" for x in ("pdf", "png")]


def fedpals_synthetic_runs():
    return [f"results/runs/fedpals_synthetic/seed~{s}/metrics.csv" for s in range(FEDPALS["synthetic"]["seeds"])]


def fedpals_figure_inputs(name):
    fig = FEDPALS["figures"][name]
    if fig["kind"] == "synthetic":
        return fedpals_synthetic_runs()
    files = [f for e in fig["experiments"] for f in fedpals_run_files(e, "metrics.csv")]
    if fig["kind"] == "curves":
        files += [f for e in fig["experiments"] for f in fedpals_run_files(e, "history.csv")]
    return files


FEDPALS_TARGETS = FEDPALS.get("targets", [*FEDPALS["tables"], *FEDPALS["figures"]])
PAPER_OUTPUTS["fedpals"] = [f for t in FEDPALS["tables"] if t in FEDPALS_TARGETS for f in fedpals_table_files(t)] + [
    f for g in FEDPALS["figures"] if g in FEDPALS_TARGETS for f in fedpals_figure_files(g)
]
