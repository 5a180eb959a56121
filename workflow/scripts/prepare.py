"""Snakemake adapter: decode one dataset's raw files once into tensors."""

from pathlib import Path

from fedshift.data.prepare import prepare_dataset
from fedshift.logs import job_logging

with job_logging(snakemake.log[0]):  # noqa: F821
    sm = snakemake  # noqa: F821
    prepare_dataset(sm.wildcards.dataset, Path(sm.input[0]).parent, sm.output[0])
