"""Snakemake adapter: train one AgnosticFedAvg (experiment, algorithm, seed) run."""

from fedshift.logs import job_logging
from fedshift.papers.agnostic_fedavg import train_job

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    log.info("job %s / %s / seed %s: %s", sm.wildcards.aexp, sm.wildcards.aalg, sm.wildcards.seed, sm.params.resolved)
    info = train_job(
        sm.params.resolved, int(sm.wildcards.seed), data_path=sm.input.data, model_path=sm.output.model,
        history_path=sm.output.history, metrics_path=sm.output.metrics, run_json_path=sm.output.run,
        checkpoint_path=sm.params.checkpoint, device=sm.config["device"], threads=sm.threads, workdir=sm.scriptdir,
    )
    log.info("done in %.1f s (%.1f ms per round) on %s", info["job_wall_time_s"], 1e3 * info["seconds_per_round"],
             info["environment"]["device"])
