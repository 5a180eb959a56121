"""Snakemake adapter: plot one FedPALS figure (PDF + PNG) from its tidy data."""

import pandas as pd

from fedshift.io import read_json
from fedshift.logs import job_logging
from fedshift.papers.fedpals_report import plot_curves, plot_sweep, plot_synthetic, plot_weights
from fedshift.reporting import save_figure

with job_logging(snakemake.log[0]):  # noqa: F821
    sm = snakemake  # noqa: F821
    spec = sm.params.spec
    data = pd.read_csv(sm.input.data)
    if spec["kind"] == "sweep":
        part = read_json(sm.input.partition[0]) if sm.input.partition else None
        fig = plot_sweep(data, spec["title"], spec["x"], part)
    elif spec["kind"] == "curves":
        fig = plot_curves(data, spec["title"], spec.get("metric", "accuracy"))
    else:
        fig = {"synthetic": plot_synthetic, "weights": plot_weights}[spec["kind"]](data, spec["title"])
    save_figure(fig, sm.output.pdf, sm.output.png, dpi=200)
