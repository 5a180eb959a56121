# Training: one job per (experiment, algorithm, seed). Hyper-parameters arrive through `params`
# (editing one reruns exactly the jobs it affects); the job checkpoints under results/checkpoints
# and resumes from there when killed.


rule train:
    input:
        prepared=prepared_of,
        partition="data/partitions/{experiment}.json",
    output:
        model="results/runs/{experiment}/{algorithm}/seed~{seed}/model.pt",
        history="results/runs/{experiment}/{algorithm}/seed~{seed}/history.csv",
        run="results/runs/{experiment}/{algorithm}/seed~{seed}/run.json",
    params:
        resolved=resolved_params,
        device=config["device"],
        checkpoint="results/checkpoints/{experiment}/{algorithm}/seed~{seed}.pt",
    log:
        "results/logs/train/{experiment}/{algorithm}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/train/{experiment}/{algorithm}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=2048,
        runtime=120,
    conda:
        ENV
    script:
        "../scripts/train.py"
