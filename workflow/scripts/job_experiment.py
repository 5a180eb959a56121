"""Snakemake adapter of an experiment's one job (fedshift.jobs.experiment_job).

Config `jobs: {experiments_together: true}`: its own partitions, then every run id's seeds trained together and
evaluated. Each run id is stamped with its own code hash (fedshift.plan.job_code over its algorithms, as its own
job would be): a run id joining the experiment leaves the stamps of those already trained, which the job restores.
"""

from pathlib import Path

from fedshift.budget import job_scale
from fedshift.contract import RunSpec, load_paper
from fedshift.jobs import experiment_job
from fedshift.logs import job_logging
from fedshift.plan import ExperimentJob, job_code

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log, job_scale(sm.params.scale, sm.params.standins):
    name, experiment = sm.params.paper, sm.params.experiment
    paper = load_paper(name, sm.config["papers"][name], sm.config)
    runs = tuple(RunSpec(name, experiment, r["run"], r["seed"], tuple(r["algorithms"]), r["hparams"])
                 for r in sm.params.runs)
    parts = {p.name: p for p in paper.partitions()}
    job = ExperimentJob(name, experiment, runs, tuple(parts[p] for p in sm.params.partitions))
    log.info("experiment %s / %s: %d partition(s), %d run(s)", name, experiment, len(job.partitions), len(runs))
    portable = bool(sm.config.get("portable_cpu", False))
    modules = {s.run: s.modules for s in paper.runs() if s.experiment == experiment}  # the params carry none
    run_codes = {s.run: job_code(Path(sm.scriptdir), "job_experiment.py", algorithms=s.algorithms, paper=paper,
                                 modules=modules.get(s.run, ()), portable=portable) for s in runs}
    experiment_job(paper, job, checkpoints=sm.params.checkpoints, device=sm.config["device"], threads=sm.threads,
                   workdir=sm.scriptdir, code=sm.params.code, design_hash=sm.params.get("design_hash"),
                   run_codes=run_codes)
