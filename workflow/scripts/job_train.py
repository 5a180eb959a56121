"""Snakemake adapter of every paper's training job (fedshift.jobs.train_job): one run, or the seeds of one run id.

Rules paper_train_<paper>_<experiment> (workflow/rules/runs.smk): the i-th seed's files are the outputs <key>_<i>.
"""

from fedshift.budget import job_scale
from fedshift.contract import RUN_FILES, RunSpec, load_paper
from fedshift.jobs import train_job
from fedshift.logs import job_logging
from fedshift.plan import split_seeds_inputs

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log, job_scale(sm.params.scale, sm.params.standins):
    name, experiment, run, seeds = sm.params.paper, sm.params.experiment, sm.wildcards.run, list(sm.params.seeds)
    paper = load_paper(name, sm.config["papers"][name], sm.config)
    specs = [RunSpec(name, experiment, run, s, tuple(sm.params.algorithms), sm.params.hparams[s]) for s in seeds]
    files = [{k: sm.output[f"{k}_{i}"] for k in RUN_FILES if k != "metrics"} for i in range(len(seeds))]
    inputs = split_seeds_inputs(dict(sm.input.items()), seeds)
    log.info("train %s / %s / %s, seed(s) %s: %s", name, experiment, run, seeds, specs[0].hparams)
    runs = train_job(paper, specs, inputs, files, checkpoint=sm.params.checkpoint, device=sm.config["device"],
                     threads=sm.threads, workdir=sm.scriptdir, code=sm.params.code,
                     design_hash=sm.params.get("design_hash"))
    log.info("done in %.1f s (%.2f ms per round) on %s", runs[-1]["job_wall_time_s"],
             1e3 * runs[-1]["seconds_per_round"], runs[-1]["environment"]["device"])
