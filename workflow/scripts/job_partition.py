"""Snakemake adapter of every paper's partition job (fedshift.jobs.partition_job); rules paper_partition_<paper>."""

from fedshift.contract import PartitionSpec, load_paper
from fedshift.jobs import partition_job
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log:
    name, partition = sm.params.paper, sm.wildcards.partition
    paper = load_paper(name, sm.config["papers"][name], sm.config)
    log.info("partition %s / %s", name, partition)
    partition_job(paper, PartitionSpec(partition, dict(sm.input.items()), sm.params.spec), sm.output[0])
