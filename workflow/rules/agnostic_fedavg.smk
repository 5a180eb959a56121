# AgnosticFedAvg (Ro et al. 2021, arXiv:2104.02748) and the AFL language-model Table 3 (Mohri et al. 2019 §5.3):
# raw data -> one data job per experiment (clients with a domain id per example, per-domain test sets) -> one
# training job per (experiment, algorithm, seed) (per-domain test metrics every log_every rounds, λ over rounds)
# -> one rule per named output (afa_<name>: tables, figures), target `agnostic_fedavg`.
# Config: config/papers/agnostic_fedavg.yaml (section `agnostic_fedavg:`); library: fedshift.papers.agnostic_fedavg.


include: "agnostic_fedavg_common.smk"


wildcard_constraints:
    aexp=regex_of(list(AFA_EXPS)),
    aalg=r"[a-z0-9_]+",


rule afa_data:
    input:
        unpack(afa_raw),
    output:
        data="data/partitions/agnostic_fedavg/{aexp}.pt",
        summary="data/partitions/agnostic_fedavg/{aexp}.json",
    params:
        experiment=afa_experiment,
        raw=afa_raw_dirs,
        code=code_of("agnostic_fedavg_data.py", algorithms=["agnostic_fedavg"]),
    log:
        "results/logs/agnostic_fedavg/data/{aexp}.log",
    resources:
        mem_mb=8192,
    conda:
        ENV
    script:
        "../scripts/agnostic_fedavg_data.py"


rule afa_train:
    input:
        data="data/partitions/agnostic_fedavg/{aexp}.pt",
    output:
        model="results/runs/agnostic_fedavg/{aexp}/{aalg}/seed~{seed}/model.pt",
        history="results/runs/agnostic_fedavg/{aexp}/{aalg}/seed~{seed}/history.csv",
        metrics="results/runs/agnostic_fedavg/{aexp}/{aalg}/seed~{seed}/metrics.csv",
        run="results/runs/agnostic_fedavg/{aexp}/{aalg}/seed~{seed}/run.json",
    params:
        resolved=afa_resolved,
        code=code_of("agnostic_fedavg_train.py", algorithms=afa_algorithms),
        checkpoint="results/checkpoints/agnostic_fedavg/{aexp}/{aalg}/seed~{seed}.pt",
    log:
        "results/logs/agnostic_fedavg/train/{aexp}/{aalg}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/agnostic_fedavg/train/{aexp}/{aalg}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=8192,
        runtime=720,
    conda:
        ENV
    script:
        "../scripts/agnostic_fedavg_train.py"


for _name, _o in AFA["outputs"].items():

    rule:
        name:
            f"afa_{_name}"
        input:
            **afa_output_inputs(_name),
        output:
            **{
                Path(f).name.replace(".", "_"): paper_report(
                    f, paper=_o["paper"], label=_o["label"], caption="../report/agnostic_fedavg.rst"
                )
                for f in afa_output_files(_name)
            },
        params:
            code=code_of("agnostic_fedavg_report.py"),
            name=_name,
            spec=_o,
            experiments={e: AFA_EXPS[e] for e in _o.get("experiments", [_o.get("experiment")])},
        log:
            f"results/logs/agnostic_fedavg/{_name}.log",
        localrule: True
        conda:
            ENV
        script:
            "../scripts/agnostic_fedavg_report.py"


rule agnostic_fedavg:
    input:
        PAPER_OUTPUTS["agnostic_fedavg"],
    localrule: True
