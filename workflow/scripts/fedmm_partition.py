"""Snakemake adapter: split one FedMM task's source and target rows over the clients of a setting."""

from fedshift.logs import job_logging
from fedshift.papers.fedmm import write_partition

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    write_partition(sm.params.data, sm.wildcards.fclients, sm.input.source, sm.input.target, sm.output[0])
