# WAFL (arXiv:2206.01432): partition -> one training job per (experiment, algorithm, seed) -> one evaluation
# job per run (clean + PGD-shifted metrics, ρ², convergence snapshots) -> Figs. 2–5 and Table 2 (named rules
# wafl_fig2 … wafl_table2, target `wafl`). Config: config/papers/wafl.yaml (section `wafl:`); library code in
# fedshift.papers.wafl / wafl_report, never imported by the jobs' logic from here beyond run enumeration.


include: "wafl_common.smk"


wildcard_constraints:
    wexp=regex_of(list(WAFL_EXPS)),
    walg=r"(fedavg|fedpgm|fedfgsm|wafl~[0-9.e+-]+)",


rule wafl_partition:
    input:
        wafl_source,
    output:
        "data/partitions/wafl/{wexp}.json",
    params:
        partition=wafl_partition_spec,
        code=code_of("wafl_partition.py", algorithms=[]),
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
        code=code_of("wafl_train.py", algorithms=wafl_algorithms),
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
        code=code_of("wafl_evaluate.py", algorithms=wafl_algorithms),
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
        paper_report("results/tables/wafl/lambda_{wexp}.csv", paper="wafl", label="Eq. 9", caption="../report/wafl.rst"),
    params:
        points=wafl_lambda_points,
        resolved=wafl_lambda_resolved,
        code=code_of("wafl_lambda.py", algorithms=[]),
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
            **{
                ext: paper_report(
                    f"results/{kind}/wafl/{_fig}.{ext}",
                    paper="wafl",
                    label=f"Figure {_fig[3:]}",
                    caption="../report/wafl.rst",
                )
                for ext, kind in (("csv", "tables"), ("pdf", "figures"), ("png", "figures"))
            },
        params:
            code=code_of("wafl_figure.py"),
            figure=_fig,
            fractions=wafl_fractions(_fig),
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
        **{
            ext: paper_report(
                f"results/tables/wafl/table2.{ext}", paper="wafl", label="Table 2", caption="../report/wafl.rst"
            )
            for ext in ("csv", "md")
        },
    params:
        code=code_of("wafl_table2.py"),
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
