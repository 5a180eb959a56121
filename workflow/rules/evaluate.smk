# Evaluation: per-domain test accuracy and loss, the pooled column U and the agnostic column D_Λ.


rule evaluate:
    wildcard_constraints:
        experiment=regex_of(PER_SEED),
    input:
        prepared=prepared_of,
        partition="data/partitions/{experiment}.json",
        model="results/runs/{experiment}/{algorithm}/seed~{seed}/model.pt",
    output:
        "results/runs/{experiment}/{algorithm}/seed~{seed}/metrics.csv",
    params:
        resolved=resolved_params,
        code=code_of("evaluate.py", algorithms=["afl"]),
    log:
        "results/logs/evaluate/{experiment}/{algorithm}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/evaluate/{experiment}/{algorithm}/seed~{seed}.tsv"
    threads: 1
    resources:
        mem_mb=2048,
    conda:
        ENV
    script:
        "../scripts/evaluate.py"


for _exp in BATCHED:

    rule:
        name:
            f"evaluate_seeds_{_exp}"
        input:
            prepared=f"data/prepared/{EXPERIMENTS[_exp]['dataset']}.pt",
            partition=f"data/partitions/{_exp}.json",
            model=seed_outputs(_exp, "model"),
        output:
            seed_outputs(_exp, "metrics"),
        params:
            resolved=resolved_params_of(_exp),
            seeds=list(range(EXPERIMENTS[_exp]["seeds"])),
            code=code_of("evaluate_seeds.py", algorithms=["afl"]),
        log:
            f"results/logs/evaluate/{_exp}/{{algorithm}}/seeds.log",
        benchmark:
            f"results/benchmarks/evaluate/{_exp}/{{algorithm}}/seeds.tsv"
        threads: 1
        resources:
            mem_mb=2048,
        conda:
            ENV
        script:
            "../scripts/evaluate_seeds.py"
