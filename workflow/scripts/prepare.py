"""Snakemake adapter: decode one dataset's raw files once into tensors."""

from pathlib import Path

from fedshift.data.prepare import prepare_dataset
from fedshift.data.registry import load_plugins
from fedshift.logs import job_logging

with job_logging(snakemake.log[0]):  # noqa: F821
    sm = snakemake  # noqa: F821
    load_plugins(sm.params.dataset_plugins)  # a dataset plug-in's decoder (config `dataset_plugins`)
    prepare_dataset(sm.wildcards.dataset, Path(sm.input[0]).parent, sm.output[0])
