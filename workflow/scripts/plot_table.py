"""Snakemake adapter: per-domain accuracy figure (PDF + PNG) from a tidy table."""

import matplotlib.pyplot as plt
import pandas as pd

from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.reporting import plot_domain_accuracy

with job_logging(snakemake.log[0]):  # noqa: F821
    sm = snakemake  # noqa: F821
    fig = plot_domain_accuracy(pd.read_csv(sm.input[0]), sm.params.spec)
    for fmt in ("pdf", "png"):
        with atomic_write(sm.output[fmt], "wb") as fh:
            # no creation date in the PDF: the same table gives the same bytes on every run and host
            fig.savefig(fh, format=fmt, dpi=200, metadata={"CreationDate": None} if fmt == "pdf" else None)
    plt.close(fig)
