"""Snakemake adapter: train all seeds of one (experiment, algorithm) at once (batched path)."""

from fedshift.logs import job_logging
from fedshift.runner import train_runs

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    seeds = sm.params.seeds
    log.info("job %s / %s / seeds %s: %s", sm.params.resolved["experiment"], sm.wildcards.algorithm, seeds,
             sm.params.resolved["hparams"])
    outputs = [{"model": m, "history": h, "run": r}
               for m, h, r in zip(sm.output.model, sm.output.history, sm.output.run, strict=True)]
    infos = train_runs(sm.params.resolved, seeds, prepared_path=sm.input.prepared,
                       partition_path=sm.input.partition, outputs=outputs, checkpoint_path=sm.params.checkpoint,
                       device=sm.config["device"], threads=sm.threads, workdir=sm.scriptdir)
    log.info("%d runs done in %.1f s (%.2f ms per step for all runs) on %s", len(seeds), infos[0]["job_wall_time_s"],
             1e3 * infos[0]["seconds_per_round"], infos[0]["environment"]["device"])
