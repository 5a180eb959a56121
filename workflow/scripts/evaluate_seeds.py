"""Snakemake adapter: per-domain, U and D_Λ test metrics of every seed of one (experiment, algorithm)."""

from fedshift.logs import job_logging
from fedshift.runner import evaluate_runs

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    frames = evaluate_runs(sm.params.resolved, sm.params.seeds, prepared_path=sm.input.prepared,
                           partition_path=sm.input.partition, model_paths=list(sm.input.model),
                           metrics_paths=list(sm.output), device=sm.config["device"])
    for df in frames:
        log.info("\n%s", df.to_string(index=False))
