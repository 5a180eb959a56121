"""Snakemake adapter: client weights λ by Wasserstein distances to the target (WAFL eq. 9)."""

import torch

from fedshift.io import atomic_write
from fedshift.logs import job_logging
from fedshift.papers.wafl import load_data
from fedshift.papers.wafl_report import wasserstein_lambda
from fedshift.reporting import mark_rehearsal

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    data = load_data(sm.params.resolved, sm.input.prepared, sm.input.partition, torch.device("cpu"), sm.input.target[0])
    target = data["target_train"] if data["target_train"] is not None else data["target"][0]  # unlabelled inputs
    df = wasserstein_lambda([c.x for c in data["clients"]], target, max_points=sm.params.points,
                            seed=sm.params.resolved["partition"]["seed"])
    with atomic_write(sm.output[0]) as fh:
        df.to_csv(fh, index=False)
    log.info("W2 to the target: min %.3f, median %.3f, max %.3f; rho* = %.3f", df.w2.min(), df.w2.median(),
             df.w2.max(), df.rho_star.iloc[0])
    mark_rehearsal(sm.output, sm.config)  # the rehearsal's tables say so in their files
