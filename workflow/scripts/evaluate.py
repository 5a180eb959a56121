"""Snakemake adapter: per-domain, U and D_Λ test metrics of one trained model."""

from fedshift.logs import job_logging
from fedshift.runner import evaluate_run

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    df = evaluate_run(sm.params.resolved, int(sm.wildcards.seed), prepared_path=sm.input.prepared,
                      partition_path=sm.input.partition, model_path=sm.input.model, metrics_path=sm.output[0],
                      device=sm.config["device"])
    log.info("\n%s", df.to_string(index=False))
