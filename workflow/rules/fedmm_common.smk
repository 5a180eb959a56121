# Helpers of workflow/rules/fedmm.smk: the FedMM run set and input/params functions (no rules).
# Raw files come from the registry's download rules (data.smk); common.smk adds fedmm_paper.datasets_of to
# DATASETS, so a data mirror that lacks one of their files fails before any job runs.

FEDMM = config["fedmm"]
FEDMM_TASKS = FEDMM["tasks"]
FEDMM_RUNS = fedmm_paper.runs_of(FEDMM)


def fedmm_prepared(task, role):
    return f"data/prepared/{fedmm_paper.prepared_name(FEDMM_TASKS[task], role)}.pt"


def fedmm_source_input(wildcards):
    return fedmm_prepared(wildcards.ftask, "source")


def fedmm_target_input(wildcards):
    return fedmm_prepared(wildcards.ftask, "target")


def fedmm_run_dir(task, run, seed):
    return f"results/runs/fedmm/{task}/{run}/seed~{seed}"


def fedmm_resolved(wildcards):
    return fedmm_paper.resolve_run(FEDMM, wildcards.ftask, wildcards.frun, config.get("budget"))


def fedmm_algorithms(wildcards):
    """Registered algorithms of a run (its code hash): the optimizer's name."""
    return [fedmm_resolved(wildcards)["optimizer"]]


def fedmm_partition_input(wildcards):
    clients = fedmm_paper.parse_run_id(wildcards.frun)["clients"]
    return f"data/partitions/fedmm/{wildcards.ftask}/{clients}.json"


def fedmm_partition_data(wildcards):
    return {
        k: FEDMM_TASKS[wildcards.ftask].get(k)
        for k in ("source", "target", "transfer", "source_size", "target_size", "partition_seed")
    }


def fedmm_weights(wildcards):
    if FEDMM_TASKS[wildcards.ftask]["network"]["kind"] == "office":
        return raw_files("mobilenet_v2")[0]
    return []


def fedmm_histories(name):
    return [f"{fedmm_run_dir(t, r, s)}/history.csv" for t, r, s in fedmm_paper.runs_of(FEDMM, name)]


def fedmm_outputs(name):
    if name == "table1":
        return [f"results/tables/fedmm/table1.{x}" for x in ("csv", "md")]
    return [f"results/tables/fedmm/{name}.csv"] + [f"results/figures/fedmm/{name}.{x}" for x in ("pdf", "png")]


PAPER_OUTPUTS["fedmm"] = [f for name in FEDMM["outputs"] for f in fedmm_outputs(name)]
