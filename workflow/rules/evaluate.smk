# Evaluation: per-domain test accuracy and loss, the pooled column U and the agnostic column D_Λ.


rule evaluate:
    input:
        prepared=prepared_of,
        partition="data/partitions/{experiment}.json",
        model="results/runs/{experiment}/{algorithm}/seed~{seed}/model.pt",
    output:
        "results/runs/{experiment}/{algorithm}/seed~{seed}/metrics.csv",
    params:
        resolved=resolved_params,
        device=config["device"],
    log:
        "results/logs/evaluate/{experiment}/{algorithm}/seed~{seed}.log",
    threads: 1
    resources:
        mem_mb=2048,
    conda:
        ENV
    script:
        "../scripts/evaluate.py"
