# Helpers of the FedPALS rules (workflow/rules/fedpals.smk): config checks, job parameters, file lists.
# No rules here.
from fedshift.papers import fedpals as FP

# (the section was validated by common.smk, before the mirror check)

FEDPALS = config["fedpals"]
FEDPALS_EXPERIMENTS = list(FEDPALS["experiments"])


def fedpals_prepared(wildcards):
    return f"data/prepared/{FEDPALS['experiments'][wildcards.experiment]['dataset']}.pt"


def fedpals_job_inputs(wildcards):
    """Prepared data, partition and, for a pretrained model, its verified ImageNet weights."""
    exp = FEDPALS["experiments"][wildcards.experiment]
    out = {
        "prepared": fedpals_prepared(wildcards),
        "partition": f"data/partitions/fedpals/{wildcards.experiment}/seed~{wildcards.seed}.json",
    }
    weights = FP.weights_file(exp)
    if weights:
        out["weights"] = weights
    return out


def fedpals_resource(wildcards, name, default):
    """A training job's resource (`mem_mb`, `runtime` in minutes) from its experiment's `resources`."""
    return FEDPALS["experiments"][wildcards.experiment].get("resources", {}).get(name, default)


def fedpals_resolved(wildcards):
    return FP.resolve(FEDPALS, wildcards.experiment, wildcards.algorithm, config.get("budget"))


def fedpals_algorithms(wildcards):
    """Registered algorithms of a run (its code hash)."""
    return [FP.registered_algorithm(fedpals_resolved(wildcards)["kind"])]


def fedpals_run_files(experiment, name):
    e = FEDPALS["experiments"][experiment]
    return [f"{run_dir(experiment, a, s)}/{name}" for a in FP.algorithm_ids(e) for s in range(e["seeds"])]


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
    if fig["kind"] == "weights":  # Fig. 5: α of every FedPALS variant, first seed
        e = fig["experiments"][0]
        return [
            f"{run_dir(e, a, 0)}/run.json"
            for a in FP.algorithm_ids(FEDPALS["experiments"][e])
            if a.startswith("fedpals~")
        ]
    files = [f for e in fig["experiments"] for f in fedpals_run_files(e, "metrics.csv")]
    if fig["kind"] == "curves":
        files += [f for e in fig["experiments"] for f in fedpals_run_files(e, "history.csv")]
    return files


FEDPALS_TARGETS = FP.targets_of(FEDPALS)
PAPER_OUTPUTS["fedpals"] = [f for t in FEDPALS["tables"] if t in FEDPALS_TARGETS for f in fedpals_table_files(t)] + [
    f for g in FEDPALS["figures"] if g in FEDPALS_TARGETS for f in fedpals_figure_files(g)
]
