"""Snakemake adapter of every paper's training job (fedshift.jobs.train_job): one run, or the seeds of one run id."""

from fedshift.contract import RUN_FILES, RunSpec, load_paper
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log:
    w = sm.wildcards
    paper_name = w.get("paper", sm.params.get("paper"))
    experiment = w.get("experiment", sm.params.get("experiment"))
    paper = load_paper(paper_name, sm.config["papers"][paper_name], sm.config)
    seeds = [int(w.seed)] if "seed" in w.keys() else list(sm.params.seeds)
    specs = [RunSpec(paper_name, experiment, w.run, s, tuple(sm.params.algorithms if "algorithms" in sm.params.keys()
                                                             else ()), sm.params.hparams) for s in seeds]
    if len(seeds) == 1 and "seed" in w.keys():
        outputs = [{k: sm.output[k] for k in RUN_FILES if k != "metrics"}]
    else:
        outputs = [{k: sm.output[f"{k}_{s}"] for k in RUN_FILES if k != "metrics"} for s in seeds]
    log.info("train %s / %s / %s, seed(s) %s: %s", paper_name, experiment, w.run, seeds, sm.params.hparams)
    from fedshift.jobs import train_job

    runs = train_job(paper, specs, dict(sm.input.items()), outputs, checkpoint=sm.params.checkpoint,
                     device=sm.config["device"], threads=sm.threads, workdir=sm.scriptdir)
    log.info("done in %.1f s (%.2f ms per round) on %s", runs[-1]["job_wall_time_s"],
             1e3 * runs[-1]["seconds_per_round"], runs[-1]["environment"]["device"])
