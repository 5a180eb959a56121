# FedPALS (Listo Zec et al. 2024): label shift with a target label marginal known at the server.
# Config section `fedpals:` (config/papers/fedpals.yaml), helpers in fedpals_common.smk. One partition
# per (experiment, seed); one training job per (experiment, algorithm, seed); tables and figures read
# tidy metrics only and never retrain.


rule fedpals_partition:
    wildcard_constraints:
        experiment=regex_of(FEDPALS_EXPERIMENTS),
    input:
        fedpals_prepared,
    output:
        "data/partitions/fedpals/{experiment}/seed~{seed}.json",
    params:
        spec=lambda wc: FEDPALS["experiments"][wc.experiment],
        code=code_of("fedpals_partition.py", algorithms=["fedpals"]),
    log:
        "results/logs/partition/{experiment}/seed~{seed}.log",
    conda:
        ENV
    script:
        "../scripts/fedpals_partition.py"


rule fedpals_train:
    wildcard_constraints:
        experiment=regex_of(FEDPALS_EXPERIMENTS),
    input:
        unpack(fedpals_job_inputs),
    output:
        model="results/runs/{experiment}/{algorithm}/seed~{seed}/model.pt",
        history="results/runs/{experiment}/{algorithm}/seed~{seed}/history.csv",
        run="results/runs/{experiment}/{algorithm}/seed~{seed}/run.json",
    params:
        resolved=fedpals_resolved,
        code=code_of("fedpals_train.py", algorithms=fedpals_algorithms),
        checkpoint="results/checkpoints/{experiment}/{algorithm}/seed~{seed}.pt",
    log:
        "results/logs/train/{experiment}/{algorithm}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/train/{experiment}/{algorithm}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=lambda wc: fedpals_resource(wc, "mem_mb", 3072),
        runtime=lambda wc: fedpals_resource(wc, "runtime", 120),
    conda:
        ENV
    script:
        "../scripts/fedpals_train.py"


rule fedpals_evaluate:
    wildcard_constraints:
        experiment=regex_of(FEDPALS_EXPERIMENTS),
    input:
        unpack(fedpals_job_inputs),
        model="results/runs/{experiment}/{algorithm}/seed~{seed}/model.pt",
        run="results/runs/{experiment}/{algorithm}/seed~{seed}/run.json",
    output:
        "results/runs/{experiment}/{algorithm}/seed~{seed}/metrics.csv",
    params:
        resolved=fedpals_resolved,
        code=code_of("fedpals_evaluate.py", algorithms=fedpals_algorithms),
    log:
        "results/logs/evaluate/{experiment}/{algorithm}/seed~{seed}.log",
    threads: 1
    resources:
        mem_mb=2048,
    conda:
        ENV
    script:
        "../scripts/fedpals_evaluate.py"


rule fedpals_synthetic:
    output:
        "results/runs/fedpals_synthetic/seed~{seed}/metrics.csv",
    params:
        spec=FP.synthetic_spec(FEDPALS, config.get("budget")),
        code=code_of("fedpals_synthetic.py", algorithms=["fedavg", "fedpals"]),
    log:
        "results/logs/train/fedpals_synthetic/seed~{seed}.log",
    benchmark:
        "results/benchmarks/train/fedpals_synthetic/seed~{seed}.tsv"
    threads: 1
    resources:
        mem_mb=1024,
        runtime=30,
    conda:
        ENV
    script:
        "../scripts/fedpals_synthetic.py"


for _name, _t in FEDPALS["tables"].items():

    rule:
        name:
            _name
        input:
            list(dict.fromkeys(f for r in _t["rows"] for f in fedpals_run_files(r["experiment"], "metrics.csv"))),
        output:
            **{
                ext: paper_report(
                    f"results/tables/fedpals/{_t['file']}.{ext}",
                    paper="fedpals",
                    label=paper_label(_t["title"]),
                    caption="../report/fedpals.rst",
                )
                for ext in ("csv", "md", "tex")
            },
        params:
            code=code_of("fedpals_table.py"),
            spec=_t,
        log:
            f"results/logs/tables/{_name}.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/fedpals_table.py"


for _name, _f in FEDPALS["figures"].items():

    rule:
        name:
            f"{_name}_data"
        input:
            fedpals_figure_inputs(_name),
        output:
            paper_report(
                f"results/tables/fedpals/{_f['file']}.csv",
                paper="fedpals",
                label=paper_label(_f["title"]),
                caption="../report/fedpals.rst",
            ),
        params:
            code=code_of("fedpals_figure_data.py"),
            spec=_f,
            x_of={e: FP.setting(FEDPALS["experiments"][e], _f.get("x", "")) for e in _f.get("experiments", [])},
        log:
            f"results/logs/figures/{_name}_data.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/fedpals_figure_data.py"

    rule:
        name:
            _name
        input:
            data=f"results/tables/fedpals/{_f['file']}.csv",
            partition=([f"data/partitions/fedpals/{_f['marginals_of']}/seed~0.json"] if "marginals_of" in _f else []),
        output:
            **{
                ext: paper_report(
                    f"results/figures/fedpals/{_f['file']}.{ext}",
                    paper="fedpals",
                    label=paper_label(_f["title"]),
                    caption="../report/fedpals.rst",
                )
                for ext in ("pdf", "png")
            },
        params:
            code=code_of("fedpals_plot.py"),
            spec=_f,
        log:
            f"results/logs/figures/{_name}.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/fedpals_plot.py"


rule fedpals:
    input:
        PAPER_OUTPUTS["fedpals"],
    localrule: True
