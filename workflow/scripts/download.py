"""Snakemake adapter: fetch and verify one dataset's raw files (mirror or canonical URLs)."""

from pathlib import Path

from fedshift.data.download import fetch_dataset, fetch_standin
from fedshift.data.sources import DatasetSpec
from fedshift.logs import job_logging

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    spec = DatasetSpec.from_registry(sm.params.dataset, sm.config["datasets"])
    mirror = Path(sm.config["data_mirror"]) if sm.config["data_mirror"] else None
    if sm.params.standin:  # the rehearsal's generated stand-in: explicitly not verified against the real checksum
        log.warning("dataset %s: STAND-IN for the rehearsal (config standin.datasets), not the real data", spec.name)
        fetch_standin(spec, Path(sm.output[0]).parent, Path(sm.input[0]).parent)
    else:
        net = sm.config.get("download", {})
        log.info("dataset %s (%s; licence %s) from %s", spec.name, spec.title, spec.licence, mirror or "canonical URLs")
        fetch_dataset(spec, Path(sm.output[0]).parent, mirror, timeout=net.get("timeout_s", 60.0),
                      retries=net.get("retries", 3), progress=mirror is None)
