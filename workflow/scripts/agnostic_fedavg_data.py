"""Snakemake adapter: build one AgnosticFedAvg experiment's clients and test sets from its raw files."""

from fedshift.logs import job_logging
from fedshift.papers.agnostic_fedavg import build_data

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    log.info("experiment %s: %s", sm.wildcards.aexp, sm.params.experiment)
    build_data(sm.params.experiment, sm.params.raw, sm.output.data, sm.output.summary)
