# Helpers of workflow/rules/agnostic_fedavg.smk: the AgnosticFedAvg run set and input/params functions (no rules).

AFA = config["agnostic_fedavg"]
AFA_EXPS = AFA["experiments"]
AFA_USED = afa_paper.experiments_of(AFA)


def afa_run_dir(exp, alg, seed):
    return f"results/runs/agnostic_fedavg/{exp}/{alg}/seed~{seed}"


def afa_runs(exp, algs=None):
    return [(a, s) for a, s in afa_paper.runs_of(AFA, exp) if algs is None or a in algs]


def afa_output_files(name):
    o = AFA["outputs"][name]
    paper = o["paper"]
    files = [f"results/tables/{paper}/{name}.{x}" for x in ("csv", "md")]
    if o["kind"] in ("toy", "curves"):
        files += [f"results/figures/{paper}/{name}.{x}" for x in ("pdf", "png")]
    return files


def afa_output_inputs(name):
    o = AFA["outputs"][name]
    exps = o.get("experiments", [o.get("experiment")])
    if o["kind"] == "stats":
        return {"summaries": [f"data/partitions/agnostic_fedavg/{e}.json" for e in exps]}
    kind = "metrics.csv" if o["kind"] == "table" else "history.csv"
    algs = list(o["rows"]) if "rows" in o else None
    return {
        "runs": [f"{afa_run_dir(e, a, s)}/{kind}" for e in exps for a, s in afa_runs(e, algs)],
        "summaries": [f"data/partitions/agnostic_fedavg/{e}.json" for e in exps],
    }


def afa_raw(wildcards):
    e = AFA_EXPS[wildcards.aexp]
    ds = sorted({d for s in e.get("data", {}).get("sources", []) for d in afa_paper.SOURCE_DATASETS[s]})
    return {d: raw_files(d) for d in ds}


def afa_raw_dirs(wildcards):
    return {d: f"data/raw/{d}" for d in afa_raw(wildcards)}


def afa_experiment(wildcards):
    """What the data job depends on: the experiment's kind and data settings (not its training settings)."""
    e = AFA_EXPS[wildcards.aexp]
    return {"kind": e["kind"], "data": e["data"]}


def afa_resolved(wildcards):
    return afa_paper.resolve_run(AFA, wildcards.aexp, wildcards.aalg, config.get("budget"))


def afa_algorithms(wildcards):
    """Registered algorithms of a run (its code hash)."""
    return [afa_paper.registered_algorithm(afa_resolved(wildcards)["train"]["kind"])]


PAPER_OUTPUTS["agnostic_fedavg"] = [f for name in AFA["build"] for f in afa_output_files(name)]
