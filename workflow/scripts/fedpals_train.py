"""Snakemake adapter: train one FedPALS-paper (experiment, algorithm, seed) job."""

from fedshift.logs import job_logging
from fedshift.papers.fedpals import train_job

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    log.info("job %s / %s / seed %s: %s", sm.wildcards.experiment, sm.wildcards.algorithm, sm.wildcards.seed,
             sm.params.resolved)
    run = train_job(sm.params.resolved, int(sm.wildcards.seed), prepared_path=sm.input.prepared,
                    partition_path=sm.input.partition, model_path=sm.output.model, history_path=sm.output.history,
                    run_json_path=sm.output.run, checkpoint_path=sm.params.checkpoint, device=sm.config["device"],
                    weights_path=sm.input.get("weights"),
                    threads=sm.threads, workdir=sm.scriptdir)
    log.info("done in %.1f s; selected round %d (validation %s %.4f)", run["job_wall_time_s"],
             run["selected_round"], run["selection_metric"], run["selected_validation_score"])
