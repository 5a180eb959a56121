"""Snakemake adapter: fetch one FedMM source without a published sha256 (mirror or URLs) and record its sha256."""

from pathlib import Path

from fedshift.data.unpinned import fetch_unpinned
from fedshift.logs import job_logging

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    spec = sm.config["fedmm"]["sources"][sm.params.source]
    mirror = Path(sm.config["data_mirror"]) / spec["mirror_dir"] if sm.config["data_mirror"] else None
    net = sm.config.get("download", {})
    log.info("source %s from %s", sm.params.source, mirror or "its URLs")
    fetch_unpinned(sm.params.source, sm.params.files, Path(sm.output[0]).parent, mirror,
                   timeout=net.get("timeout_s", 60.0), retries=net.get("retries", 3))
