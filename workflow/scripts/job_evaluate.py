"""Snakemake adapter of every paper's evaluation job (fedshift.jobs.evaluate_job).

One run, or every seed of a run id trained together (rules paper_evaluate_seeds_*).
"""

from fedshift.contract import RUN_FILES, RunSpec, load_paper
from fedshift.jobs import evaluate_job
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log:
    w = sm.wildcards
    together = "seed" not in w.keys()
    name = sm.params.paper if together else w.paper
    experiment = sm.params.experiment if together else w.experiment
    paper = load_paper(name, sm.config["papers"][name], sm.config)
    for seed in sm.params.seeds if together else [int(w.seed)]:
        spec = RunSpec(name, experiment, w.run, seed, tuple(sm.params.algorithms), sm.params.hparams)
        end = f"_{seed}" if together else ""
        run_files = {k: sm.input[f"{k}{end}"] for k in RUN_FILES if k != "metrics"}
        own = {f"{k}_{s}" for k in RUN_FILES for s in (sm.params.seeds if together else [])} | set(RUN_FILES)
        inputs = {k: v for k, v in sm.input.items() if k not in own}
        log.info("evaluate %s", spec.path)
        out = sm.output[f"metrics{end}"] if together else sm.output[0]
        evaluate_job(paper, spec, inputs, run_files, out, device=sm.config["device"], threads=sm.threads)
