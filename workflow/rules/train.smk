# Training: one job per (experiment, algorithm, seed), or, for experiments with `batch_seeds`,
# one job per (experiment, algorithm) that trains all seeds at once on the batched path (same
# per-seed outputs and results). Hyper-parameters arrive through `params` (editing one reruns
# exactly the jobs it affects); jobs checkpoint under results/checkpoints and resume when killed.


rule train:
    wildcard_constraints:
        experiment=regex_of(PER_SEED),
    input:
        prepared=prepared_of,
        partition="data/partitions/{experiment}.json",
    output:
        model="results/runs/{experiment}/{algorithm}/seed~{seed}/model.pt",
        history="results/runs/{experiment}/{algorithm}/seed~{seed}/history.csv",
        run="results/runs/{experiment}/{algorithm}/seed~{seed}/run.json",
    params:
        resolved=resolved_params,
        code=code_of("train.py", algorithms=["afl"]),
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


for _exp in BATCHED:

    rule:
        name:
            f"train_seeds_{_exp}"
        input:
            prepared=f"data/prepared/{EXPERIMENTS[_exp]['dataset']}.pt",
            partition=f"data/partitions/{_exp}.json",
        output:
            model=seed_outputs(_exp, "model"),
            history=seed_outputs(_exp, "history"),
            run=seed_outputs(_exp, "run"),
        params:
            resolved=resolved_params_of(_exp),
            seeds=list(range(EXPERIMENTS[_exp]["seeds"])),
            code=code_of("train_seeds.py", algorithms=["afl"]),
            checkpoint=f"results/checkpoints/{_exp}/{{algorithm}}/seeds.pt",
        log:
            f"results/logs/train/{_exp}/{{algorithm}}/seeds.log",
        benchmark:
            f"results/benchmarks/train/{_exp}/{{algorithm}}/seeds.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=1,
            mem_mb=4096,
            runtime=240,
        conda:
            ENV
        script:
            "../scripts/train_seeds.py"
