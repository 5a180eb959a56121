"""Snakemake adapter: partition one WAFL experiment's source dataset over its clients."""

from fedshift.logs import job_logging
from fedshift.papers.wafl import write_partition

with job_logging(snakemake.log[0]):  # noqa: F821
    sm = snakemake  # noqa: F821
    write_partition({"experiment": sm.wildcards.wexp, "partition": sm.params.partition}, sm.input[0], sm.output[0])
