"""Snakemake adapter: the tidy data behind one FedPALS figure."""

import pandas as pd

from fedshift.io import atomic_write, read_json
from fedshift.logs import job_logging
from fedshift.papers.fedpals_report import curves_data, sweep_data, synthetic_summary, weights_data
from fedshift.reporting import mark_rehearsal


def history(path):
    """A run's history with its (experiment, algorithm, seed) from the path .../<exp>/<alg>/seed~<s>/."""
    parts = path.split("/")
    return pd.read_csv(path).assign(experiment=parts[-4], algorithm=parts[-3], seed=int(parts[-2].split("~")[1]))


with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    spec = sm.params.spec
    kind = spec["kind"]
    if kind == "weights":
        data = weights_data([read_json(p) for p in sm.input])
    else:
        runs = pd.concat([pd.read_csv(p) for p in sm.input if p.endswith("metrics.csv")], ignore_index=True)
    if kind == "synthetic":
        data = synthetic_summary(runs)
    elif kind == "curves":
        data = curves_data(runs, pd.concat([history(p) for p in sm.input if p.endswith("history.csv")]),
                           spec.get("metric", "accuracy"), spec.get("per_algorithm", False))
    elif kind == "sweep":
        data = sweep_data(runs, dict(sm.params.x_of))
    with atomic_write(sm.output[0]) as fh:
        data.to_csv(fh, index=False)
    log.info("\n%s", data.to_string(index=False))
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
