"""Snakemake adapter: the verdict of every headline claim from the tidy tables built at this scale."""

import os

import pandas as pd

from fedshift.claims import claims_markdown, compare_runs, evaluate_claims, read_claims_csv, runs_machine
from fedshift.claims.confirmatory import judge_runs
from fedshift.claims.design import require_design
from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.reporting import mark_rehearsal

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    if sm.params.get("design"):  # a confirmatory run: refuse runs made under another design, or none
        judge_runs([f for f in sm.params.runs if os.path.exists(f)],
                   require_design(sm.config["design_hash"], sm.params.design, claims=dict(sm.params.claims)))
    tables = {path: pd.read_csv(path) for path in sm.params.tables}
    machine = runs_machine([f for f in sm.params.runs if os.path.exists(f)])  # the runs this scale trained
    verdicts = evaluate_claims(dict(sm.params.claims), tables, scale=sm.params.scale,
                               missing_data=list(sm.params.missing_data), not_run=dict(sm.params.not_run),
                               config=sm.params.config, machine=machine, settings=dict(sm.config))
    if sm.input.second:  # config claims_second_run: the same claims run again (another instruction set)
        verdicts = compare_runs(verdicts, read_claims_csv(sm.input.second[0]))
    with atomic_write(sm.output.csv) as fh:
        verdicts.to_csv(fh, index=False)
    md = claims_markdown(verdicts)
    with atomic_write(sm.output.md) as fh:
        fh.write(md)
    mark_rehearsal([sm.output.csv, sm.output.md], sm.config)  # the rehearsal's verdicts are all "not judged"
    log.info("\n%s", md)
