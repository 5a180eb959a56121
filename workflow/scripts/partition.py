"""Snakemake adapter: write an experiment's domain partition as an index map."""

from fedshift.data.prepare import load_prepared
from fedshift.experiments import make_partition
from fedshift.io import write_json
from fedshift.logs import job_logging

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    part = make_partition(sm.params.spec, load_prepared(sm.input[0]), sm.params.spec["partition_seed"])
    for split in ("train", "test"):
        log.info("%s: %s", split, {k: len(v) for k, v in part[split].items()})
    write_json(sm.output[0], part)
