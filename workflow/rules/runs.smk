# The paper contract's stages (fedshift.contract, fedshift.jobs) for every paper plug-in of config `papers:`; no
# paper is named here. One path layout, and rules generated in one loop, each with its paper (and experiment) literal
# in its patterns, so no two rules make the same file:
#   data/partitions/<paper>/{partition}                          paper_partition_<paper>
#   results/runs/<paper>/<experiment>/{run}/seed~{seed}/<file>   paper_train_<paper>_<experiment> (all but metrics.csv),
#                                                                paper_evaluate_<paper>_<experiment> (metrics.csv)
#                                                                or, one job whole, paper_experiment_<paper>_<experiment>
#   the paper's named tables and figures (Paper.outputs)         one rule per output, named by it
# How many runs one job holds (a run, a run id's seeds, the experiment) is the experiment's property (fedshift.plan:
# RunJobs, EXPERIMENT_JOBS). A run's hyper-parameters come from its RunSpec (looked up by path), never parsed back
# from the path.


wildcard_constraints:
    run=r"[A-Za-z0-9_.+~-]+",
    partition=r"[A-Za-z0-9_.+~/-]+",


# A confirmatory run (config `design_hash`): every training job of an experiment the design trains records the hash in
# its run.json, and a changed hash reruns it (fedshift.claims.confirmatory). Other jobs' params are as they were.
DESIGN_PARAMS = {}
if config.get("design_hash"):
    from fedshift.claims.confirmatory import design_params

    try:
        DESIGN_PARAMS = design_params(config, ROOT)
    except ValueError as _err:  # the design file does not validate (fedshift.claims.design.DesignError)
        sys.exit(f"fedshift: config error at design_hash: {_err}")


# Partitions: one rule per paper, for the partitions no experiment's one job writes itself.
for _paper in PAPER_PLUGINS.values():
    _parts = PartitionJobs(_paper, EXPERIMENT_JOBS, code_of)
    if not _parts.partitions:
        continue

    rule:
        name:
            f"paper_partition_{_paper.name}"
        input:
            unpack(inspected_once(_parts.inputs)),
        output:
            f"data/partitions/{_paper.name}/{{partition}}",
        params:
            paper=_paper.name,
            spec=inspected_once(_parts.params),
            code=inspected_once(_parts.code),
        log:
            f"results/logs/{_paper.name}/partition/{{partition}}.log",
        wildcard_constraints:
            partition=regex_of(sorted(_parts.partitions)),
        conda:
            ENV
        script:
            "../scripts/job_partition.py"


# Runs: one training and one evaluation rule per experiment (a job: one run, or a run id's seeds; RunJobs).
for (_paper, _exp), _jobs in RUN_JOBS.items():
    _at = f"{_paper}/train/{_exp}/{_jobs.job}"

    rule:
        name:
            f"paper_train_{_paper}_{_exp}"
        input:
            unpack(inspected_once(_jobs.train_inputs)),
        output:
            **_jobs.run_files([k for k in RUN_FILES if k != "metrics"]),
        params:
            **DESIGN_PARAMS.get((_paper, _exp), {}),
            paper=_paper,
            experiment=_exp,
            seeds=inspected_once(_jobs.seeds_of),
            hparams=inspected_once(_jobs.hparams),
            algorithms=inspected_once(_jobs.algorithms),
            code=inspected_once(_jobs.train_code),
            checkpoint=f"results/checkpoints/{_paper}/{_exp}/{_jobs.job}.pt",
            scale=SCALE,
            standins=STANDIN_DATASETS,
        log:
            f"results/logs/{_at}.log",
        benchmark:
            f"results/benchmarks/{_at}.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=1,
            mem_mb=inspected_once(_jobs.resource("mem_mb", 4096)),
            runtime=inspected_once(_jobs.resource("runtime", 240)),
        conda:
            ENV
        script:
            "../scripts/job_train.py"

    _at = f"{_paper}/evaluate/{_exp}/{_jobs.job}"

    rule:
        name:
            f"paper_evaluate_{_paper}_{_exp}"
        input:
            unpack(inspected_once(_jobs.evaluate_inputs)),
        output:
            **_jobs.run_files(["metrics"]),
        params:
            paper=_paper,
            experiment=_exp,
            seeds=inspected_once(_jobs.seeds_of),
            hparams=inspected_once(_jobs.hparams),
            algorithms=inspected_once(_jobs.algorithms),
            evaluation=inspected_once(_jobs.evaluation),
            code=inspected_once(_jobs.evaluate_code),
        log:
            f"results/logs/{_at}.log",
        benchmark:
            f"results/benchmarks/{_at}.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=1,
            mem_mb=inspected_once(_jobs.resource("mem_mb", 4096)),
        conda:
            ENV
        script:
            "../scripts/job_evaluate.py"


# Experiments one job trains and evaluates whole (`jobs: {experiments_together: true}`), with the partitions only
# they read: the same files, the same bytes.
for (_paper, _exp), _job in EXPERIMENT_JOBS.items():

    rule:
        name:
            f"paper_experiment_{_paper}_{_exp}"
        input:
            _job.inputs(PAPER_PLUGINS),
        output:
            _job.outputs(),
        params:
            **DESIGN_PARAMS.get((_paper, _exp), {}),
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
