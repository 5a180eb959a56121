# The paper contract's stages (fedshift.contract, fedshift.jobs), one rule each, for every paper plug-in of
# config `papers:`; no paper is named here. One wildcard vocabulary and one path layout:
#   data/partitions/{paper}/{partition}                                  rule paper_partition
#   results/runs/{paper}/{experiment}/{run}/seed~{seed}/<RUN_FILES>      rules paper_train, paper_evaluate
#   the paper's named tables and figures (Paper.outputs)                 one rule per output, named by it
# A run's hyper-parameters come from its RunSpec (looked up by path), never parsed back from the path.


wildcard_constraints:
    paper=regex_of(list(PAPER_PLUGINS)),
    run=r"[A-Za-z0-9_.+~-]+",
    partition=r"[A-Za-z0-9_.+~/-]+",


rule paper_partition:
    input:
        unpack(partition_inputs),
    output:
        "data/partitions/{paper}/{partition}",
    params:
        spec=partition_params,
        code=partition_code,
    log:
        "results/logs/{paper}/partition/{partition}.log",
    conda:
        ENV
    script:
        "../scripts/job_partition.py"


rule paper_train:
    input:
        unpack(run_inputs),
    output:
        **{
            k: f"results/runs/{{paper}}/{{experiment}}/{{run}}/seed~{{seed}}/{f}"
            for k, f in RUN_FILES.items()
            if k != "metrics"
        },
    params:
        hparams=run_hparams,
        algorithms=run_algorithms,
        code=run_code("job_train.py"),
        checkpoint="results/checkpoints/{paper}/{experiment}/{run}/seed~{seed}.pt",
        scale=SCALE,
        standins=STANDIN_DATASETS,
    log:
        "results/logs/{paper}/train/{experiment}/{run}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/{paper}/train/{experiment}/{run}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=run_resource("mem_mb", 4096),
        runtime=run_resource("runtime", 240),
    conda:
        ENV
    script:
        "../scripts/job_train.py"


# Experiments whose seeds one job trains together (the batched engine): one rule each, the same outputs per seed.
# Each outranks paper_train for its own (paper, experiment) files only (ruleorder), so another paper's experiment
# of the same name still trains one run per job.
for _paper, _exp in SEED_BATCHED:
    _seeds = sorted({s.seed for s in RUNS.values() if (s.paper, s.experiment) == (_paper, _exp)})
    _job = SeedsJob(_paper, _exp, _seeds)
    workflow.ruleorder(f"paper_train_seeds_{_paper}_{_exp}", "paper_train")

    rule:
        name:
            f"paper_train_seeds_{_paper}_{_exp}"
        input:
            unpack(_job.train_inputs),
        output:
            **{
                f"{k}_{s}": f"results/runs/{_paper}/{_exp}/{{run}}/seed~{s}/{f}"
                for s in _seeds
                for k, f in RUN_FILES.items()
                if k != "metrics"
            },
        params:
            hparams=seeds_hparams(_paper, _exp, _seeds),
            algorithms=_job.algorithms,
            seeds=_seeds,
            paper=_paper,
            experiment=_exp,
            code=_job.train_code,
            checkpoint=f"results/checkpoints/{_paper}/{_exp}/{{run}}/seeds.pt",
            scale=SCALE,
            standins=STANDIN_DATASETS,
        log:
            f"results/logs/{_paper}/train/{_exp}/{{run}}/seeds.log",
        benchmark:
            f"results/benchmarks/{_paper}/train/{_exp}/{{run}}/seeds.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=1,
            mem_mb=seeds_resource(_paper, _exp, _seeds[0], "mem_mb", 4096),
            runtime=seeds_resource(_paper, _exp, _seeds[0], "runtime", 240),
        conda:
            ENV
        script:
            "../scripts/job_train.py"


rule paper_evaluate:
    input:
        unpack(run_evaluate_inputs),
        model="results/runs/{paper}/{experiment}/{run}/seed~{seed}/model.pt",
        history="results/runs/{paper}/{experiment}/{run}/seed~{seed}/history.csv",
        artifacts="results/runs/{paper}/{experiment}/{run}/seed~{seed}/artifacts.pt",
        run="results/runs/{paper}/{experiment}/{run}/seed~{seed}/run.json",
    output:
        "results/runs/{paper}/{experiment}/{run}/seed~{seed}/metrics.csv",
    params:
        hparams=run_hparams,
        evaluation=run_evaluation,
        algorithms=run_algorithms,
        code=run_code("job_evaluate.py"),
    log:
        "results/logs/{paper}/evaluate/{experiment}/{run}/seed~{seed}.log",
    benchmark:
        "results/benchmarks/{paper}/evaluate/{experiment}/{run}/seed~{seed}.tsv"
    threads: config["threads_per_job"]
    resources:
        gpu=1,
        mem_mb=run_resource("mem_mb", 4096),
    conda:
        ENV
    script:
        "../scripts/job_evaluate.py"


# ... and the seeds of a run id trained in one job are evaluated in one job too.
for _paper, _exp in SEED_BATCHED:
    _seeds = sorted({s.seed for s in RUNS.values() if (s.paper, s.experiment) == (_paper, _exp)})
    _job = SeedsJob(_paper, _exp, _seeds)
    workflow.ruleorder(f"paper_evaluate_seeds_{_paper}_{_exp}", "paper_evaluate")

    rule:
        name:
            f"paper_evaluate_seeds_{_paper}_{_exp}"
        input:
            unpack(_job.evaluate_inputs),
        output:
            **{f"metrics_{s}": f"results/runs/{_paper}/{_exp}/{{run}}/seed~{s}/metrics.csv" for s in _seeds},
        params:
            hparams=seeds_hparams(_paper, _exp, _seeds),
            algorithms=_job.algorithms,
            evaluation=_job.evaluation,
            seeds=_seeds,
            paper=_paper,
            experiment=_exp,
            code=_job.evaluate_code,
        log:
            f"results/logs/{_paper}/evaluate/{_exp}/{{run}}/seeds.log",
        benchmark:
            f"results/benchmarks/{_paper}/evaluate/{_exp}/{{run}}/seeds.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=1,
            mem_mb=4096,
        conda:
            ENV
        script:
            "../scripts/job_evaluate.py"


# Experiments one job trains and evaluates whole (`jobs: {experiments_together: true}`): one rule each, the same
# files as the rules above; each outranks them (and paper_partition, for the partitions only it reads).
for (_paper, _exp), _job in EXPERIMENT_JOBS.items():
    workflow.ruleorder(f"paper_experiment_{_paper}_{_exp}", "paper_train")
    workflow.ruleorder(f"paper_experiment_{_paper}_{_exp}", "paper_evaluate")
    workflow.ruleorder(f"paper_experiment_{_paper}_{_exp}", "paper_partition")

    rule:
        name:
            f"paper_experiment_{_paper}_{_exp}"
        input:
            _job.inputs(PAPER_PLUGINS),
        output:
            _job.outputs(),
        params:
            runs=[
                {"run": s.run, "seed": s.seed, "algorithms": list(s.algorithms), "hparams": dict(s.hparams)}
                for s in _job.runs
            ],
            evaluation=[PAPER_PLUGINS[_paper].evaluate_params(s) for s in _job.runs],
            partitions=[p.name for p in _job.partitions],
            partition_params=[dict(p.params) for p in _job.partitions],
            paper=_paper,
            experiment=_exp,
            code=code_of(
                "job_experiment.py",
                algorithms=sorted({a for s in _job.runs for a in s.algorithms}),
                paper=PAPER_PLUGINS[_paper],
                modules={m for s in _job.runs for m in s.modules},
            ),
            checkpoints=f"results/checkpoints/{_paper}/{_exp}/experiment",
            scale=SCALE,
            standins=STANDIN_DATASETS,
        log:
            f"results/logs/{_paper}/experiment/{_exp}.log",
        benchmark:
            f"results/benchmarks/{_paper}/experiment/{_exp}.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=1,
            mem_mb=experiment_resource(_job, "mem_mb", 4096),
            runtime=experiment_resource(_job, "runtime", 240),
        conda:
            ENV
        script:
            "../scripts/job_experiment.py"


# One rule per named table/figure (showyourwork): `snakemake <name>` remakes it from tidy run files, never training.
for _paper in PAPER_PLUGINS.values():
    for _out in _paper.outputs():

        rule:
            name:
                _out.name
            input:
                list(_out.inputs),
            output:
                **{k: plugin_report(f, _paper, _out.label) for k, f in _out.files.items()},
            params:
                paper=_paper.name,
                output=_out.name,
                spec=dict(_out.params),
                code=code_of("job_output.py", algorithms=[], paper=_paper),
                scale=SCALE,
                standins=STANDIN_DATASETS,
            log:
                f"results/logs/{_paper.name}/{_out.name}.log",
            localrule: True
            conda:
                ENV
            script:
                "../scripts/job_output.py"

    PAPER_OUTPUTS[_paper.name] = [f for o in _paper.outputs() for f in o.files.values()]

    rule:
        name:
            _paper.name
        input:
            PAPER_OUTPUTS[_paper.name],
        localrule: True

    if _paper.rules() is not None:

        include: str(_paper.resolve_path(_paper.rules()))
