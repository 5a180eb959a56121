# WAFL (arXiv:2206.01432): partition -> one training job per (experiment, algorithm, seed) -> one evaluation
# job per run (clean + PGD-shifted metrics, ρ², convergence snapshots) -> Figs. 2–5 and Table 2 (named rules
# wafl_fig2 … wafl_table2, target `wafl`). Config: config/papers/wafl.yaml (section `wafl:`); library code in
# fedshift.papers.wafl / wafl_report, never imported by the jobs' logic from here beyond run enumeration.

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
    return wafl_paper.resolve_run(WAFL, wildcards.wexp, wildcards.walg)


def wafl_eval_spec(wildcards):
    e = WAFL_EXPS[wildcards.wexp]
    return {"shift": e["shift"]}


def wafl_curve(wildcards):
    return (
        wildcards.wexp in WAFL["figures"].get("fig5", [])
        and wildcards.walg == wafl_paper.curve_algorithm(WAFL, wildcards.wexp)
    )


PAPER_OUTPUTS["wafl"] = [f for name in WAFL["outputs"] for f in wafl_outputs(name)]


wildcard_constraints:
    wexp=regex_of(list(WAFL_EXPS)),
    walg=r"(fedavg|fedpgm|fedfgsm|wafl~[0-9.e+-]+)",


rule wafl_partition:
    input:
        wafl_source,
    output:
        "data/partitions/wafl/{wexp}.json",
    params:
        partition=lambda wildcards: WAFL_EXPS[wildcards.wexp]["partition"],
        dataset=lambda wildcards: WAFL_EXPS[wildcards.wexp]["dataset"],
        library=LIBRARY,
    log:
        "results/logs/wafl/partition/{wexp}.log",
    conda:
        ENV
    script:
        "../scripts/wafl_partition.py"


rule wafl_train:
    input:
        prepared=wafl_source,
        partition="data/partitions/wafl/{wexp}.json",
    output:
        model="results/runs/wafl/{wexp}/{walg}/seed~{seed}/model.pt",
        snapshots="results/runs/wafl/{wexp}/{walg}/seed~{seed}/snapshots.pt",
        history="results/runs/wafl/{wexp}/{walg}/seed~{seed}/history.csv",
        run="results/runs/wafl/{wexp}/{walg}/seed~{seed}/run.json",
    params:
        resolved=wafl_resolved,
        library=LIBRARY,
        checkpoint="results/checkpoints/wafl/{wexp}/{walg}/seed~{seed}.pt",
    log:
        "results/logs/wafl/train/{wexp}/{walg}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/wafl/train/{wexp}/{walg}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=4096,
        runtime=240,
    conda:
        ENV
    script:
        "../scripts/wafl_train.py"


rule wafl_evaluate:
    input:
        prepared=wafl_source,
        target=wafl_target,
        partition="data/partitions/wafl/{wexp}.json",
        model="results/runs/wafl/{wexp}/{walg}/seed~{seed}/model.pt",
        snapshots="results/runs/wafl/{wexp}/{walg}/seed~{seed}/snapshots.pt",
    output:
        "results/runs/wafl/{wexp}/{walg}/seed~{seed}/metrics.csv",
    params:
        resolved=wafl_resolved,
        spec=wafl_eval_spec,
        curve=wafl_curve,
        library=LIBRARY,
    log:
        "results/logs/wafl/evaluate/{wexp}/{walg}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/wafl/evaluate/{wexp}/{walg}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=4096,
        runtime=120,
    conda:
        ENV
    script:
        "../scripts/wafl_evaluate.py"


rule wafl_lambda:
    input:
        prepared=wafl_source,
        target=wafl_target,
        partition="data/partitions/wafl/{wexp}.json",
    output:
        "results/tables/wafl/lambda_{wexp}.csv",
    params:
        points=lambda wildcards: WAFL_EXPS[wildcards.wexp].get("lambda_points", 500),
        resolved=lambda wildcards: wafl_paper.resolve_run(WAFL, wildcards.wexp, "fedavg"),
        library=LIBRARY,
    log:
        "results/logs/wafl/lambda/{wexp}.log",
    conda:
        ENV
    script:
        "../scripts/wafl_lambda.py"


for _fig in ("fig2", "fig3", "fig4", "fig5"):

    rule:
        name:
            f"wafl_{_fig}"
        input:
            wafl_metrics(_fig),
        output:
            csv=f"results/tables/wafl/{_fig}.csv",
            pdf=f"results/figures/wafl/{_fig}.pdf",
            png=f"results/figures/wafl/{_fig}.png",
        params:
            figure=_fig,
            fractions={
                e: WAFL_EXPS[e].get(f"{_fig}_fraction", 0.4) for e in WAFL["figures"].get(_fig, [])
            },
        log:
            f"results/logs/wafl/{_fig}.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/wafl_figure.py"


rule wafl_table2:
    input:
        metrics=wafl_metrics("table2"),
        lambdas=[f"results/tables/wafl/lambda_{e}.csv" for e in WAFL["figures"].get("table2", [])],
    output:
        csv="results/tables/wafl/table2.csv",
        md="results/tables/wafl/table2.md",
    params:
        columns=WAFL["table2_columns"],
    log:
        "results/logs/wafl/table2.log",
    localrule: True
    conda:
        ENV
    script:
        "../scripts/wafl_table2.py"


rule wafl:
    input:
        PAPER_OUTPUTS["wafl"],
    localrule: True
