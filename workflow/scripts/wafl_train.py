"""Snakemake adapter: train one WAFL (experiment, algorithm, seed) run."""

from fedshift.logs import job_logging
from fedshift.papers.wafl import train_job

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    log.info("job %s / %s / seed %s: %s", sm.wildcards.wexp, sm.wildcards.walg, sm.wildcards.seed, sm.params.resolved)
    info = train_job(
        sm.params.resolved, int(sm.wildcards.seed), prepared_path=sm.input.prepared,
        partition_path=sm.input.partition, model_path=sm.output.model, snapshots_path=sm.output.snapshots,
        history_path=sm.output.history, run_json_path=sm.output.run, checkpoint_path=sm.params.checkpoint,
        device=sm.config["device"], threads=sm.threads, workdir=sm.scriptdir,
    )
    log.info("done in %.1f s (%.1f ms per round) on %s", info["job_wall_time_s"], 1e3 * info["seconds_per_round"],
             info["environment"]["device"])
