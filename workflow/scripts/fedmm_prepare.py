"""Snakemake adapter: prepare a FedMM dataset (MNIST-M from BSDS500, the full MNIST-M archive, Office-31)."""

from fedshift.logs import job_logging
from fedshift.papers.fedmm_data import prepare

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    prepare(sm.params.kind, list(sm.input), sm.output[0])
