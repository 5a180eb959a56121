# FedMM (Shen et al., AAMAS 2023; arXiv:2110.08477): raw files from the registry's download rules
# (download_<dataset>, data.smk) → the shared prepare rules (data.smk: MNIST-M from BSDS500, the full MNIST-M,
# Office-31) → one partition per (task, client setting) → one training job per (task, run, seed), evaluated on
# the target test set every eval_every rounds → Figs. 1, 4–7 and Table 1 (rules fedmm_fig1 … fedmm_table1,
# target `fedmm`). Config: config/papers/fedmm.yaml (section `fedmm:`); library code in fedshift.papers.fedmm /
# fedmm_report.


include: "fedmm_common.smk"


wildcard_constraints:
    ftask=regex_of(list(FEDMM_TASKS)),
    frun=r"[a-z_]+-(dann|cdan|mdd)-(p[0-9.]+|s\d+t\d+)-M\d+-e[0-9.e+-]+",
    fclients=r"(p[0-9.]+|s\d+t\d+)",


rule fedmm_partition:
    input:
        source=fedmm_source_input,
        target=fedmm_target_input,
    output:
        "data/partitions/fedmm/{ftask}/{fclients}.json",
    params:
        data=fedmm_partition_data,
        code=code_of("fedmm_partition.py", algorithms=[]),
    log:
        "results/logs/fedmm/partition/{ftask}/{fclients}.log",
    conda:
        ENV
    script:
        "../scripts/fedmm_partition.py"


rule fedmm_train:
    input:
        source=fedmm_source_input,
        target=fedmm_target_input,
        partition=fedmm_partition_input,
        weights=fedmm_weights,
    output:
        model="results/runs/fedmm/{ftask}/{frun}/seed~{seed}/model.pt",
        history="results/runs/fedmm/{ftask}/{frun}/seed~{seed}/history.csv",
        run="results/runs/fedmm/{ftask}/{frun}/seed~{seed}/run.json",
    params:
        resolved=fedmm_resolved,
        code=code_of("fedmm_train.py", algorithms=fedmm_algorithms),
        checkpoint="results/checkpoints/fedmm/{ftask}/{frun}/seed~{seed}.pt",
    log:
        "results/logs/fedmm/train/{ftask}/{frun}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/fedmm/train/{ftask}/{frun}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=8192,
        runtime=720,
    conda:
        ENV
    script:
        "../scripts/fedmm_train.py"


for _out in fedmm_paper.OUTPUTS:
    if _out not in FEDMM["outputs"]:
        continue

    rule:
        name:
            f"fedmm_{_out}"
        input:
            fedmm_histories(_out),
        output:
            **{
                Path(f).suffix[1:]: paper_report(
                    f,
                    paper="fedmm",
                    label="Table 1" if _out == "table1" else f"Figure {_out[3:]}",
                    caption="../report/fedmm.rst",
                )
                for f in fedmm_outputs(_out)
            },
        params:
            code=code_of("fedmm_figure.py"),
            output=_out,
            spec=FEDMM["figures"][_out],
        log:
            f"results/logs/fedmm/{_out}.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/fedmm_figure.py"


rule fedmm:
    input:
        PAPER_OUTPUTS["fedmm"],
    localrule: True
