"""Snakemake adapter: target validation/test metrics of one trained FedPALS-paper model."""

from fedshift.logs import job_logging
from fedshift.papers.fedpals import evaluate_job

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    df = evaluate_job(sm.params.resolved, int(sm.wildcards.seed), prepared_path=sm.input.prepared,
                      partition_path=sm.input.partition, model_path=sm.input.model, run_json_path=sm.input.run,
                      metrics_path=sm.output[0], device=sm.config["device"],
                      weights_path=sm.input.get("weights"))
    log.info("\n%s", df.to_string(index=False))
