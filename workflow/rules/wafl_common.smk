# Helpers of workflow/rules/wafl.smk: the WAFL run set and input/params functions (no rules here).

WAFL = config["wafl"]
WAFL_EXPS = WAFL["experiments"]
WAFL_USED = wafl_paper.experiments_of(WAFL)


def wafl_run_dir(exp, alg, seed):
    return f"results/runs/wafl/{exp}/{alg}/seed~{seed}"


def wafl_metrics(figure):
    return [
        f"{wafl_run_dir(e, a, s)}/metrics.csv"
        for e in WAFL["figures"].get(figure, [])
        for a, s in wafl_paper.runs_of(WAFL, e, figure)
    ]


def wafl_figure_files(name):
    return [f"results/tables/wafl/{name}.csv"] + [f"results/figures/wafl/{name}.{x}" for x in ("pdf", "png")]


def wafl_table2_files():
    return [f"results/tables/wafl/table2.{x}" for x in ("csv", "md")] + [
        f"results/tables/wafl/lambda_{e}.csv" for e in WAFL["figures"].get("table2", [])
    ]


def wafl_outputs(name):
    return wafl_table2_files() if name == "table2" else wafl_figure_files(name)


def wafl_source(wildcards):
    return f"data/prepared/{WAFL_EXPS[wildcards.wexp]['dataset']}.pt"


def wafl_target(wildcards):
    t = WAFL_EXPS[wildcards.wexp].get("target")
    return [f"data/prepared/{t}.pt"] if t else []


def wafl_resolved(wildcards):
    return wafl_paper.resolve_run(WAFL, wildcards.wexp, wildcards.walg, config.get("budget"))


def wafl_eval_spec(wildcards):
    e = WAFL_EXPS[wildcards.wexp]
    return {"shift": e["shift"]}


def wafl_curve(wildcards):
    return wildcards.wexp in WAFL["figures"].get("fig5", []) and wildcards.walg == wafl_paper.curve_algorithm(
        WAFL, wildcards.wexp
    )


def wafl_algorithms(wildcards):
    """Registered algorithms of a run (its code hash)."""
    return [wafl_paper.registered_algorithm(wafl_paper.parse_algorithm(wildcards.walg)[0])]


PAPER_OUTPUTS["wafl"] = [f for name in WAFL["outputs"] for f in wafl_outputs(name)]


def wafl_partition_spec(wildcards):
    return WAFL_EXPS[wildcards.wexp]["partition"]


def wafl_lambda_points(wildcards):
    return WAFL_EXPS[wildcards.wexp].get("lambda_points", 500)


def wafl_lambda_resolved(wildcards):
    return wafl_paper.resolve_run(WAFL, wildcards.wexp, "fedavg", config.get("budget"))


def wafl_fractions(figure):
    return {e: WAFL_EXPS[e].get(f"{figure}_fraction", 0.4) for e in WAFL["figures"].get(figure, [])}
