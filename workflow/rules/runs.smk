# The paper contract's stages (fedshift.contract, fedshift.jobs), one rule each, for every paper plug-in of
# config `papers:`; no paper is named here. One wildcard vocabulary and one path layout:
#   data/partitions/{paper}/{partition}                                  rule paper_partition
#   results/runs/{paper}/{experiment}/{run}/seed~{seed}/<RUN_FILES>      rules paper_train, paper_evaluate
#   the paper's named tables and figures (Paper.outputs)                 one rule per output, named by it
# A run's hyper-parameters come from its RunSpec (looked up by path), never parsed back from the path.
from fedshift.contract import RUN_FILES

# (paper, experiment) pairs whose seeds train together in one job (Paper.seeds_per_job > 1)
SEED_BATCHED = sorted(
    {(s.paper, s.experiment) for s in RUNS.values() if PAPER_PLUGINS[s.paper].seeds_per_job(s.experiment) > 1}
)
PARTITIONS = {f"{p.name}/{part.name}": part for p in PAPER_PLUGINS.values() for part in p.partitions()}


def run_key(wildcards):
    return f"{wildcards.paper}/{wildcards.experiment}/{wildcards.run}/seed~{wildcards.seed}"


def spec_of(wildcards):
    """The RunSpec of the job's run (a path no paper lists is an error, not a guess)."""
    try:
        return RUNS[run_key(wildcards)]
    except KeyError:
        raise ValueError(f"fedshift: no paper lists the run {run_key(wildcards)}") from None


def run_path(paper, experiment, run, seed, key):
    return f"results/runs/{paper}/{experiment}/{run}/seed~{seed}/{RUN_FILES[key]}"


def run_inputs(wildcards):
    return PAPER_PLUGINS[wildcards.paper].inputs(spec_of(wildcards))


def run_hparams(wildcards):
    return dict(spec_of(wildcards).hparams)


def run_algorithms(wildcards):
    return list(spec_of(wildcards).algorithms)


def run_code(script):
    """`code` param of a run job: the script, its paper plug-in and exactly the run's algorithms."""

    def code(wildcards):
        return code_of(script, algorithms=run_algorithms(wildcards), paper=PAPER_PLUGINS[wildcards.paper])

    return code


def run_resource(name, default):
    def value(wildcards):
        return PAPER_PLUGINS[wildcards.paper].resources(spec_of(wildcards)).get(name, default)

    return value


def partition_of(wildcards):
    try:
        return PARTITIONS[f"{wildcards.paper}/{wildcards.partition}"]
    except KeyError:
        raise ValueError(f"fedshift: paper {wildcards.paper} lists no partition {wildcards.partition}") from None


wildcard_constraints:
    paper=regex_of(list(PAPER_PLUGINS)),
    run=r"[A-Za-z0-9_.+~-]+",
    partition=r"[A-Za-z0-9_.+~/-]+",


rule paper_partition:
    input:
        unpack(lambda wc: dict(partition_of(wc).inputs)),
    output:
        "data/partitions/{paper}/{partition}",
    params:
        spec=lambda wc: dict(partition_of(wc).params),
        code=lambda wc: code_of("job_partition.py", algorithms=[], paper=PAPER_PLUGINS[wc.paper]),
    log:
        "results/logs/{paper}/partition/{partition}.log",
    conda:
        ENV
    script:
        "../scripts/job_partition.py"


rule paper_train:
    wildcard_constraints:
        experiment=regex_of(sorted({s.experiment for s in RUNS.values()} - {e for _, e in SEED_BATCHED})),
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
for _paper, _exp in SEED_BATCHED:
    _seeds = sorted({s.seed for s in RUNS.values() if (s.paper, s.experiment) == (_paper, _exp)})

    rule:
        name:
            f"paper_train_seeds_{_paper}_{_exp}"
        input:
            unpack(lambda wc, p=_paper, e=_exp: run_inputs_of(p, e, wc.run)),
        output:
            **{
                f"{k}_{s}": f"results/runs/{_paper}/{_exp}/{{run}}/seed~{s}/{f}"
                for s in _seeds
                for k, f in RUN_FILES.items()
                if k != "metrics"
            },
        params:
            hparams=lambda wc, p=_paper, e=_exp, s=_seeds[0]: dict(RUNS[f"{p}/{e}/{wc.run}/seed~{s}"].hparams),
            seeds=_seeds,
            paper=_paper,
            experiment=_exp,
            code=lambda wc, p=_paper, e=_exp, s=_seeds[0]: code_of(
                "job_train.py", algorithms=list(RUNS[f"{p}/{e}/{wc.run}/seed~{s}"].algorithms), paper=PAPER_PLUGINS[p]
            ),
            checkpoint=f"results/checkpoints/{_paper}/{_exp}/{{run}}/seeds.pt",
        log:
            f"results/logs/{_paper}/train/{_exp}/{{run}}/seeds.log",
        benchmark:
            f"results/benchmarks/{_paper}/train/{_exp}/{{run}}/seeds.tsv"
        threads: config["threads_per_job"]
        resources:
            gpu=1,
            mem_mb=4096,
            runtime=240,
        conda:
            ENV
        script:
            "../scripts/job_train.py"


def run_inputs_of(paper, experiment, run):
    first = min(s.seed for s in RUNS.values() if (s.paper, s.experiment, s.run) == (paper, experiment, run))
    return PAPER_PLUGINS[paper].inputs(RUNS[f"{paper}/{experiment}/{run}/seed~{first}"])


rule paper_evaluate:
    input:
        unpack(lambda wc: PAPER_PLUGINS[wc.paper].evaluate_inputs(spec_of(wc))),
        model="results/runs/{paper}/{experiment}/{run}/seed~{seed}/model.pt",
        history="results/runs/{paper}/{experiment}/{run}/seed~{seed}/history.csv",
        artifacts="results/runs/{paper}/{experiment}/{run}/seed~{seed}/artifacts.pt",
        run="results/runs/{paper}/{experiment}/{run}/seed~{seed}/run.json",
    output:
        "results/runs/{paper}/{experiment}/{run}/seed~{seed}/metrics.csv",
    params:
        hparams=run_hparams,
        evaluation=lambda wc: PAPER_PLUGINS[wc.paper].evaluate_params(spec_of(wc)),
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


def plugin_report(path, paper, label):
    """Mark a plug-in paper's output for the report: its title is the category, its numbering the subcategory."""
    caption = paper.resolve_path(paper.caption)
    return report(
        path,
        caption=str(caption),
        category=paper.title,
        subcategory=label,
        labels={"output": label, "format": Path(path).suffix.lstrip(".")},
    )


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
                code=code_of("job_output.py", paper=_paper),
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
