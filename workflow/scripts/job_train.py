"""Snakemake adapter of every paper's training job (fedshift.jobs.train_job): one run, or the seeds of one run id."""

from fedshift.budget import job_scale
from fedshift.contract import RUN_FILES, RunSpec, load_paper, split_seeds_inputs
from fedshift.jobs import train_job
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log, job_scale(sm.params.scale, sm.params.standins):
    w = sm.wildcards
    together = "seed" not in w.keys()  # rules paper_train_seeds_<paper>_<experiment>
    name = sm.params.paper if together else w.paper
    experiment = sm.params.experiment if together else w.experiment
    paper = load_paper(name, sm.config["papers"][name], sm.config)
    seeds = list(sm.params.seeds) if together else [int(w.seed)]
    hparams = sm.params.hparams if together else {seeds[0]: sm.params.hparams}
    specs = [RunSpec(name, experiment, w.run, s, tuple(sm.params.algorithms), hparams[s]) for s in seeds]
    files = [{k: sm.output[f"{k}_{s}" if together else k] for k in RUN_FILES if k != "metrics"} for s in seeds]
    inputs = split_seeds_inputs(dict(sm.input.items()), seeds)
    log.info("train %s / %s / %s, seed(s) %s: %s", name, experiment, w.run, seeds, hparams[seeds[0]])
    runs = train_job(paper, specs, inputs, files, checkpoint=sm.params.checkpoint, device=sm.config["device"],
                     threads=sm.threads, workdir=sm.scriptdir, code=sm.params.code)
    log.info("done in %.1f s (%.2f ms per round) on %s", runs[-1]["job_wall_time_s"],
             1e3 * runs[-1]["seconds_per_round"], runs[-1]["environment"]["device"])
