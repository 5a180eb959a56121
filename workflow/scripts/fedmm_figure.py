"""Snakemake adapter: one FedMM figure (tidy CSV + PDF/PNG) or Table 1 (CSV + Markdown) from the runs' histories."""

from fedshift.logs import job_logging
from fedshift.papers.fedmm_report import make_output
from fedshift.reporting import mark_rehearsal

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    make_output(sm.params.output, sm.params.spec, list(sm.input), dict(sm.output))
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
