"""Snakemake adapter: the tidy data behind one FedPALS figure."""

import pandas as pd

from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.papers.fedpals_report import labels_per_client_data, synthetic_summary

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    runs = pd.concat([pd.read_csv(p) for p in sm.input], ignore_index=True)
    if sm.params.spec["kind"] == "synthetic":
        data = synthetic_summary(runs)
    else:
        data = labels_per_client_data(runs, dict(sm.params.labels_per_client))
    with atomic_write(sm.output[0]) as fh:
        data.to_csv(fh, index=False)
    log.info("\n%s", data.to_string(index=False))
