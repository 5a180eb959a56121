"""Snakemake adapter: mean ± std over seeds → tidy CSV plus the paper's layout in Markdown and LaTeX.

Also writes the per-run rows (``<table>_runs.csv``: experiment, model, seed, column, metric, value), from which
claims pair two models seed by seed (fedshift.claims).
"""

import pandas as pd

from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.reporting import aggregate, mark_rehearsal, to_latex, to_markdown

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    runs = pd.concat([pd.read_csv(p) for p in sm.input], ignore_index=True)
    table = aggregate(runs)
    with atomic_write(sm.output.runs) as fh:
        runs.to_csv(fh, index=False)
    with atomic_write(sm.output.csv) as fh:
        table.to_csv(fh, index=False)
    md = to_markdown(table, sm.params.spec)
    with atomic_write(sm.output.md) as fh:
        fh.write(md)
    with atomic_write(sm.output.tex) as fh:
        fh.write(to_latex(table, sm.params.spec))
    log.info("\n%s", md)
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
