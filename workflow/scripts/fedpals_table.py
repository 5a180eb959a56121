"""Snakemake adapter: a FedPALS table (tidy CSV, Markdown with the paper's values, LaTeX)."""

import pandas as pd

from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.papers.fedpals_report import table, table_latex, table_markdown
from fedshift.reporting import mark_rehearsal

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    tidy = table(pd.concat([pd.read_csv(p) for p in sm.input], ignore_index=True), sm.params.spec)
    md = table_markdown(tidy, sm.params.spec)
    for path, text in ((sm.output.csv, tidy.to_csv(index=False)), (sm.output.md, md),
                       (sm.output.tex, table_latex(tidy, sm.params.spec))):
        with atomic_write(path) as fh:
            fh.write(text)
    log.info("\n%s", md)
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
