"""Snakemake adapter: per-domain accuracy figure (PDF + PNG) from a tidy table."""

import pandas as pd

from fedshift.logs import job_logging
from fedshift.reporting import plot_domain_accuracy, save_figure

with job_logging(snakemake.log[0]):  # noqa: F821
    sm = snakemake  # noqa: F821
    fig = plot_domain_accuracy(pd.read_csv(sm.input[0]), sm.params.spec)
    save_figure(fig, sm.output.pdf, sm.output.png, dpi=200)
