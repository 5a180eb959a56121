"""Snakemake adapter (synthetic.smk): one run (seed) of the FedPALS synthetic task over every δ."""

from fedshift.logs import job_logging
from fedshift.papers.fedpals import synthetic_job

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    df = synthetic_job(sm.params.spec, int(sm.wildcards.seed), sm.output[0])
    log.info("\n%s", df.to_string(index=False))
