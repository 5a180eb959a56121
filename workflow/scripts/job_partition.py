"""Snakemake adapter of every paper's partition job (fedshift.jobs.partition_job)."""

from fedshift.contract import PartitionSpec, load_paper
from fedshift.jobs import partition_job
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log:
    w = sm.wildcards
    paper = load_paper(w.paper, sm.config["papers"][w.paper], sm.config)
    log.info("partition %s / %s", w.paper, w.partition)
    partition_job(paper, PartitionSpec(w.partition, dict(sm.input.items()), sm.params.spec), sm.output[0])
