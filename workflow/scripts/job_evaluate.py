"""Snakemake adapter of every paper's evaluation job (fedshift.jobs.evaluate_job).

One run, or every seed of a run id trained together (rules paper_evaluate_seeds_*).
"""

from fedshift.contract import RUN_FILES, RunSpec, load_paper, split_seeds_inputs
from fedshift.jobs import evaluate_job
from fedshift.logs import job_logging

sm = snakemake  # noqa: F821
with job_logging(sm.log[0]) as log:
    w = sm.wildcards
    together = "seed" not in w.keys()
    name = sm.params.paper if together else w.paper
    experiment = sm.params.experiment if together else w.experiment
    paper = load_paper(name, sm.config["papers"][name], sm.config)
    seeds = list(sm.params.seeds) if together else [int(w.seed)]
    hparams = sm.params.hparams if together else {seeds[0]: sm.params.hparams}
    run_keys = [k for k in RUN_FILES if k != "metrics"]
    own = {f"{k}_{s}" for k in run_keys for s in seeds} if together else set(run_keys)
    shared = split_seeds_inputs({k: v for k, v in sm.input.items() if k not in own}, seeds)
    for seed, inputs in zip(seeds, shared, strict=True):
        spec = RunSpec(name, experiment, w.run, seed, tuple(sm.params.algorithms), hparams[seed])
        end = f"_{seed}" if together else ""
        run_files = {k: sm.input[f"{k}{end}"] for k in run_keys}
        log.info("evaluate %s", spec.path)
        out = sm.output[f"metrics{end}"] if together else sm.output[0]
        evaluate_job(paper, spec, inputs, run_files, out, device=sm.config["device"], threads=sm.threads)
