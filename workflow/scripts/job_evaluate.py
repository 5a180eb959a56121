"""Snakemake adapter of every paper's evaluation job (fedshift.jobs.evaluate_job)."""

from fedshift.contract import RUN_FILES, RunSpec, load_paper
from fedshift.jobs import evaluate_job
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log:
    w = sm.wildcards
    paper = load_paper(w.paper, sm.config["papers"][w.paper], sm.config)
    spec = RunSpec(w.paper, w.experiment, w.run, int(w.seed), tuple(sm.params.algorithms), sm.params.hparams)
    run_files = {k: sm.input[k] for k in RUN_FILES if k != "metrics"}
    inputs = {k: v for k, v in sm.input.items() if k not in run_files}
    log.info("evaluate %s", spec.path)
    evaluate_job(paper, spec, inputs, run_files, sm.output[0], device=sm.config["device"], threads=sm.threads)
