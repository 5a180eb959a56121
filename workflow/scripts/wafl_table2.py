"""Snakemake adapter: WAFL Table 2 (domain adaptation, target accuracy) as CSV and Markdown."""

import pandas as pd

from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.papers import wafl_report as rep
from fedshift.reporting import mark_rehearsal

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    t = rep.table2(rep.collect(sm.input.metrics), sm.params.columns)
    with atomic_write(sm.output.csv) as fh:
        t.to_csv(fh, index=False)
    md = rep.table2_markdown(t)
    lam = [pd.read_csv(p) for p in sm.input.lambdas]
    md += "\nλ by eq. (9) (Wasserstein distances to the target, POT): " + "; ".join(
        f"{e}: client {int(d.loc[d['lambda'].idxmax(), 'client'])} (W2 {d.w2.min():.2f}, median {d.w2.median():.2f})"
        for e, d in zip(sm.params.columns, lam, strict=False)) + "\n"
    with atomic_write(sm.output.md) as fh:
        fh.write(md)
    log.info("\n%s", md)
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
