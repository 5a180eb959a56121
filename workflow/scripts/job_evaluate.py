"""Snakemake adapter of every paper's evaluation job (fedshift.jobs.evaluate_job): one run, or the seeds of a run id.

Rules paper_evaluate_<paper>_<experiment> (workflow/rules/runs.smk): the i-th seed's run files are the inputs <key>_<i>,
its metrics the output metrics_<i>.
"""

from fedshift.contract import RUN_FILES, RunSpec, load_paper
from fedshift.jobs import evaluate_job
from fedshift.logs import job_logging
from fedshift.plan import split_seeds_inputs

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log:
    name, experiment, run, seeds = sm.params.paper, sm.params.experiment, sm.wildcards.run, list(sm.params.seeds)
    paper = load_paper(name, sm.config["papers"][name], sm.config)
    run_keys = [k for k in RUN_FILES if k != "metrics"]
    own = {f"{k}_{i}" for k in run_keys for i in range(len(seeds))}
    shared = split_seeds_inputs({k: v for k, v in sm.input.items() if k not in own}, seeds)
    for i, (seed, inputs) in enumerate(zip(seeds, shared, strict=True)):
        spec = RunSpec(name, experiment, run, seed, tuple(sm.params.algorithms), sm.params.hparams[seed])
        log.info("evaluate %s", spec.path)
        evaluate_job(paper, spec, inputs, {k: sm.input[f"{k}_{i}"] for k in run_keys}, sm.output[f"metrics_{i}"],
                     device=sm.config["device"], threads=sm.threads)
