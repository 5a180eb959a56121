# Helpers of workflow/rules/fedmm.smk: the FedMM run set, its sources and input/params functions (no rules).

FEDMM = config["fedmm"]
FEDMM_TASKS = FEDMM["tasks"]
FEDMM_SOURCES = fedmm_paper.sources_of(FEDMM)
FEDMM_RUNS = fedmm_paper.runs_of(FEDMM)


def fedmm_source_files(src):
    """Raw files of one unpinned source and the sha256 records written beside them."""
    files = [f"data/raw/fedmm/{src}/{f['name']}" for f in FEDMM["sources"][src]["files"]]
    return files + [f"{f}.sha256" for f in files]


def _fedmm_check_mirror_early():
    """With a data mirror, fail before any job when it lacks a source file that still has to be fetched."""
    mirror = config["data_mirror"]
    if not mirror:
        return
    missing = [
        f"{Path(mirror) / FEDMM['sources'][s]['mirror_dir'] / Path(f).name}"
        for s in FEDMM_SOURCES
        for f in fedmm_source_files(s)[: len(FEDMM["sources"][s]["files"])]
        if not Path(f).exists() and not (Path(mirror) / FEDMM["sources"][s]["mirror_dir"] / Path(f).name).is_file()
    ]
    if missing:
        sys.exit(f"fedshift: data_mirror={mirror!r} lacks FedMM source files (set data_mirror='' to download):\n  "
                 + "\n  ".join(missing))


_fedmm_check_mirror_early()


def fedmm_prepared(task, role):
    return f"data/prepared/{fedmm_paper.prepared_name(FEDMM_TASKS[task], role)}.pt"


def fedmm_source_input(wildcards):
    return fedmm_prepared(wildcards.ftask, "source")


def fedmm_target_input(wildcards):
    return fedmm_prepared(wildcards.ftask, "target")


def fedmm_run_dir(task, run, seed):
    return f"results/runs/fedmm/{task}/{run}/seed~{seed}"


def fedmm_resolved(wildcards):
    return fedmm_paper.resolve_run(FEDMM, wildcards.ftask, wildcards.frun)


def fedmm_partition_input(wildcards):
    clients = fedmm_paper.parse_run_id(wildcards.frun)["clients"]
    return f"data/partitions/fedmm/{wildcards.ftask}/{clients}.json"


def fedmm_partition_data(wildcards):
    return {k: FEDMM_TASKS[wildcards.ftask].get(k)
            for k in ("source", "target", "transfer", "source_size", "target_test_fraction", "partition_seed")}


def fedmm_weights(wildcards):
    if FEDMM_TASKS[wildcards.ftask]["network"]["kind"] == "office":
        return fedmm_source_files("mobilenet_v2")[0]
    return []


def fedmm_histories(name):
    return [f"{fedmm_run_dir(t, r, s)}/history.csv" for t, r, s in fedmm_paper.runs_of(FEDMM, name)]


def fedmm_outputs(name):
    if name == "table1":
        return [f"results/tables/fedmm/table1.{x}" for x in ("csv", "md")]
    return [f"results/tables/fedmm/{name}.csv"] + [f"results/figures/fedmm/{name}.{x}" for x in ("pdf", "png")]


PAPER_OUTPUTS["fedmm"] = [f for name in FEDMM["outputs"] for f in fedmm_outputs(name)]
