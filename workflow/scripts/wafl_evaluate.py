"""Snakemake adapter: evaluate one WAFL run (clean and shifted metrics, ρ², convergence)."""

from fedshift.logs import job_logging
from fedshift.papers.wafl import evaluate_job

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    df = evaluate_job(
        sm.params.resolved, int(sm.wildcards.seed), sm.params.spec, prepared_path=sm.input.prepared,
        partition_path=sm.input.partition, model_path=sm.input.model, snapshots_path=sm.input.snapshots,
        metrics_path=sm.output[0], curve=sm.params.curve, target_path=sm.input.target[0] if sm.input.target else None,
        device=sm.config["device"], threads=sm.threads,
    )
    log.info("wrote %d rows:\n%s", len(df), df[df["round"] == df["round"].max()].to_string())
