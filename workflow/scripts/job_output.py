"""Snakemake adapter of every paper's named table/figure job (fedshift.jobs.output_job)."""

from fedshift.budget import job_scale
from fedshift.contract import load_paper
from fedshift.jobs import output_job
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log, job_scale(sm.params.scale, sm.params.standins):
    paper = load_paper(sm.params.paper, sm.config["papers"][sm.params.paper], sm.config)
    spec = next(o for o in paper.outputs() if o.name == sm.params.output)
    log.info("output %s of %s from %d input(s)", spec.name, paper.name, len(sm.input))
    output_job(paper, spec, list(sm.input), dict(sm.output.items()))
